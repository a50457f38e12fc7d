# Strategy: serve() wires the shared resources and owns one nursery tree.
#
#   serve()
#   ├── observers nursery: the request log's writer; it outlives the handlers so the records of
#   │   draining connections are still written
#   ├── services nursery: the held-requests service (purgatory clocks, per-broker watchers and
#   │   channels: proxy/held/service.py), and the operators' HTTP endpoint
#   │   (proxy/observability/http.py) when [metrics] listen is set, so /readyz answers "shutting
#   │   down" through the drain; cancelled once the handlers are done
#   ├── handlers nursery: one task per client connection (proxy/connection/client.py); it
#   │   outlives the accept loops so in-flight requests can drain on shutdown
#   └── accepting nursery (inside the shutdown scope): the listener service
#       (proxy/connection/listeners.py, which owns the accept loops in a nursery of its own)
#       and the metadata refresher (proxy/upstream/metadata.py)
#
# The SIGHUP reloader (proxy/reload.py) runs in the services nursery, so a SIGHUP is caught
# from before the proxy says it listens until the drain is over, with TLS or without.
#
# The collaborators are explicit: a ConnectionServices value (the few settings connections read,
# pool, metrics, observer, broker directory, routing, held requests, drain) is what every
# connection gets; no module receives the server. Who binds sockets and who dials the upstream
# are parameters, so the in-process tests run serve() over trio memory streams against a
# scripted broker.
"""The proxy server: wiring, the nursery tree, shutdown."""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

import trio

from proxy.address import Address
from proxy.config import Config, parse_host_port
from proxy.connection.admission import ConnectionAdmission
from proxy.connection.api_versions import KnownApiVersions
from proxy.connection.drain import Drain
from proxy.connection.listeners import (
    ListenerFactory,
    Listeners,
    SocketListeners,
    bind_socket_listener,
)
from proxy.connection.services import ConnectionServices, ConnectionSettings
from proxy.errors import StartupError
from proxy.held.service import HeldRequests
from proxy.observability.http import serve_http
from proxy.observability.metrics import Metrics
from proxy.observability.observer import Observer
from proxy.observability.readiness import Readiness
from proxy.observability.request_log import RequestLog
from proxy.primitives.descriptors import PER_BROKER, DescriptorBudget, raise_descriptor_limit
from proxy.primitives.memory import MemoryPool
from proxy.reload import Reloadable, reload_on_sighup
from proxy.routing.directory import BrokerDirectory
from proxy.routing.table import Routing
from proxy.routing.topic_names import TopicNames
from proxy.security.secure_upstream import UpstreamSecurity
from proxy.security.tls import ServerTls
from proxy.upstream.dialer import Dialer, UpstreamDialer
from proxy.upstream.metadata import refresh_metadata_forever
from wire.codec import precompile
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

__all__ = ["Running", "serve"]

log = logging.getLogger("purgatory_proxy.server")


@dataclass(frozen=True, slots=True)
class Running:
    """What serve() reports once it accepts: where, and the services it wired (for tests and
    the operator's tooling; nothing in the proxy reads it back)."""

    address: Address
    services: ConnectionServices
    readiness: Readiness


def _server_tls(config: Config) -> ServerTls | None:
    if not config.proxy.tls.enabled:
        return None
    try:
        return ServerTls(config.proxy.tls)
    except (OSError, ssl.SSLError) as error:
        raise StartupError(f"[proxy.tls]: cannot load certificates: {error}") from None


