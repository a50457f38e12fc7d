# Strategy: one nursery tree.
#
#   serve()
#   ├── observers nursery: the request log's writer; it outlives the handlers so the records of
#   │   draining connections are still written
#   ├── services nursery: the purgatories' clocks, the per-broker watchers and channels
#   │   (proxy/fetching.py), and the operators' HTTP endpoint (proxy/http.py) when [metrics]
#   │   listen is set, so /readyz answers "shutting down" through the drain; cancelled once
#   │   the handlers are done
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
import errno
import itertools
import logging
import signal
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import trio

from proxy.config import Config, parse_host_port
from proxy.errors import StartupError, UpstreamUnavailable
from proxy.fetching import Fetching
from proxy.http import serve_http
from proxy.memory import MemoryPool
from proxy.metrics import Metrics
from proxy.observer import Observer
from proxy.partition_state import TopicNames
from proxy.readiness import Readiness
from proxy.request_log import RequestLog
from proxy.routing import Address, Routing
from proxy.secure_upstream import SaslAuthenticationFailed, UpstreamSecurity
from proxy.tls import ServerTls, TlsHandshakeFailed
from proxy.upstream import fetch_cluster_metadata

__all__ = ["Proxy", "serve"]

log = logging.getLogger("purgatory_proxy.server")

#: accept() errors that mean "not now" (descriptor or memory limits), not a broken listener.
_ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_RETRY_S = 0.1


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
        request_log: RequestLog | None = None,
        readiness: Readiness | None = None,
    ) -> None:
        self.config = config
        # Why the proxy is not ready (/readyz); causes cleared as it comes up.
        self.readiness = readiness if readiness is not None else Readiness()
        self.readiness.block("listeners", "listeners not bound yet")
        self.readiness.block("metadata", "waiting for upstream metadata")
        self.upstream_bootstrap = upstream_bootstrap
        # TLS and SASL of every upstream connection, TLS of the listeners (issue 16).
        self.upstream_security = UpstreamSecurity.from_config(config.upstream)
        self.server_tls = _server_tls(config)
        self.pool = MemoryPool(
            config.memory.limit,
            int(config.memory.socket_request_max_bytes),
            tight_fraction=config.memory.tight_fraction,
        )
        self.metrics = Metrics(self.pool)
        # Every finished request is reported here (proxy/observer.py).
        self.observer = Observer(self.metrics, request_log)
        self.topic_names = TopicNames()
        # Held fetches and produces (issue 6); None: [fetch] hold = false, plain forwarding.
        self.fetching = Fetching(self) if config.fetch.hold else None
        self.routing = Routing(config.proxy.broker_ports, config.proxy.first_broker_port)
        listen_host, _ = parse_host_port(config.proxy.listen)
        self.listen_host = listen_host
        self.advertised_host = config.proxy.advertised_host or listen_host
        self._handlers = handlers
        self._accepting = accepting
        self._connection_ids = itertools.count(1)
        self.bootstrap_port = 0
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

    @property
    def stopping(self) -> bool:
        """Whether shutdown has begun (connections closing now close for that reason)."""
        return self._stopping

    def stop_reading(self) -> None:
        """Stop every connection from reading new requests; pending responses still flow."""
        self._stopping = True
        self.readiness.block("shutdown", "shutting down")
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
        log.info(
            "broker %d is served at %s:%d", node_id, self.listen_host, port,
            extra={"broker": node_id},
        )  # fmt: skip
        self._accepting.start_soon(self._accept_loop, listener, node_id)
        return port

    # -- connections -----------------------------------------------------------------------

    async def _accept_loop(self, listener: trio.SocketListener, node_id: int | None) -> NoReturn:
        """Accept forever; each connection runs in the handlers nursery (it may outlive us)."""
        from proxy.client import ClientConnection

        failing = False
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as error:
                    if error.errno not in _ACCEPT_RESOURCE_ERRORS:
                        raise
                    # Out of descriptors or kernel memory: the clients waiting in the backlog
                    # get in once connections close. Never end the listener for it (this is
                    # what trio.serve_listeners does too).
                    self.metrics.accept_failures.inc()
                    if not failing:  # once per streak; the counter has the rest
                        log.error("cannot accept a connection (%s); retrying every %.0f ms",
                                  error.strerror, _ACCEPT_RETRY_S * 1000)  # fmt: skip
                    failing = True
                    await trio.sleep(_ACCEPT_RETRY_S)
                    continue
                if failing:
                    log.info("accepting connections again")
                    failing = False
                self.metrics.connections_accepted.labels(
                    "bootstrap" if node_id is None else "broker"
                ).inc()
                if self.server_tls is not None:
                    self._handlers.start_soon(self._serve_tls, stream, node_id)
                    continue
                connection = ClientConnection(self, stream, node_id, next(self._connection_ids))
                self._handlers.start_soon(connection.run)

    async def _serve_tls(self, stream: trio.SocketStream, node_id: int | None) -> None:
        """TLS handshake (within connections.frame_timeout_ms), then serve the connection.

        Error handling: a failed or stalled handshake closes this connection with one log line.
        """
        from proxy.client import ClientConnection

        assert self.server_tls is not None
        timeout_s = self.config.connections.frame_timeout_ms / 1000
        try:
            secured = await self.server_tls.accept(stream, timeout_s)
        except TlsHandshakeFailed as error:
            peer = _peer(stream)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            log.warning(
                "closed client connection from %s: %s", peer, error,
                extra={"peer": str(peer), "broker": node_id, "reason": str(error)},
            )  # fmt: skip
            return
        await ClientConnection(self, secured, node_id, next(self._connection_ids)).run()

    async def serve_bootstrap(self, *, task_status: trio.TaskStatus[Address]) -> None:
        host, port = parse_host_port(self.config.proxy.listen)
        listener = _bind_listener(host, port)
        self.bootstrap_port = listener.socket.getsockname()[1]
        self.readiness.clear("listeners")
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
                    self.upstream_bootstrap,
                    self.config.upstream.connect_timeout_ms / 1000,
                    self.upstream_security,
                )
            except UpstreamUnavailable as error:
                if isinstance(error, SaslAuthenticationFailed):  # never holds the secret
                    self.readiness.block("upstream_auth", f"cannot authenticate upstream: {error}")
                self.metrics.metadata_refreshes.labels("failed").inc()
                if not failing:
                    log.warning(
                        "cannot fetch upstream metadata (will retry): %s", error,
                        extra={"reason": str(error)},
                    )  # fmt: skip
                failing = True
                await trio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
                continue
            if failing:
                log.info("upstream metadata reachable again")
            failing, backoff_s = False, 0.1
            self.metrics.metadata_refreshes.labels("ok").inc()
            self.learn_brokers(brokers)
            self.readiness.clear("upstream_auth")
            self.readiness.clear("metadata")
            await trio.sleep(self.config.upstream.metadata_refresh_ms / 1000)

    def upstream_for(self, node_id: int | None) -> list[Address]:
        """Where a connection on ``node_id``'s port (None: bootstrap) should be forwarded."""
        if node_id is not None:
            known = self.routing.upstream_of(node_id)
            return [known] if known else []
        known_nodes = [self.routing.upstream_of(node) for node in self.routing.nodes]
        return [*self.upstream_bootstrap, *(a for a in known_nodes if a is not None)]


