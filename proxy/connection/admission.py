# Strategy: Kafka's connection quotas (KIP-402, KIP-612) as pure bookkeeping the accept loops
# ask about each connection: total, per address, and creation rates (token buckets), checked
# from the cheapest to undo to the dearest. The excess is closed at accept, so a
# client learns at once to come back later. No trio, no sockets, no clock.
"""Connection limits at accept: total, per IP address, and creation rate (KIP-402, KIP-612)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from proxy.config import UNLIMITED

__all__ = ["ConnectionAdmission", "Refusal", "TokenBucket"]


class Refusal(NamedTuple):
    """Why a connection was refused: a metric label and the setting it hit."""

    reason: str  # max_connections, max_connections_per_ip, creation_rate, creation_rate_per_ip
    detail: str


class TokenBucket:
    """``rate_per_s`` tokens a second, at most one second's worth in hand (a burst of
    ``rate_per_s`` after a quiet second)."""

    __slots__ = ("_rate_per_s", "_tokens", "updated_s")

    def __init__(self, rate_per_s: float, now_s: float) -> None:
        self._rate_per_s = rate_per_s
        self._tokens = rate_per_s
        self.updated_s = now_s

    def take(self, now_s: float) -> bool:
        """Take a token if there is one."""
        self._refill(now_s)
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def has_token(self, now_s: float) -> bool:
        self._refill(now_s)
        return self._tokens >= 1

    def full_at(self, now_s: float) -> bool:
        """Whether the bucket is full (as good as a new one) at ``now_s``."""
        return self._tokens + (now_s - self.updated_s) * self._rate_per_s >= self._rate_per_s

    def _refill(self, now_s: float) -> None:
        elapsed_s = max(0.0, now_s - self.updated_s)
        self._tokens = min(self._rate_per_s, self._tokens + elapsed_s * self._rate_per_s)
        self.updated_s = now_s


class ConnectionAdmission:
    """Which accepted connections may be served (see the module header).

    Args:
        max_connections: open at once, all listeners (the descriptors they hold are counted
            apart: proxy/primitives/descriptors.py).
        max_connections_per_ip: open at once from one address.
        per_ip_overrides: address -> its own cap (normalized addresses).
        creation_rate: new connections per second, all addresses.
        creation_rate_per_ip: new connections per second from one address.

    A connection whose address is unknown (``ip`` None: not a socket) counts towards the
    total and the shared rate only.
    """

    def __init__(
        self,
        max_connections: int,
        max_connections_per_ip: int = UNLIMITED,
        per_ip_overrides: Mapping[str, int] | None = None,
        creation_rate: int = UNLIMITED,
        creation_rate_per_ip: int = UNLIMITED,
    ) -> None:
        self.max_connections = max_connections
        self._per_ip = max_connections_per_ip
        self._overrides = dict(per_ip_overrides or {})
        self._rate = creation_rate
        self._rate_per_ip = creation_rate_per_ip
        self._bucket: TokenBucket | None = None
        self._buckets: dict[str, TokenBucket] = {}
        self._prune_at = _PRUNE_FLOOR
        self._by_ip: dict[str, int] = {}
        #: Connections admitted and not yet released.
        self.open = 0

    def admit(self, ip: str | None, now_s: float) -> Refusal | None:
        """Count a new connection from ``ip`` in, or say why it is refused (then nothing is
        counted: there is nothing to release)."""
        if self.open >= self.max_connections:
            return Refusal(
                "max_connections",
                f"{self.open} client connections open (connections.max_connections)",
            )
        if ip is not None:
            cap = self._overrides.get(ip, self._per_ip)
            count = self._by_ip.get(ip, 0)
            if count >= cap:
                return Refusal(
                    "max_connections_per_ip",
                    f"{count} connections open from {ip} (connections.max_connections_per_ip"
                    f"{'_overrides' if ip in self._overrides else ''}: {cap})",
                )
        if not self._has_tokens(ip, now_s):
            return self._rate_refusal(ip, now_s)
        self.open += 1
        if ip is not None:
            self._by_ip[ip] = self._by_ip.get(ip, 0) + 1
        return None

    def describe(self) -> str:
        """The limits in force, in words (the start-up line)."""
        per_ip = self._per_ip
        total = self.max_connections
        limits = [
            f"at most {total} client connections at once"
            if total < UNLIMITED
            else "no limit on client connections at once (connections.max_connections)"
        ]
        if per_ip < UNLIMITED or self._overrides:
            overrides = f" ({len(self._overrides)} addresses with their own)"
            limits.append(f"{per_ip} per IP address{overrides if self._overrides else ''}")
        if self._rate < UNLIMITED:
            limits.append(f"{self._rate} new a second")
        if self._rate_per_ip < UNLIMITED:
            limits.append(f"{self._rate_per_ip} new a second per IP address")
        return ", ".join(limits)

    def release(self, ip: str | None) -> None:
        """A connection admitted from ``ip`` ended."""
        self.open -= 1
        if ip is None:
            return
        count = self._by_ip[ip] - 1
        if count:
            self._by_ip[ip] = count
        else:
            del self._by_ip[ip]

    def _has_tokens(self, ip: str | None, now_s: float) -> bool:
        """Take a token from the shared bucket and the address's, if both have one."""
        shared = None
        if self._rate < UNLIMITED:
            shared = self._bucket = self._bucket or TokenBucket(self._rate, now_s)
            if not shared.has_token(now_s):
                return False
        if ip is not None and self._rate_per_ip < UNLIMITED:
            bucket = self._buckets.get(ip)
            if bucket is None:
                self._maybe_prune(now_s)
                bucket = self._buckets[ip] = TokenBucket(self._rate_per_ip, now_s)
            if not bucket.take(now_s):
                return False
        if shared is not None:
            shared.take(now_s)
        return True

    def _rate_refusal(self, ip: str | None, now_s: float) -> Refusal:
        bucket = self._bucket
        if bucket is not None and not bucket.has_token(now_s):
            return Refusal(
                "creation_rate",
                f"more than {self._rate} new connections a second "
                "(connections.max_connection_creation_rate)",
            )
        return Refusal(
            "creation_rate_per_ip",
            f"more than {self._rate_per_ip} new connections a second from {ip} "
            "(connections.max_connection_creation_rate_per_ip)",
        )

    def _maybe_prune(self, now_s: float) -> None:
        """Drop full buckets (as good as new ones) once the table has doubled."""
        buckets = self._buckets
        if len(buckets) < self._prune_at:
            return
        self._buckets = {ip: b for ip, b in buckets.items() if not b.full_at(now_s)}
        self._prune_at = max(_PRUNE_FLOOR, 2 * len(self._buckets))


_PRUNE_FLOOR = 1024
