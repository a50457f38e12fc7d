# Strategy: one nursery tree.
#
#   serve()
#   ├── handlers nursery: one task per client connection (proxy/client.py); it outlives the
#   │   accept loops so in-flight requests can drain on shutdown
#   └── accepting nursery: the bootstrap accept loop, one accept loop per broker listener,
#       and the metadata refresher that learns brokers and binds their listeners
#
# Broker listeners are bound synchronously (stdlib socket, then wrapped for trio), so a
# response that names a broker the proxy has never seen can be rewritten to a real port before
# it is sent: the port exists by the time the client reads the address.
"""The proxy server: listeners, port per broker, connection tasks, shutdown."""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
from collections.abc import Iterator
from typing import NoReturn

import trio

from proxy.config import Config, parse_host_port
from proxy.errors import UpstreamUnavailable
from proxy.memory import MemoryPool
from proxy.routing import Address, Routing
from proxy.upstream import fetch_cluster_metadata

__all__ = ["Proxy", "serve"]

log = logging.getLogger("purgatory_proxy.server")


class Proxy:
    """What every connection task shares: config, pool, routing, listeners and counters.

    Task-safety: all state is touched only from trio tasks of one run, between checkpoints,
    so no locks are needed.
    """

    def __init__(
        self,
        config: Config,
        upstream_bootstrap: list[Address],
        handlers: trio.Nursery,
        accepting: trio.Nursery,
    ) -> None:
        self.config = config
        self.upstream_bootstrap = upstream_bootstrap
        self.pool = MemoryPool(
            config.memory.limit,
            int(config.memory.socket_request_max_bytes),
            tight_fraction=config.memory.tight_fraction,
        )
        self.routing = Routing(config.proxy.broker_ports, config.proxy.first_broker_port)
        listen_host, _ = parse_host_port(config.proxy.listen)
        self.listen_host = listen_host
        self.advertised_host = config.proxy.advertised_host or listen_host
        self._handlers = handlers
        self._accepting = accepting
        self._connection_ids = itertools.count(1)
        self.bootstrap_port = 0
        self.metadata_ready = trio.Event()
        self._reader_scopes: set[trio.CancelScope] = set()
        self._stopping = False

    # -- shutdown --------------------------------------------------------------------------

    @contextlib.contextmanager
    def reading(self) -> Iterator[trio.CancelScope]:
        """Scope of a connection's request reader; shutdown cancels it (no new requests)."""
        scope = trio.CancelScope()
        if self._stopping:
            scope.cancel()
        self._reader_scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._reader_scopes.discard(scope)

    def stop_reading(self) -> None:
        """Stop every connection from reading new requests; pending responses still flow."""
        self._stopping = True
        for scope in self._reader_scopes:
            scope.cancel()

    # -- addresses clients see -------------------------------------------------------------

    def advertise(self, node_id: int, upstream: Address) -> Address:
        """The address a client is told for broker ``node_id`` (binds its listener if new)."""
        self.routing.record_upstream(node_id, upstream)
        port = self.routing.proxy_port_of(node_id)
        if port is None:
            port = self._bind_broker_listener(node_id)
        return Address(self.advertised_host, port)

    def learn_brokers(self, brokers: dict[int, Address]) -> None:
        """Record a metadata response's brokers, binding listeners in ascending node id order."""
        for node_id in sorted(brokers):
            self.advertise(node_id, brokers[node_id])

    def _bind_broker_listener(self, node_id: int) -> int:
        wanted = self.routing.wanted_port(node_id)
        listener = _bind_listener(self.listen_host, wanted)
        port: int = listener.socket.getsockname()[1]
        self.routing.assign_port(node_id, port)
        log.info("broker %d is served at %s:%d", node_id, self.listen_host, port)
        self._accepting.start_soon(self._accept_loop, listener, node_id)
        return port

    # -- connections -----------------------------------------------------------------------

    async def _accept_loop(self, listener: trio.SocketListener, node_id: int | None) -> NoReturn:
        """Accept forever; each connection runs in the handlers nursery (it may outlive us)."""
        from proxy.client import ClientConnection

        async with listener:
            while True:
                stream = await listener.accept()
                connection = ClientConnection(self, stream, node_id, next(self._connection_ids))
                self._handlers.start_soon(connection.run)

    async def serve_bootstrap(self, *, task_status: trio.TaskStatus[Address]) -> None:
        host, port = parse_host_port(self.config.proxy.listen)
        listener = _bind_listener(host, port)
        self.bootstrap_port = listener.socket.getsockname()[1]
        address = Address(host, self.bootstrap_port)
        task_status.started(address)
        await self._accept_loop(listener, None)

    async def refresh_metadata_forever(self) -> NoReturn:
        """Learn the cluster's brokers now and every ``metadata_refresh_ms``.

        Error handling: an unreachable cluster is logged once per failure streak and retried
        with capped backoff; the proxy keeps serving whatever it already knows.
        """
        backoff_s = 0.1
        failing = False
        while True:
            try:
                brokers = await fetch_cluster_metadata(
                    self.upstream_bootstrap, self.config.upstream.connect_timeout_ms / 1000
                )
            except UpstreamUnavailable as error:
                if not failing:
                    log.warning("cannot fetch upstream metadata (will retry): %s", error)
                failing = True
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
                continue
            if failing:
                log.info("upstream metadata reachable again")
            failing, backoff_s = False, 0.1
            self.learn_brokers(brokers)
            self.metadata_ready.set()
            await trio.sleep(self.config.upstream.metadata_refresh_ms / 1000)

    def upstream_for(self, node_id: int | None) -> list[Address]:
        """Where a connection on ``node_id``'s port (None: bootstrap) should be forwarded."""
        if node_id is not None:
            known = self.routing.upstream_of(node_id)
            return [known] if known else []
        known_nodes = [self.routing.upstream_of(node) for node in self.routing.nodes]
        return [*self.upstream_bootstrap, *(a for a in known_nodes if a is not None)]


def _bind_listener(host: str, port: int) -> trio.SocketListener:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))


async def serve(
    config: Config,
    upstream_bootstrap: list[Address],
    shutdown: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[Proxy] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the proxy until ``shutdown`` is cancelled, then drain and return.

    Resource handling: cancelling ``shutdown`` closes every listener at once; connections then
    get ``connections.shutdown_drain_ms`` to finish what they are doing before they are
    cancelled too.
    """
    async with trio.open_nursery() as handlers:
        with shutdown:
            async with trio.open_nursery() as accepting:
                proxy = Proxy(config, upstream_bootstrap, handlers, accepting)
                address: Address = await accepting.start(proxy.serve_bootstrap)
                accepting.start_soon(proxy.refresh_metadata_forever)
                log.info("purgatory-proxy listening on %s", address)
                task_status.started(proxy)
        drain_s = config.connections.shutdown_drain_ms / 1000
        log.info("stopped accepting; draining connections for up to %.1f s", drain_s)
        handlers.cancel_scope.deadline = trio.current_time() + drain_s
        proxy.stop_reading()
