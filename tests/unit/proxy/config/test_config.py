"""The configuration: documented defaults, precedence, and errors that name the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from proxy.config import Config, ConfigError, load_config, parse_host_port

EXAMPLE = Path(__file__).resolve().parents[4] / "config.example.toml"


def _keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys |= _keys(annotation, f"{prefix}{name}.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


def _file_keys(table: dict[str, object], prefix: str = "") -> set[str]:
    keys = set()
    for name, value in table.items():
        if isinstance(value, dict) and value and not prefix.endswith("broker_ports."):
            keys |= _file_keys(value, f"{prefix}{name}.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


def test_example_documents_every_setting_with_its_default() -> None:
    document = tomllib.loads(EXAMPLE.read_text())
    assert _file_keys(document) == _keys(Config)
    assert load_config(EXAMPLE) == load_config()


def test_sizes_accept_suffixes(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[memory]\nlimit = "512MiB"\nsocket_request_max_bytes = "1MiB"\n')
    config = load_config(path)
    assert config.memory.limit == 512 * 1024 * 1024
    assert config.memory.socket_request_max_bytes == 1024 * 1024


def test_precedence_file_then_env_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[memory]\nlimit = "512MiB"\n[log]\nlevel = "DEBUG"\n')
    assert load_config(path).memory.limit == 512 * 1024 * 1024
    monkeypatch.setenv("PURGATORY_PROXY_MEMORY__LIMIT", "-1")
    config = load_config(path)
    assert config.memory.limit == -1
    assert config.log.level == "DEBUG"
    flags = {"memory": {"limit": "300MiB"}}
    assert load_config(path, flags).memory.limit == 300 * 1024 * 1024


def test_explicit_broker_ports(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[proxy.broker_ports]\n1 = 9093\n2 = 9094\n")
    assert load_config(path).proxy.broker_ports == {1: 9093, 2: 9094}


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[memory]\nlimitt = 1\n", "memory.limitt"),
        ("[memroy]\nlimit = 1\n", "memroy"),
        ('[memory]\nlimit = "lots"\n', "memory.limit"),
        ("[memory]\ntight_fraction = 1.5\n", "memory.tight_fraction"),
        ('[memory]\nlimit = "1MiB"\n', "memory.limit"),
        ('[proxy]\nlisten = "no-port"\n', "proxy.listen"),
        ('[proxy]\nlisten = "host:99999"\n', "proxy.listen"),
        ('[upstream]\nbootstrap = "a:1"\n', "upstream.bootstrap"),
        ("[proxy.broker_ports]\n1 = 0\n", "proxy.broker_ports.1"),
        ('[log]\nlevel = "LOUD"\n', "log.level"),
        ("[purgatory]\ntick_ms = 0\n", "purgatory.tick_ms"),
    ],
)
def test_bad_file_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(path)


@pytest.mark.parametrize(
    ("name", "value", "key"),
    [
        ("PURGATORY_PROXY_MEMORY__BOGUS", "1", "memory.bogus"),
        ("PURGATORY_PROXY_CONNECTIONS__IDLE_TIMEOUT_MS", "soon", "connections.idle_timeout_ms"),
    ],
)
def test_bad_env_values_name_the_key(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, key: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config()


def test_bad_flag_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"upstream\.bootstrap\.0"):
        load_config(None, {"upstream": {"bootstrap": ["nope"]}})


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("x = [")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(broken)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("[::1]:0", ("::1", 0)),
        ("host:65535", ("host", 65535)),
    ],
)
def test_parse_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize(
    "value", ["a:1,b:2", " a:1 , b:2 ", '["a:1", "b:2"]']
)  # fmt: skip
def test_env_lists_are_comma_separated_or_json(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PURGATORY_PROXY_UPSTREAM__BOOTSTRAP", value)
    assert load_config().upstream.bootstrap == ["a:1", "b:2"]


def test_errors_are_one_line_naming_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[purgatory]\ntick_mss = 1\n[upstream.tls]\nenabeld = true\n")
    monkeypatch.setenv("PURGATORY_PROXY_CONNECTIONS__IDLE_TIMEOUT_MS", "soon")
    with pytest.raises(ConfigError) as caught:
        load_config(path, {"proxy": {"listen": "nope"}}, {"proxy.listen": "--listen"})
    message = str(caught.value)
    assert "\n" not in message
    assert "proxy.listen: expected HOST:PORT, e.g. 127.0.0.1:9092" in message
    assert "(from --listen)" in message
    assert "nope" not in message  # a value may be a secret: errors never repeat one
    assert (
        "connections.idle_timeout_ms: Input should be a valid integer, unable to parse string "
        "as an integer (from environment variable PURGATORY_PROXY_CONNECTIONS__IDLE_TIMEOUT_MS)"
    ) in message
    assert f"unknown key 'purgatory.tick_mss' (did you mean 'purgatory.tick_ms'?) (in {path})" in (
        message
    )
    assert "unknown key 'upstream.tls.enabeld' (did you mean 'upstream.tls.enabled'?)" in message


def test_the_pool_must_hold_the_largest_request_and_says_how_to_fix_it() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {"memory": {"limit": "64MiB"}}, {"memory.limit": "--memory-limit"})
    assert str(caught.value) == (
        "invalid configuration: memory.limit (64MiB) is below "
        "memory.socket_request_max_bytes (100MiB), the largest request the pool must hold "
        "(Kafka's rule: queued.max.request.bytes >= socket.request.max.bytes): raise the "
        "limit (e.g. --memory-limit 100MiB) or lower the largest request (e.g. "
        "--max-request-size 64MiB: memory.socket_request_max_bytes) (from --memory-limit)"
    )
    lowered = load_config(None, {"memory": {"limit": "64MiB", "socket_request_max_bytes": "1MiB"}})
    assert lowered.memory.limit == 64 * 1024 * 1024
