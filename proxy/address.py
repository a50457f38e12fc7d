# Strategy: a host and a port, the one value nearly every subsystem passes around (routing,
# security, the held path's channels, log lines). It lives at the root, beside errors.py, so
# that taking it never imports a subsystem.
"""A network address: host and port, printed as Kafka and URLs spell it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Address"]


@dataclass(frozen=True, slots=True)
class Address:
    """Where a broker or a listener is; an IPv6 host prints in brackets."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
