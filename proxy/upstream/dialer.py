# Strategy: every upstream connection the proxy opens goes through one Dialer, handed to whoever
# needs one (client connections, broker channels) by serve(). In production it is
# UpstreamDialer, which is proxy/security/secure_upstream.open_upstream with the configured TLS,
# SASL and connect timeout; the in-process tests hand a dialer that returns one end of a trio memory
# stream pair whose other end is a scripted broker (tests/support/scripted_broker.py). An
# object, not a callback: it is a collaborator with one method, like a trio Listener.
"""How the proxy opens upstream connections: the Dialer protocol and the real one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import trio

from proxy.address import Address
from proxy.security.secure_upstream import UpstreamSecurity, open_upstream

__all__ = ["Dialer", "UpstreamDialer"]


class Dialer(Protocol):
    """Opens a connection to an upstream broker."""

    async def connect(self, address: Address) -> trio.abc.Stream:
        """A connected (and secured, authenticated) stream to ``address``.

        Raises:
            UpstreamUnavailable: it cannot be reached or refused the proxy's credentials.
        """
        ...


@dataclass(frozen=True, slots=True)
class UpstreamDialer:
    """The real dialer: TCP, then TLS and SASL when configured, within ``timeout_s``."""

    security: UpstreamSecurity
    timeout_s: float

    async def connect(self, address: Address) -> trio.abc.Stream:
        return await open_upstream(address, self.security, self.timeout_s)
