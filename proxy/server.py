# Strategy: serve() runs what proxy/assembly.py built, as one nursery tree:
#
#   run(assembly)
#   ├── observers nursery: the request log's writer; it outlives the handlers so the records of
#   │   draining connections are still written
#   ├── services nursery: the SIGHUP reloader (proxy/reload.py), the held-requests service
#   │   (purgatory clocks, per-broker watchers and channels: proxy/held/service.py), and the
#   │   operators' HTTP endpoint (proxy/observability/http.py) when [metrics] listen is set, so
#   │   /readyz answers "shutting down" through the drain; cancelled once the handlers are done
#   ├── handlers nursery: one task per client connection (proxy/connection/client.py); it
#   │   outlives the accept loops so in-flight requests can drain on shutdown
#   └── accepting nursery (inside the shutdown scope): the listener service
#       (proxy/connection/listeners.py, which owns the accept loops in a nursery of its own)
#       and the metadata refresher (proxy/upstream/metadata.py)
#
# The SIGHUP reloader runs in the services nursery, so a SIGHUP is caught from before the proxy
# says it listens until the drain is over, with TLS or without. No module receives the server:
# every connection gets the assembly's ConnectionServices.
"""The proxy server: the nursery tree that runs what the process owns, and shutdown."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from proxy.address import Address
from proxy.assembly import Assembly, assemble
from proxy.config import Config, parse_host_port
from proxy.connection.listeners import ListenerFactory
from proxy.connection.services import ConnectionServices
from proxy.observability.http import serve_http
from proxy.observability.readiness import Readiness
from proxy.primitives.descriptors import PER_BROKER
from proxy.reload import reload_on_sighup
from proxy.upstream.dialer import Dialer
from proxy.upstream.metadata import refresh_metadata_forever

__all__ = ["Running", "run", "serve"]

log = logging.getLogger("purgatory_proxy.server")


@dataclass(frozen=True, slots=True)
class Running:
    """What serve() reports once it accepts: where, and the services it wired (for tests and
    the operator's tooling; nothing in the proxy reads it back)."""

    address: Address
    services: ConnectionServices
    readiness: Readiness


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
    """Build the process's parts (proxy/assembly.py: its arguments) and run them until
    ``shutdown`` is cancelled (``run``).

    Raises:
        StartupError: the proxy cannot start as configured (a port in use, certificates that
            do not load, a request log that cannot be written).
    """
    assembly = assemble(
        config, upstream_bootstrap, readiness=readiness, dialer=dialer, listeners=listeners
    )
    await run(assembly, shutdown, task_status=task_status)


async def run(
    assembly: Assembly,
    shutdown: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the proxy until ``shutdown`` is cancelled, then drain and return.

    Resource handling: cancelling ``shutdown`` closes every client listener at once;
    connections then get ``connections.shutdown_drain_ms`` to finish what they are doing
    before they are cancelled too; the request log then writes what is queued and closes. The
    HTTP endpoint stays up through the drain, answering /readyz with 503 "shutting down", so
    probes see why rather than a refused connection.

    Raises:
        StartupError: a listener cannot be bound.
    """
    config, services, readiness = assembly.config, assembly.services, assembly.readiness
    request_log, held = assembly.request_log, services.held
    drain_s = config.connections.shutdown_drain_ms / 1000
    async with trio.open_nursery() as observers:
        if request_log is not None:
            await observers.start(request_log.run)
        async with trio.open_nursery() as services_nursery:
            await services_nursery.start(
                reload_on_sighup, assembly.reloadable, services.metrics.tls_reloads
            )
            if held is not None:
                await services_nursery.start(held.run)
            async with trio.open_nursery() as handlers:
                with shutdown:
                    async with trio.open_nursery() as accepting:
                        address = await _accept(assembly, accepting, services_nursery, handlers)
                        task_status.started(Running(address, services, readiness))
                log.info("stopped accepting; draining connections for up to %.1f s", drain_s)
                handlers.cancel_scope.deadline = trio.current_time() + drain_s
                readiness.block("shutdown", "shutting down")
                services.drain.stop_reading()
            # Connections are gone: nothing waits in the purgatories any more.
            services_nursery.cancel_scope.cancel()
        if request_log is not None:
            # A log stuck on a dead disk must not hold the process: same budget as the drain.
            request_log.close()
            observers.cancel_scope.deadline = trio.current_time() + drain_s


async def _accept(
    assembly: Assembly,
    accepting: trio.Nursery,
    services_nursery: trio.Nursery,
    handlers: trio.Nursery,
) -> Address:
    """Start the listeners (connections run in ``handlers``), the metadata refresher and the
    HTTP endpoint; say where the proxy listens."""
    config, services, readiness = assembly.config, assembly.services, assembly.readiness
    metrics, listeners = services.metrics, assembly.listeners
    _, listen_port = parse_host_port(config.proxy.listen)
    address: Address = await accepting.start(listeners.run, listen_port, services, handlers)
    readiness.clear("listeners")
    accepting.start_soon(
        refresh_metadata_forever,
        list(assembly.upstream_bootstrap),
        config.upstream.connect_timeout_ms / 1000,
        assembly.dialer,
        config.upstream.metadata_refresh_ms / 1000,
        assembly.directory,
        metrics,
        readiness,
    )
    http = assembly.http
    if http is not None:
        services_nursery.start_soon(serve_http, http, metrics.registry, readiness,
                                    services_nursery, metrics.accept_failures)  # fmt: skip
        http_host, http_port = http.socket.getsockname()[:2]
        log.info("metrics endpoint on http://%s", Address(http_host, http_port))
    limit, descriptors = assembly.descriptor_limit, services.descriptors
    if limit is not None and descriptors is not None:  # (once bound: a failed start says one)
        log.info(
            "%s: %d for client connections' sockets and their own upstream connections "
            "(%d kept for the proxy, %d per broker); %s",
            limit.describe(), descriptors.capacity, config.connections.reserved_descriptors,
            PER_BROKER, listeners.admission.describe(),
        )  # fmt: skip
    log.info("purgatory-proxy listening on %s", address)
    return address