def _server_tls(config: Config) -> ServerTls | None:
    if not config.proxy.tls.enabled:
        return None
    try:
        return ServerTls(config.proxy.tls)
    except (OSError, ssl.SSLError) as error:
        raise StartupError(f"[proxy.tls]: cannot load certificates: {error}") from None


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except OSError:
        return "?"
    return str(Address(host, port))


async def _reload_tls_on_sighup(tls: ServerTls) -> None:
    """Certificate rotation: each SIGHUP re-reads the listeners' certificate files."""
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        async for _ in signals:
            tls.reload()


def _bind_listener(host: str, port: int) -> trio.SocketListener:
    """A listening socket on host:port.

    Raises:
        StartupError: the address cannot be bound (in use, not local, no permission), in one
            line that names the address; the OSError stays attached as the cause.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError as error:
        sock.close()
        reason = (error.strerror or str(error)).lower()
        raise StartupError(f"cannot listen on {Address(host, port)}: {reason}") from error
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))


async def serve(
    config: Config,
    upstream_bootstrap: list[Address],
    shutdown: trio.CancelScope,
    *,
    readiness: Readiness | None = None,
    task_status: trio.TaskStatus[Proxy] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the proxy until ``shutdown`` is cancelled, then drain and return.

    Args:
        readiness: causes the caller blocks too (the embedded broker's exit); /readyz reports
            them beside the proxy's own.

    Resource handling: cancelling ``shutdown`` closes every client listener at once;
    connections then get ``connections.shutdown_drain_ms`` to finish what they are doing
    before they are cancelled too; the request log then writes what is queued and closes. The
    HTTP endpoint stays up through the drain, answering /readyz with 503 "shutting down", so
    probes see why rather than a refused connection.

    Raises:
        StartupError: a listener cannot be bound.
    """
    request_log = _request_log(config)
    # Bound before anything starts, so a port in use fails the start-up, not a running proxy.
    http = None
    if config.metrics.listen:
        http = _bind_listener(*parse_host_port(config.metrics.listen))
    async with trio.open_nursery() as observers:
        if request_log is not None:
            await observers.start(request_log.run)
        async with trio.open_nursery() as services:
            async with trio.open_nursery() as handlers:
                with shutdown:
                    async with trio.open_nursery() as accepting:
                        proxy = Proxy(
                            config, upstream_bootstrap, handlers, accepting, request_log, readiness
                        )
                        if proxy.fetching is not None:
                            await services.start(proxy.fetching.run)
                        address: Address = await accepting.start(proxy.serve_bootstrap)
                        accepting.start_soon(proxy.refresh_metadata_forever)
                        if proxy.server_tls is not None:
                            accepting.start_soon(_reload_tls_on_sighup, proxy.server_tls)
                        if http is not None:
                            services.start_soon(
                                serve_http, http, proxy.metrics.registry, proxy.readiness, services
                            )
                            http_host, http_port = http.socket.getsockname()[:2]
                            log.info("metrics endpoint on http://%s", Address(http_host, http_port))
                        log.info("purgatory-proxy listening on %s", address)
                        task_status.started(proxy)
                drain_s = config.connections.shutdown_drain_ms / 1000
                log.info("stopped accepting; draining connections for up to %.1f s", drain_s)
                handlers.cancel_scope.deadline = trio.current_time() + drain_s
                proxy.stop_reading()
            # Connections are gone: nothing waits in the purgatories any more.
            services.cancel_scope.cancel()
        if request_log is not None:
            # A log stuck on a dead disk must not hold the process: same budget as the drain.
            request_log.close()
            observers.cancel_scope.deadline = trio.current_time() + drain_s


def _request_log(config: Config) -> RequestLog | None:
    if not config.log.requests:
        return None
    return RequestLog(
        Path(config.log.requests),
        max_bytes=int(config.log.requests_max_bytes),
        backups=config.log.requests_backups,
        queue_lines=config.log.requests_queue_lines,
    )
