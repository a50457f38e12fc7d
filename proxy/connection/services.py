# Strategy: the one value every client connection receives instead of the server: the shared
# resources serve() wired (config, pool, metrics, observer, broker directory, routing, dialer,
# held requests, drain). Frozen, so a connection cannot rewire what others share; a test
# harness builds its own with in-memory collaborators.
"""What client connections share: ConnectionServices."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.config import Config
from proxy.connection.api_versions import KnownApiVersions
from proxy.connection.drain import Drain
from proxy.descriptors import DescriptorBudget
from proxy.held.service import HeldRequests
from proxy.memory import MemoryPool
from proxy.metrics import Metrics
from proxy.observer import Observer
from proxy.rewrite import BrokerDirectory
from proxy.routing import Address, Routing
from proxy.upstream.dialer import Dialer

__all__ = ["ConnectionServices"]


@dataclass(frozen=True, slots=True)
class ConnectionServices:
    """What every client connection shares, wired by serve() (or a test harness).

    Attributes:
        brokers: the rewriter's view of brokers (advertising returns a port, binds nothing
            it has to start: proxy/connection/listeners.py).
        routing: where a connection on a broker's port (or the bootstrap port) goes upstream.
        bootstrap: the configured upstream bootstrap servers.
        held: held fetches and produces; None when ``[fetch] hold = false``.
        dialer: how the proxy's own upstream connections open (its TLS and SASL identity).
        client_dialer: how client connections' upstream connections open: the same, or
            without the proxy's SASL when clients authenticate themselves (passthrough).
        api_versions: the cluster's ApiVersions answers, to answer reconnecting clients
            (proxy identity only).
        descriptors: what a client connection's own upstream connection takes a descriptor
            from while it is open (None: not counted, in-memory tests).
    """

    config: Config
    pool: MemoryPool
    metrics: Metrics
    observer: Observer
    brokers: BrokerDirectory
    routing: Routing
    bootstrap: tuple[Address, ...]
    dialer: Dialer
    held: HeldRequests | None
    drain: Drain
    client_dialer: Dialer
    api_versions: KnownApiVersions
    descriptors: DescriptorBudget | None = None

    @property
    def passthrough(self) -> bool:
        """Clients authenticate to the cluster themselves (``[proxy] client_auth``)."""
        return self.config.proxy.client_auth == "passthrough"

    def upstream_for(self, node_id: int | None) -> list[Address]:
        """Where a connection on ``node_id``'s port (None: bootstrap) should be forwarded."""
        routing = self.routing
        if node_id is not None:
            known = routing.upstream_of(node_id)
            return [known] if known else []
        known_nodes = [routing.upstream_of(node) for node in routing.nodes]
        return [*self.bootstrap, *(a for a in known_nodes if a is not None)]
