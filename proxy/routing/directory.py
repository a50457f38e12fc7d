# Strategy: the addresses clients are told. Every broker a response names (Metadata,
# FindCoordinator, DescribeCluster, KIP-951 node_endpoints) goes through `advertise`, which records
# where the broker is upstream and returns advertised_host and the proxy port that stands for it (in
# SNI mode: the broker's own host name, on the one port). A broker seen for the first time gets its
# port here, synchronously, from the listener service (`Listeners.open_broker` binds the socket
# before returning, so the port accepts by the time a client reads it; its accept loop is started by
# the listener service's own task, never from inside a rewrite). Topic ids learnt from Metadata live
# here too: they are the other thing the rewriter teaches the proxy.
"""The broker directory: node id -> the address clients see, and topic id -> name."""

from __future__ import annotations

import errno
from typing import Protocol

from proxy.address import Address
from proxy.errors import BrokerPortUnavailable, StartupError
from proxy.routing.table import Routing
from proxy.routing.topic_names import TopicNames
from proxy.security.server_names import ServerNames

__all__ = ["BrokerDirectory", "BrokerPorts"]

#: Why a port as configured cannot be bound: taken, not an address of this host, privileged.
_PORT_REFUSED = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)


class BrokerPorts(Protocol):
    """Who binds a new broker's listener (proxy/connection/listeners.Listeners)."""

    def open_broker(self, node_id: int, wanted_port: int) -> int:
        """Bind broker ``node_id``'s listener (``wanted_port`` 0: any) and return its port."""
        ...


class BrokerDirectory:
    """What the rewriter (proxy/routing/rewrite.py) needs: advertise brokers, learn topic names.

    Args:
        routing: node id -> upstream address and proxy port.
        ports: binds a listener for a broker seen for the first time.
        advertised_host: the host clients are told.
        topic_names: topic id -> name, learnt from Metadata responses.
        names: SNI mode: each broker is told by its own host name (on one port), not
            advertised_host.
    """

    __slots__ = ("_ports", "advertised_host", "names", "routing", "topic_names")

    def __init__(
        self,
        routing: Routing,
        ports: BrokerPorts,
        advertised_host: str,
        topic_names: TopicNames,
        names: ServerNames | None = None,
    ) -> None:
        self.routing = routing
        self._ports = ports
        self.advertised_host = advertised_host
        self.topic_names = topic_names
        self.names = names

    def __repr__(self) -> str:
        return f"<BrokerDirectory {self.advertised_host} {self.routing!r}>"

    def advertise(self, node_id: int, upstream: Address) -> Address:
        """The address a client is told for broker ``node_id`` (its listener bound if new)."""
        routing = self.routing
        routing.record_upstream(node_id, upstream)
        port = routing.proxy_port_of(node_id)
        if port is None:
            port = self._open(node_id)
            routing.assign_port(node_id, port)
        host = self.advertised_host if self.names is None else self.names.of_broker(node_id)
        return Address(host, port)

    def _open(self, node_id: int) -> int:
        """Bind ``node_id``'s listener on the port routing wants for it.

        Raises:
            BrokerPortUnavailable: a pinned port cannot be bound (the message says which
                setting pins it and what to change).
            StartupError: a port of the OS's choosing cannot be bound (out of descriptors).
        """
        wanted = self.routing.wanted_port(node_id)
        try:
            return self._ports.open_broker(node_id, wanted)
        except StartupError as error:
            setting = self.routing.port_setting(node_id) if wanted else None
            cause = error.__cause__
            # Only what the port itself refuses is the setting's fault (out of descriptors,
            # say, is not: that is retried).
            if setting is None or getattr(cause, "errno", None) not in _PORT_REFUSED:
                raise
            raise BrokerPortUnavailable(
                f"{error}: it is broker {node_id}'s port, {setting}"
            ) from error

    def learn_brokers(self, brokers: dict[int, Address]) -> None:
        """Record a metadata response's brokers, binding listeners in ascending node id order."""
        for node_id in sorted(brokers):
            self.advertise(node_id, brokers[node_id])
