# Strategy: each kind of value a setting may hold is one Annotated type with its own check, so
# a section declares only what it holds. The checks say what they expected, never what they got:
# any setting may hold a secret (the error text rules are in proxy/config/_load.py).
"""The kinds of value settings hold: HOST:PORT, IP addresses, ports and sizes in bytes."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, ByteSize, Field, TypeAdapter

from proxy.address import normalize_ip

__all__ = [
    "CLIENT_MAX_REQUEST_BYTES",
    "EXPECTED_TEXTS",
    "UNLIMITED",
    "Bytes",
    "HostPort",
    "IpAddress",
    "OptionalHostPort",
    "PoolLimit",
    "Port",
    "format_bytes",
    "is_wildcard",
    "parse_host_port",
]

#: Kafka's default for every connection quota: no limit.
UNLIMITED = 2**31 - 1
#: What a HOST:PORT setting must look like (its examples are ours, never the value given).
_HOST_PORT_EXPECTED = "expected HOST:PORT, e.g. 127.0.0.1:9092 or [::1]:9092"


def parse_host_port(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6) and check the port's range."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(_HOST_PORT_EXPECTED)
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 0-65535")
    return host.strip("[]"), port


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is a wildcard bind address (0.0.0.0, ::), which no client can dial."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _host_port(value: str) -> str:
    parse_host_port(value)
    return value


def _optional_host_port(value: str) -> str:
    return _host_port(value) if value else value


def _ip_address(value: str) -> str:
    try:
        return normalize_ip(value)
    except ValueError:
        raise ValueError(f"expected an IP address, got {value!r}") from None


HostPort = Annotated[str, AfterValidator(_host_port)]
IpAddress = Annotated[str, AfterValidator(_ip_address)]
OptionalHostPort = Annotated[str, AfterValidator(_optional_host_port)]
Port = Annotated[int, Field(ge=1, le=65535)]

_BYTE_SIZE = TypeAdapter(ByteSize)
#: A whole size: a number, then at most a unit (pydantic's own pattern stops at the unit and
#: ignores what follows, so "256MB!" was 256 MB).
_SIZE_TEXT = re.compile(r"\s*(\d*\.?\d+)\s*([a-z]*)\s*", re.IGNORECASE)
_SIZE_EXPECTED = "expected a size in bytes such as 1048576, 64MiB or 100MB"
#: The validators' fixed texts: constants, so they hold no value given and stay whole.
EXPECTED_TEXTS = (_HOST_PORT_EXPECTED, _SIZE_EXPECTED)


def _byte_size(value: object) -> int:
    """A size in bytes from an int or a text like ``64MiB``; the whole text must be a size."""
    if isinstance(value, str):
        match = _SIZE_TEXT.fullmatch(value)
        if match is None:
            raise ValueError(_SIZE_EXPECTED)
        if match[2] and match[2].lower() not in ByteSize.byte_sizes:
            units = "B, KB, MB, GB, KiB, MiB, GiB, ..."
            raise ValueError(f"{_SIZE_EXPECTED}: the unit is not one of {units}")
        value = match[1] + match[2]
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(_SIZE_EXPECTED)
    size = int(_BYTE_SIZE.validate_python(value))
    if size < 0:
        raise ValueError(f"{_SIZE_EXPECTED}, not a negative one")
    return size


def _pool_limit(value: object) -> int:
    # Kafka's -1 ("disabled") arrives as an int from TOML but as a string from the environment.
    if value in (-1, "-1"):
        return -1
    return _byte_size(value)


Bytes = Annotated[ByteSize, BeforeValidator(_byte_size)]
PoolLimit = Annotated[int, BeforeValidator(_pool_limit)]


#: The largest request Kafka clients send by default (the producer's max.request.size, 1 MiB):
#: a pool or frame limit below it refuses ordinary produce requests.
CLIENT_MAX_REQUEST_BYTES = 1 << 20


def format_bytes(count: int) -> str:
    """A byte count as the config accepts it back: 64MiB rather than 67108864."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size}{unit}"
    return str(count)
