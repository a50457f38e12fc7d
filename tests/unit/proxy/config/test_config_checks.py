"""Settings checked where they are read (issue 28): whole sizes, an address clients can dial,
and memory advice that keeps real clients working."""

from __future__ import annotations

import re
import shlex

import pytest

from proxy.config import ConfigError, load_config

#: Kafka producers' default max.request.size: what a real client's requests reach.
CLIENT_MAX_REQUEST_BYTES = 1 << 20

FLAGS = {
    "memory.limit": "--memory-limit",
    "memory.socket_request_max_bytes": "--max-request-size",
    "proxy.listen": "--listen",
    "proxy.advertised_host": "--advertised-host",
}
SIZE_KEYS = [
    ("memory", "limit"),
    ("memory", "socket_request_max_bytes"),
    ("fetch", "response_max_bytes"),
    ("log", "requests_max_bytes"),
]


def _load(**sections: dict[str, object]) -> object:
    return load_config(None, sections, FLAGS)


@pytest.mark.parametrize(("section", "key"), SIZE_KEYS)
@pytest.mark.parametrize(
    ("text", "whole", "size"),
    [
        ("256MB!", "256MB", 256_000_000),
        ("256MB 1", " 256MB ", 256_000_000),
        ("1MiB,", "1MiB", 1 << 20),
        ("64 MiBs", "64 MiB", 64 << 20),
        ("512x", "512", 512),
        ("1.5KiB-", "1.5KiB", 1536),
    ],
)
def test_a_size_with_anything_after_it_is_an_error_naming_the_key(
    section: str, key: str, text: str, whole: str, size: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(**{section: {key: text}})
    assert f"{section}.{key}: expected a size in bytes" in str(caught.value)
    # The same size without the junk reads as before (the pool's own rule aside).
    sizes: dict[str, object] = {key: whole}
    if (section, key) == ("memory", "socket_request_max_bytes"):
        sizes["limit"] = -1
    if (section, key) == ("memory", "limit"):
        sizes["socket_request_max_bytes"] = 1
    assert getattr(getattr(load_config(None, {section: sizes}), section), key) == size


@pytest.mark.parametrize("listen", ["0.0.0.0:9192", "[::]:9192"])
def test_a_wildcard_listen_without_an_advertised_host_is_an_error_naming_the_flag(
    listen: str,
) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(proxy={"listen": listen})
    message = str(caught.value)
    assert "set --advertised-host to the name or address clients reach this proxy at" in message
    assert "(from --listen)" in message
    # With the host clients use, the same listener is fine.
    config = load_config(None, {"proxy": {"listen": listen, "advertised_host": "proxy.example"}})
    assert config.proxy.advertised_host == "proxy.example"


def test_a_wildcard_advertised_host_is_an_error_too() -> None:
    with pytest.raises(ConfigError) as caught:
        _load(proxy={"listen": "127.0.0.1:9092", "advertised_host": "0.0.0.0"})
    assert "proxy.advertised_host is a wildcard address" in str(caught.value)
    assert "(from --advertised-host)" in str(caught.value)


def _advice(message: str) -> dict[str, str]:
    """The flags one piece of advice suggests: the first "e.g. --flag VALUE ..." group."""
    suggestion = re.search(r"e\.g\. (--[a-z-]+ [^\s():;]+(?: --[a-z-]+ [^\s():;]+)*)", message)
    assert suggestion is not None, message
    words = shlex.split(suggestion[1])
    return dict(zip(words[::2], words[1::2], strict=True))


# Limits from 1 MiB up were advised well before (tests/unit/proxy/config/test_config.py has the
# whole message); below it the advice was --max-request-size <limit>, which refuses producers.
@pytest.mark.parametrize("limit", ["1KiB", "64KiB", "512KiB", "1000000"])
def test_the_memory_advice_when_followed_starts_a_proxy_real_clients_can_use(limit: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(memory={"limit": limit})
    message = str(caught.value)
    assert "(from --memory-limit)" in message
    for advice in re.split(r" or lower ", message):
        if "e.g." not in advice:
            continue
        flags = _advice(advice)
        memory = {"limit": flags.get("--memory-limit", limit)}
        if "--max-request-size" in flags:
            memory["socket_request_max_bytes"] = flags["--max-request-size"]
        config = load_config(None, {"memory": memory})  # the advice works ...
        # ... and a producer's default requests (max.request.size, 1 MiB) still fit.
        assert config.memory.socket_request_max_bytes >= CLIENT_MAX_REQUEST_BYTES
        assert config.memory.limit >= CLIENT_MAX_REQUEST_BYTES
