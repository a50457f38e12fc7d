# Strategy: a host and a port, the one value nearly every subsystem passes around (routing,
# security, the held path's channels, log lines). It lives at the root, beside errors.py, so
# that taking it never imports a subsystem.
"""A network address: host and port; an IP address spelt one way."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = ["Address", "normalize_ip"]


@dataclass(frozen=True, slots=True)
class Address:
    """Where a broker or a listener is; an IPv6 host prints in brackets."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def normalize_ip(host: str) -> str:
    """``host`` as one spelling per address (IPv4-mapped IPv6 as IPv4), so overrides and
    counts agree whichever family the listener has.

    Raises:
        ValueError: ``host`` is not an IP address.
    """
    address = ipaddress.ip_address(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)