async def serve(
    config: Config,
    upstream_bootstrap: list[Address],
    shutdown: trio.CancelScope,
    *,
    readiness: Readiness | None = None,
    dialer: Dialer | None = None,
    listeners: ListenerFactory | None = None,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the proxy until ``shutdown`` is cancelled, then drain and return.

    Args:
        readiness: causes the caller blocks too (the embedded broker's exit); /readyz reports
            them beside the proxy's own.
        dialer: how upstream connections are opened (default: TCP, TLS and SASL as
            configured); the in-process tests pass a scripted broker's.
        listeners: how client listeners are bound (default: TCP sockets); the in-process
            tests pass in-memory ones.

    Resource handling: cancelling ``shutdown`` closes every client listener at once;
    connections then get ``connections.shutdown_drain_ms`` to finish what they are doing
    before they are cancelled too; the request log then writes what is queued and closes. The
    HTTP endpoint stays up through the drain, answering /readyz with 503 "shutting down", so
    probes see why rather than a refused connection.

    Raises:
        StartupError: a listener cannot be bound.
    """
    readiness = readiness if readiness is not None else Readiness()
    readiness.block("listeners", "listeners not bound yet")
    readiness.block("metadata", "waiting for upstream metadata")
    request_log = _request_log(config)
    # Bound before anything starts, so a port in use fails the start-up, not a running proxy.
    http = None
    if config.metrics.listen:
        http = bind_socket_listener(*parse_host_port(config.metrics.listen))
    server_tls = _server_tls(config)
    connect_timeout_s = config.upstream.connect_timeout_ms / 1000
    client_dialer = dialer
    reloadable: list[Reloadable] = [server_tls] if server_tls is not None else []
    if dialer is None:
        # TLS and SASL of every upstream connection (issue 16); in passthrough, connections
        # for clients get TLS only, and the clients' own SASL goes through them.
        security = UpstreamSecurity.from_config(config.upstream.tls, config.upstream.sasl)
        reloadable += [security.tls] if security.tls is not None else []
        dialer = client_dialer = UpstreamDialer(security, connect_timeout_s)
        if config.proxy.client_auth == "passthrough":
            client_dialer = UpstreamDialer(security.without_sasl(), connect_timeout_s)
    pool = MemoryPool(
        config.memory.limit,
        int(config.memory.socket_request_max_bytes),
        tight_fraction=config.memory.tight_fraction,
    )
    metrics = Metrics(pool)
    metrics.attach_readiness(readiness)
    if server_tls is not None:  # failed handshakes by listener and reason class (issue 16)
        failures = metrics.tls_handshake_failures
        server_tls.on_failure = lambda listener, reason: failures.labels(listener, reason).inc()
    listen_host, listen_port = parse_host_port(config.proxy.listen)
    descriptors = limit = None
    if listeners is None:  # real sockets cost descriptors: counted against the process's limit
        limit = raise_descriptor_limit()
        descriptors = DescriptorBudget(limit.soft, config.connections.reserved_descriptors)
    client_listeners = Listeners(
        listen_host,
        listeners if listeners is not None else SocketListeners(),
        metrics,
        server_tls,
        config.connections.frame_timeout_ms / 1000,
        _admission(config),
        descriptors,
    )
    routing = Routing(config.proxy.broker_ports, config.proxy.first_broker_port)
    topic_names = TopicNames()
    directory = BrokerDirectory(
        routing, client_listeners, config.proxy.advertised_host or listen_host, topic_names
    )
    drain = Drain()
    for part in reloadable:  # both series from the start, so a rate of failures is defined
        for result in ("ok", "failed"):
            metrics.tls_reloads.labels(part.side, result)
    async with trio.open_nursery() as observers:
        if request_log is not None:
            await observers.start(request_log.run)
        async with trio.open_nursery() as services_nursery:
            await services_nursery.start(reload_on_sighup, reloadable, metrics.tls_reloads)
            held = None
            if config.fetch.hold:  # held fetches and produces (issue 6)
                # Every held fetch decodes and encodes these: compiled before the first client
                # (~40 ms, once per process) rather than inside its first fetch (~5 ms).
                precompile(FetchRequest)
                precompile(FetchResponse)
                held = HeldRequests(config, pool, metrics, topic_names, routing, dialer)
                await services_nursery.start(held.run)
            services = ConnectionServices(
                settings=ConnectionSettings.of(config),
                pool=pool,
                metrics=metrics,
                observer=Observer(metrics, request_log),  # every finished request goes here
                brokers=directory,
                routing=routing,
                bootstrap=tuple(upstream_bootstrap),
                held=held,
                drain=drain,
                client_dialer=client_dialer if client_dialer is not None else dialer,
                api_versions=KnownApiVersions(config.upstream.metadata_refresh_ms / 1000),
                descriptors=descriptors,
            )
            async with trio.open_nursery() as handlers:
                with shutdown:
                    async with trio.open_nursery() as accepting:
                        address: Address = await accepting.start(
                            client_listeners.run, listen_port, services, handlers
                        )
                        readiness.clear("listeners")
                        accepting.start_soon(
                            refresh_metadata_forever,
                            upstream_bootstrap,
                            connect_timeout_s,
                            dialer,
                            config.upstream.metadata_refresh_ms / 1000,
                            directory,
                            metrics,
                            readiness,
                        )
                        if http is not None:
                            services_nursery.start_soon(
                                serve_http, http, metrics.registry, readiness, services_nursery,
                                metrics.accept_failures,
                            )  # fmt: skip
                            http_host, http_port = http.socket.getsockname()[:2]
                            log.info("metrics endpoint on http://%s", Address(http_host, http_port))
                        if descriptors is not None and limit is not None:  # (once bound: a
                            # failed start says one thing)
                            log.info(
                                "%s: %d for client connections' sockets and their own upstream "
                                "connections (%d kept for the proxy, %d per broker); %s",
                                limit.describe(), descriptors.capacity,
                                config.connections.reserved_descriptors, PER_BROKER,
                                client_listeners.admission.describe(),
                            )  # fmt: skip
                        log.info("purgatory-proxy listening on %s", address)
                        task_status.started(Running(address, services, readiness))
                drain_s = config.connections.shutdown_drain_ms / 1000
                log.info("stopped accepting; draining connections for up to %.1f s", drain_s)
                handlers.cancel_scope.deadline = trio.current_time() + drain_s
                readiness.block("shutdown", "shutting down")
                drain.stop_reading()
            # Connections are gone: nothing waits in the purgatories any more.
            services_nursery.cancel_scope.cancel()
        if request_log is not None:
            # A log stuck on a dead disk must not hold the process: same budget as the drain.
            request_log.close()
            observers.cancel_scope.deadline = trio.current_time() + drain_s


def _admission(config: Config) -> ConnectionAdmission:
    connections = config.connections
    return ConnectionAdmission(
        connections.max_connections,
        connections.max_connections_per_ip,
        connections.max_connections_per_ip_overrides,
        connections.max_connection_creation_rate,
        connections.max_connection_creation_rate_per_ip,
    )


def _request_log(config: Config) -> RequestLog | None:
    """The request log, its file checked now: a path that cannot be written stops the start.

    Raises:
        StartupError: the file cannot be opened for appending (names the key and the reason).
    """
    if not config.log.requests:
        return None
    request_log = RequestLog(
        Path(config.log.requests),
        max_bytes=int(config.log.requests_max_bytes),
        backups=config.log.requests_backups,
        queue_lines=config.log.requests_queue_lines,
    )
    try:
        request_log.check_writable()
    except OSError as error:
        reason = (error.strerror or str(error)).lower()
        raise StartupError(
            f"log.requests (--request-log) {request_log.path}: cannot write the request log: "
            f"{reason}"
        ) from None
    return request_log
