# Strategy: the listener service owns every client listener and its accept loop (bootstrap,
# and one per broker listener as `open_broker` binds them, synchronously, from inside response
# rewriting). Each accepted connection is admitted (admission.py, then a descriptor), does its
# bounded TLS handshake in its own task, and runs in the handlers nursery, which outlives the
# accept loops so in-flight requests drain on shutdown. In SNI mode the bootstrap listener is
# the only one: the server name of each connection's TLS hello says which broker it is for
# (proxy/security/sni.py), and `open_broker` binds nothing.
"""The client listeners: bootstrap and per-broker ports, accept loops, TLS handshakes."""

from __future__ import annotations

import itertools
import logging
import math
import socket
from dataclasses import dataclass
from typing import NoReturn, Protocol, cast

import trio

from proxy.address import Address, normalize_ip
from proxy.connection.admission import ConnectionAdmission, Refusal
from proxy.connection.client import ClientConnection, peer_name
from proxy.connection.services import ConnectionServices
from proxy.errors import StartupError
from proxy.observability.metrics import Metrics
from proxy.primitives.accepting import accept_or_wait
from proxy.primitives.descriptors import DescriptorBudget
from proxy.security.tls import ServerTls, TlsHandshakeFailed

__all__ = [
    "ListenerFactory",
    "Listeners",
    "SocketListeners",
    "bind_socket_listener",
    "peer_ip",
]

log = logging.getLogger("purgatory_proxy.server")

#: Refusals of one reason are logged at most this often (the counter has every one).
_REFUSAL_LOG_INTERVAL_S = 10.0

AnyListener = trio.abc.Listener[trio.abc.Stream]


class ListenerFactory(Protocol):
    """Binds listeners (real sockets, or in-memory ones in tests)."""

    def bind(self, host: str, port: int) -> tuple[AnyListener, int]:
        """A listener on host:port (0: any) and the port it got.

        Raises:
            StartupError: the address cannot be bound.
        """
        ...


class SocketListeners:
    """The real ListenerFactory: TCP sockets with SO_REUSEADDR."""

    def bind(self, host: str, port: int) -> tuple[AnyListener, int]:
        listener = bind_socket_listener(host, port)
        bound: int = listener.socket.getsockname()[1]
        return cast(AnyListener, listener), bound


@dataclass(frozen=True, slots=True)
class _BrokerListener:
    listener: AnyListener
    node_id: int


