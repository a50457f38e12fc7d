# Strategy: the one value every client connection receives instead of the server: the shared
# resources serve() wired, and the few settings a connection reads (not the whole Config).
# Frozen, so a connection cannot rewire what others share.
"""What client connections share: ConnectionServices, ConnectionSettings."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.address import Address
from proxy.config import Config
from proxy.connection.api_versions import KnownApiVersions
from proxy.connection.drain import Drain
from proxy.held.service import HeldRequests
from proxy.observability.metrics import Metrics
from proxy.observability.observer import Observer
from proxy.primitives.descriptors import DescriptorBudget
from proxy.primitives.memory import MemoryPool
from proxy.routing.rewrite import BrokerDirectory
from proxy.routing.table import Routing
from proxy.upstream.dialer import Dialer

__all__ = ["ConnectionServices", "ConnectionSettings"]


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """The settings a client connection reads (proxy/config/ says what each means).

    Attributes:
        sasl_request_max_bytes: the largest frame while a passthrough client's SASL exchange
            is under way; None when the listener has no such phase (the proxy's identity, or
            an upstream without SASL).
        passthrough: clients authenticate to the cluster themselves (``[proxy] client_auth``).
    """

    idle_timeout_s: float
    frame_timeout_s: float
    send_timeout_s: float
    authentication_timeout_s: float
    upstream_idle_timeout_ms: int
    upstream_answer_grace_s: float
    request_max_bytes: int
    sasl_request_max_bytes: int | None
    passthrough: bool

    @classmethod
    def of(cls, config: Config) -> ConnectionSettings:
        connections, memory = config.connections, config.memory
        passthrough = config.proxy.client_auth == "passthrough"
        sasl = passthrough and bool(config.upstream.sasl.mechanism)
        return cls(
            idle_timeout_s=connections.idle_timeout_ms / 1000,
            frame_timeout_s=connections.frame_timeout_ms / 1000,
            send_timeout_s=connections.send_timeout_ms / 1000,
            authentication_timeout_s=connections.authentication_timeout_ms / 1000,
            upstream_idle_timeout_ms=connections.upstream_idle_timeout_ms,
            upstream_answer_grace_s=connections.upstream_answer_grace_ms / 1000,
            request_max_bytes=int(memory.socket_request_max_bytes),
            sasl_request_max_bytes=int(memory.unauthenticated_request_max_bytes) if sasl else None,
            passthrough=passthrough,
        )


@dataclass(frozen=True, slots=True)
class ConnectionServices:
    """What every client connection shares, wired by serve() (or a test harness).

    Attributes:
        settings: the few settings a connection reads.
        brokers: the rewriter's view of brokers (advertising returns a port, binds nothing
            it has to start: proxy/connection/listeners.py).
        routing: where a connection on a broker's port (or the bootstrap port) goes upstream.
        bootstrap: the configured upstream bootstrap servers.
        held: held fetches and produces; None when ``[fetch] hold = false``.
        client_dialer: how client connections' upstream connections open: the proxy's own
            dialer, or without the proxy's SASL when clients authenticate themselves
            (passthrough).
        api_versions: the cluster's ApiVersions answers, to answer reconnecting clients
            (proxy identity only).
        descriptors: what a client connection's own upstream connection takes a descriptor
            from while it is open (None: not counted, in-memory tests).
    """

    settings: ConnectionSettings
    pool: MemoryPool
    metrics: Metrics
    observer: Observer
    brokers: BrokerDirectory
    routing: Routing
    bootstrap: tuple[Address, ...]
    held: HeldRequests | None
    drain: Drain
    client_dialer: Dialer
    api_versions: KnownApiVersions
    descriptors: DescriptorBudget | None = None

    @property
    def passthrough(self) -> bool:
        """Clients authenticate to the cluster themselves (``[proxy] client_auth``)."""
        return self.settings.passthrough

    def upstream_for(self, node_id: int | None) -> list[Address]:
        """Where a connection on ``node_id``'s port (None: bootstrap) should be forwarded."""
        routing = self.routing
        if node_id is not None:
            known = routing.upstream_of(node_id)
            return [known] if known else []
        known_nodes = [routing.upstream_of(node) for node in routing.nodes]
        return [*self.bootstrap, *(a for a in known_nodes if a is not None)]
