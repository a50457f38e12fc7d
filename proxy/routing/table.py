# Strategy: the proxy has one listener per upstream broker, so a client that was told "node N
# is at advertised_host:P" lands on port P and is forwarded to broker N. This module is the
# pure bookkeeping behind that: which upstream address each node id has (it can change when a
# broker moves) and which proxy port each node id got (it never changes for the life of the
# process, so addresses handed to clients stay valid). Binding the listeners is the server's job.
"""Node id <-> proxy port and node id -> upstream address."""

from __future__ import annotations

from proxy.address import Address

__all__ = ["Routing"]


class Routing:
    """Where each broker is upstream, and which proxy port stands for it.

    Ports come from the explicit ``broker_ports`` mapping when it names the node, else the next
    consecutive port from ``first_broker_port``, else (``first_broker_port == 0``) whatever free
    port the OS gives the listener. Nodes are numbered in the order the server assigns them, which
    is ascending node id within one metadata response, so a restart against the same cluster
    gives the same ports.
    """

    def __init__(self, explicit_ports: dict[int, int], first_broker_port: int) -> None:
        self._explicit = dict(explicit_ports)
        self._next_port = first_broker_port
        self._upstream: dict[int, Address] = {}
        self._proxy_port: dict[int, int] = {}

    def __repr__(self) -> str:
        pairs = ", ".join(f"{node}->{port}" for node, port in sorted(self._proxy_port.items()))
        return f"<Routing {pairs}>"

    @property
    def nodes(self) -> list[int]:
        return sorted(self._upstream)

    def upstream_of(self, node_id: int) -> Address | None:
        return self._upstream.get(node_id)

    def proxy_port_of(self, node_id: int) -> int | None:
        return self._proxy_port.get(node_id)

    def record_upstream(self, node_id: int, address: Address) -> None:
        """Remember (or update) where ``node_id`` lives upstream."""
        self._upstream[node_id] = address

    def wanted_port(self, node_id: int) -> int:
        """The port to bind for a node that has none yet (0 means: let the OS choose)."""
        if node_id in self._explicit:
            return self._explicit[node_id]
        if self._next_port == 0:
            return 0
        taken = set(self._proxy_port.values()) | set(self._explicit.values())
        port = self._next_port
        while port in taken:
            port += 1
        return port

    def port_setting(self, node_id: int) -> str | None:
        """Which setting pins ``node_id``'s port and what to change, in words for an error;
        None when the OS chooses the port (nothing to change)."""
        if node_id in self._explicit:
            return f"which [proxy.broker_ports] pins: map node {node_id} to a free port there"
        if self._next_port == 0:
            return None
        return (
            "counted up from proxy.first_broker_port in node-id order: set a first_broker_port "
            "whose ports are free, or 0 to let the OS choose them"
        )

    def assign_port(self, node_id: int, port: int) -> None:
        """Record the port actually bound for ``node_id``; it stays for the process's life."""
        if node_id in self._proxy_port:
            raise ValueError(f"node {node_id} already has port {self._proxy_port[node_id]}")
        self._proxy_port[node_id] = port
        if node_id not in self._explicit and self._next_port:
            self._next_port = port + 1