class Listeners:
    """Client listeners and their accept loops.

    Args:
        listen_host: where every listener is bound.
        factory: how listeners are bound.
        metrics: accepted, refused connections and accept failures are counted.
        server_tls: TLS of every listener, or None for plaintext.
        handshake_timeout_s: bound of a TLS handshake (connections.frame_timeout_ms).
        admission: the connection limits.
        descriptors: what client connections' sockets take a descriptor from (None: not
            counted, in-memory listeners).
        advertised_port: SNI mode's port told to clients for every broker (0: the bound one).
    """

    def __init__(
        self,
        listen_host: str,
        factory: ListenerFactory,
        metrics: Metrics,
        server_tls: ServerTls | None,
        handshake_timeout_s: float,
        admission: ConnectionAdmission,
        descriptors: DescriptorBudget | None = None,
        advertised_port: int = 0,
    ) -> None:
        self.listen_host = listen_host
        self._factory = factory
        self._metrics = metrics
        self._server_tls = server_tls
        self._handshake_timeout_s = handshake_timeout_s
        self._new_send, self._new_receive = trio.open_memory_channel[_BrokerListener](math.inf)
        self._connection_ids = itertools.count(1)
        self.admission = admission
        self._descriptors = descriptors
        self._refusals_logged_s: dict[str, float] = {}
        self._refusals_unlogged: dict[str, int] = {}
        self._advertised_port = advertised_port
        #: SNI mode: the port every broker is told at, once the listener is bound.
        self._told_port = 0

    def __repr__(self) -> str:
        return f"<Listeners on {self.listen_host}>"

    @property
    def one_port(self) -> bool:
        """SNI mode: the bootstrap port serves every broker, told apart by the TLS hello."""
        return self._server_tls is not None and self._server_tls.names is not None

    def open_broker(self, node_id: int, wanted_port: int) -> int:
        """Bind broker ``node_id``'s listener now and return its port; ``run`` accepts on it.
        In SNI mode nothing is bound: the port clients are told for every broker.

        Raises:
            StartupError: the port cannot be bound.
        """
        if self.one_port:
            assert self._told_port, "a broker is advertised only once the listener is bound"
            return self._told_port
        listener, port = self._factory.bind(self.listen_host, wanted_port)
        log.info(
            "broker %d is served at %s:%d", node_id, self.listen_host, port,
            extra={"broker": node_id},
        )  # fmt: skip
        self._new_send.send_nowait(_BrokerListener(listener, node_id))
        if self._descriptors is not None:
            self._descriptors.add_broker()
        return port

    async def run(
        self,
        bootstrap_port: int,
        services: ConnectionServices,
        handlers: trio.Nursery,
        *,
        task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Bind the bootstrap listener (its address is what ``task_status`` reports), then
        accept on it and on every broker listener as they are opened, until cancelled."""
        listener, port = self._factory.bind(self.listen_host, bootstrap_port)
        self._told_port = self._advertised_port or port
        async with trio.open_nursery() as accepting:
            accepting.start_soon(self._accept_loop, listener, None, services, handlers)
            task_status.started(Address(self.listen_host, port))
            async for new in self._new_receive:
                accepting.start_soon(
                    self._accept_loop, new.listener, new.node_id, services, handlers
                )

    async def _accept_loop(
        self,
        listener: AnyListener,
        node_id: int | None,
        services: ConnectionServices,
        handlers: trio.Nursery,
    ) -> NoReturn:
        """Accept forever; each connection the limits admit runs in the handlers nursery (it
        may outlive us), the others are closed at once."""
        metrics = self._metrics
        accepted = metrics.connections_accepted.labels("bootstrap" if node_id is None else "broker")
        where = "the bootstrap listener" if node_id is None else f"broker {node_id}'s listener"
        async with listener:
            while True:
                stream = await accept_or_wait(listener, metrics.accept_failures, where)
                ip = peer_ip(stream)
                refusal = self._admit(ip)
                if refusal is not None:
                    await trio.aclose_forcefully(stream)
                    self._refused(refusal, ip)
                    continue
                accepted.inc()
                handlers.start_soon(self._serve, stream, node_id, services, ip)

    def _admit(self, ip: str | None) -> Refusal | None:
        """Count a new connection in (the limits, then a descriptor), or say why not."""
        refusal = self.admission.admit(ip, trio.current_time())
        budget = self._descriptors
        if refusal is None and budget is not None and not budget.try_take():
            self.admission.release(ip)
            refusal = Refusal(
                "descriptors",
                f"client connections hold all {budget.capacity} descriptors the process can "
                "spare (connections.reserved_descriptors and each broker's kept out of "
                "RLIMIT_NOFILE)",
            )
        return refusal

    def _refused(self, refusal: Refusal, ip: str | None) -> None:
        """Count a refused connection; log it unless its reason was logged in the last 10 s
        (the next line says how many went unlogged)."""
        reason = refusal.reason
        self._metrics.connections_refused.labels(reason).inc()
        now_s = trio.current_time()
        last_s = self._refusals_logged_s.get(reason)
        if last_s is not None and now_s - last_s < _REFUSAL_LOG_INTERVAL_S:
            self._refusals_unlogged[reason] = self._refusals_unlogged.get(reason, 0) + 1
            return
        self._refusals_logged_s[reason] = now_s
        unlogged = self._refusals_unlogged.pop(reason, 0)
        more = f"; {unlogged} more refused for this since the last such line" if unlogged else ""
        log.warning(
            "refused a client connection from %s: %s%s", ip or "?", refusal.detail, more,
            extra={"peer": ip, "reason": reason},
        )  # fmt: skip

    async def _serve(
        self,
        stream: trio.abc.Stream,
        node_id: int | None,
        services: ConnectionServices,
        ip: str | None,
    ) -> None:
        """Serve an admitted connection (after its TLS handshake, if any); its place in the
        limits is given back when it ends, however it ends."""
        try:
            if self._server_tls is not None:
                await self._serve_tls(stream, node_id, services)
            else:
                await ClientConnection(services, stream, node_id, next(self._connection_ids)).run()
        finally:
            self.admission.release(ip)
            if self._descriptors is not None:
                self._descriptors.give()

    async def _serve_tls(
        self, stream: trio.abc.Stream, node_id: int | None, services: ConnectionServices
    ) -> None:
        """TLS handshake (within connections.frame_timeout_ms), then serve the connection.

        Error handling: a failed or stalled handshake closes this connection with one log line.
        """
        tls = self._server_tls
        assert tls is not None
        socket_stream = cast(trio.SocketStream, stream)
        try:
            if self.one_port:  # the hello's server name says which broker (or bootstrap)
                secured, node_id = await tls.accept_named(socket_stream, self._handshake_timeout_s)
            else:
                listener = "bootstrap" if node_id is None else f"broker {node_id}"
                secured = await tls.accept(socket_stream, self._handshake_timeout_s, listener)
        except TlsHandshakeFailed as error:
            peer = peer_name(stream)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            log.warning(
                "closed client connection from %s: %s", peer, error,
                extra={"peer": str(peer), "broker": node_id, "reason": str(error)},
            )  # fmt: skip
            return
        await ClientConnection(services, secured, node_id, next(self._connection_ids)).run()


def peer_ip(stream: trio.abc.Stream) -> str | None:
    """The client's IP address (one spelling per address), or None when the stream is not a
    socket's (the in-process tests' memory streams)."""
    if not isinstance(stream, trio.SocketStream):
        return None
    try:
        return normalize_ip(stream.socket.getpeername()[0])
    except (OSError, ValueError):
        return None


def bind_socket_listener(host: str, port: int) -> trio.SocketListener:
    """A listening socket on host:port.

    Raises:
        StartupError: the address cannot be bound (in use, not local, no permission), in one
            line that names the address; the OSError stays attached as the cause.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock: socket.socket | None = None
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)  # EMFILE lands here, not in bind
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError as error:
        if sock is not None:
            sock.close()
        reason = (error.strerror or str(error)).lower()
        raise StartupError(f"cannot listen on {Address(host, port)}: {reason}") from error
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))
