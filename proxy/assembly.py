# Strategy: what one proxy process owns, built before anything runs: the pool, metrics, the
# listener service, routing and the broker directory, the held-requests service, the dialers, the
# request log, the bound HTTP socket, and the ConnectionServices every connection receives.
# Building is synchronous and fails early (a port in use, certificates that do not load, a
# request log that cannot be written), so a failed start says one thing before any task runs.
# How the parts run, as a nursery tree, is proxy/server.py's; a second way to run them (a test, a
# worker process) takes the same Assembly.
"""Everything one proxy process owns, built from its configuration."""

from __future__ import annotations

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
from proxy.observability.metrics import Metrics
from proxy.observability.observer import Observer
from proxy.observability.readiness import Readiness
from proxy.observability.request_log import RequestLog
from proxy.primitives.descriptors import DescriptorBudget, DescriptorLimit, raise_descriptor_limit
from proxy.primitives.memory import MemoryPool
from proxy.reload import Reloadable
from proxy.routing.directory import BrokerDirectory
from proxy.routing.table import Routing
from proxy.routing.topic_names import TopicNames
from proxy.security.secure_upstream import UpstreamSecurity
from proxy.security.server_names import ServerNames
from proxy.security.tls import ServerTls
from proxy.upstream.dialer import Dialer, UpstreamDialer
from wire.codec import precompile
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

__all__ = ["Assembly", "assemble"]


@dataclass(frozen=True, slots=True)
class Assembly:
    """What one proxy process owns (see the module header).

    Attributes:
        services: what every client connection receives (pool, metrics, observer, broker
            directory, routing, held requests, drain, settings).
        listeners: the listener service (bootstrap and per-broker listeners).
        directory: the brokers as clients see them (what metadata refreshes update).
        dialer: how the proxy's own upstream connections open (metadata, held reads).
        http: the operators' endpoint, bound (None: [metrics] listen is empty).
        reloadable: the TLS files SIGHUP re-reads.
        request_log: the request log (None: off).
        descriptor_limit: the process's descriptor limit (None: in-memory listeners).
    """

    config: Config
    upstream_bootstrap: tuple[Address, ...]
    readiness: Readiness
    services: ConnectionServices
    listeners: Listeners
    directory: BrokerDirectory
    dialer: Dialer
    http: trio.SocketListener | None
    reloadable: tuple[Reloadable, ...]
    request_log: RequestLog | None
    descriptor_limit: DescriptorLimit | None

    @property
    def held(self) -> HeldRequests | None:
        return self.services.held


def assemble(
    config: Config,
    upstream_bootstrap: list[Address],
    *,
    readiness: Readiness | None = None,
    dialer: Dialer | None = None,
    listeners: ListenerFactory | None = None,
) -> Assembly:
    """Build what the process owns; nothing runs yet.

    Args:
        readiness: causes the caller blocks too (the embedded broker's exit); /readyz reports
            them beside the proxy's own.
        dialer: how upstream connections are opened (default: TCP, TLS and SASL as
            configured); the in-process tests pass a scripted broker's.
        listeners: how client listeners are bound (default: TCP sockets); the in-process
            tests pass in-memory ones.

    Raises:
        StartupError: the HTTP endpoint's port is in use, certificates do not load, or the
            request log cannot be written.
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
    reloadable: list[Reloadable] = [server_tls] if server_tls is not None else []
    client_dialer = dialer
    if dialer is None:
        # TLS and SASL of every upstream connection; in passthrough, connections for clients
        # get TLS only, and the clients' own SASL goes through them.
        connect_timeout_s = config.upstream.connect_timeout_ms / 1000
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
    if server_tls is not None:  # failed handshakes by listener and reason class
        failures = metrics.tls_handshake_failures
        server_tls.on_failure = lambda listener, reason: failures.labels(listener, reason).inc()
    for part in reloadable:  # both series from the start, so a rate of failures is defined
        for result in ("ok", "failed"):
            metrics.tls_reloads.labels(part.side, result)
    listen_host, _ = parse_host_port(config.proxy.listen)
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
        config.proxy.sni.advertised_port,
    )
    routing = Routing(config.proxy.broker_ports, config.proxy.first_broker_port)
    topic_names = TopicNames()
    directory = BrokerDirectory(
        routing,
        client_listeners,
        config.proxy.advertised_host or listen_host,
        topic_names,
        server_tls.names if server_tls is not None else None,
    )
    held = None
    if config.fetch.hold:
        # Every held fetch decodes and encodes these: compiled before the first client
        # (~40 ms, once per process) rather than inside its first fetch (~5 ms).
        precompile(FetchRequest)
        precompile(FetchResponse)
        held = HeldRequests(config, pool, metrics, topic_names, routing, dialer)
    services = ConnectionServices(
        settings=ConnectionSettings.of(config),
        pool=pool,
        metrics=metrics,
        observer=Observer(metrics, request_log),  # every finished request goes here
        brokers=directory,
        routing=routing,
        bootstrap=tuple(upstream_bootstrap),
        held=held,
        drain=Drain(),
        client_dialer=client_dialer if client_dialer is not None else dialer,
        api_versions=KnownApiVersions(config.upstream.metadata_refresh_ms / 1000),
        descriptors=descriptors,
    )
    return Assembly(config, tuple(upstream_bootstrap), readiness, services, client_listeners,
                    directory, dialer, http, tuple(reloadable), request_log, limit)  # fmt: skip


def _server_tls(config: Config) -> ServerTls | None:
    if not config.proxy.tls.enabled:
        return None
    try:
        return ServerTls(config.proxy.tls, names=_server_names(config))
    except (OSError, ssl.SSLError) as error:
        raise StartupError(f"[proxy.tls]: cannot load certificates: {error}") from None


def _server_names(config: Config) -> ServerNames | None:
    sni = config.proxy.sni
    return ServerNames(sni.bootstrap_host, sni.broker_host) if sni.enabled else None


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
