# Strategy: one client connection is two thin I/O pumps in one nursery around the sans-I/O
# Connection (state.py): the request pump (requests.py) reads, pays for and passes on requests;
# the response pump (responses.py) answers what is owed, in order. They meet in a Handoff. The
# connection owns an upstream connection to the broker it targets, opened when a request first
# needs it (upstream_link.py), and its face on the held path (proxy/held/holds.py: the fetches
# and produces the proxy holds for it). client_auth = "passthrough": the cluster must accept
# the client within connections.authentication_timeout_ms (`_auth_scope`).
#
# Any error ends the whole connection (both sides) with one ConnectionClosed reason, one log
# line and one metric label; nothing here can affect another connection.
"""One client connection: its two pumps, its upstream, and how it ends."""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable

import trio

from proxy.connection.client_auth import ClientAuthentication
from proxy.connection.handoff import Handoff
from proxy.connection.records import Recorder
from proxy.connection.requests import READ_AHEAD, RequestPump
from proxy.connection.responses import ResponsePump
from proxy.connection.services import ConnectionServices
from proxy.connection.state import Connection
from proxy.connection.upstream_link import UpstreamLink
from proxy.errors import (
    AuthenticationTimeout,
    ClientLeft,
    ClientProtocolError,
    ConnectionBroken,
    ConnectionClosed,
    UpstreamFailed,
)
from proxy.observability.stream_address import stream_address
from proxy.primitives.stream_deadlines import WriteTimeout
from proxy.primitives.stream_writer import StreamWriter
from wire.errors import WireError

__all__ = ["ClientConnection", "peer_name"]

log = logging.getLogger("purgatory_proxy.connection.client")

#: Close reasons that only say the client went away (logged at INFO, see _log_close).
_CLIENT_LEFT = frozenset({"client_closed", "broken", "shutdown"})
#: Responses a connection may owe before the proxy stops reading its requests. A client that
#: pipelines without reading its answers is back-pressured here instead of growing a queue.
_MAX_IN_FLIGHT = 1024


class ClientConnection:
    """A client's connection and the upstream connection that serves it."""

    def __init__(
        self,
        services: ConnectionServices,
        stream: trio.abc.Stream,
        node_id: int | None,
        connection_id: int,
    ) -> None:
        self._services = services
        self.client = stream
        self.node_id = node_id
        self.connection_id = connection_id
        self.peer = peer_name(stream)
        self.broker = "bootstrap" if node_id is None else str(node_id)
        # The response pump's only writer; its scope cuts a client that does not take an
        # answer (connections.send_timeout_ms, proxy/primitives/framed.py).
        send_scope = trio.CancelScope()
        out = StreamWriter(stream, WriteTimeout(send_scope, services.settings.send_timeout_s))
        self._conn = conn = Connection(_MAX_IN_FLIGHT)
        self._auth = auth = ClientAuthentication(services.passthrough)
        self._upstream = upstream = UpstreamLink(services, node_id, conn,
                                                 shared_sends=services.passthrough,
                                                 read_ahead=READ_AHEAD,
                                                 flush_before_wait=out)  # fmt: skip
        self._handoff = handoff = Handoff(conn, services.pool, upstream)
        held = services.held
        self._holds = None
        if held is not None:
            self._holds = held.connect(node_id, upstream, handoff.owed, services.brokers)
        # Passthrough: the connection must be accepted by the cluster before this deadline
        # (set when it starts to run, cleared by the first acceptance).
        self._auth_scope = trio.CancelScope()
        recorder = Recorder(services.observer, connection_id, self.broker)
        self._requests = RequestPump(services, stream, node_id, conn, handoff, upstream, auth,
                                     self._holds, recorder)  # fmt: skip
        self._responses = ResponsePump(services, out, send_scope, node_id, conn, handoff,
                                       upstream, auth, self._auth_scope, self._holds,
                                       recorder)  # fmt: skip

    def __repr__(self) -> str:
        target = "bootstrap" if self.node_id is None else f"broker {self.node_id}"
        return f"<ClientConnection #{self.connection_id} {self.peer} -> {target}>"

    async def run(self) -> None:
        """Serve the connection until either side closes or misbehaves.

        Resource handling: both streams are closed in ``finally``; the pool lease of a request
        being read is released by the request pump's own ``finally`` (cancellation included),
        and what the held path holds for the connection is given back here.
        """
        metrics = self._services.metrics
        metrics.connections_open.inc()
        internal = False
        auth_timeout_s = self._services.settings.authentication_timeout_s
        if not self._auth.accepted_once:
            self._auth_scope.deadline = trio.current_time() + auth_timeout_s
        try:
            # The upstream link's idle watch lives beside the pumps and ends with them.
            with self._auth_scope:
                async with trio.open_nursery() as beside:
                    self._upstream.bind(beside)
                    async with trio.open_nursery() as pumps:
                        pumps.start_soon(self._guard, pumps, self._responses.run)
                        await self._guard(pumps, self._requests.run)
                    beside.cancel_scope.cancel()
            if self._auth_scope.cancelled_caught:
                raise AuthenticationTimeout(
                    f"the cluster had not accepted the client within {auth_timeout_s:g} s of "
                    "its connecting (connections.authentication_timeout_ms)"
                )
        except ConnectionClosed as reason:
            self._conn.note_closed(reason)
        except Exception:
            # A bug of ours, not the client's: it must still end only this connection.
            internal = True
            log.exception("internal error on client connection %s; closing it", self)
        finally:
            self._handoff.end()
            if isinstance(self._conn.closed_by, UpstreamFailed):  # the broker died or hangs
                self._services.api_versions.forget(self.node_id)
            if self._holds is not None:
                self._holds.abandon()
            self._upstream.release_answer()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.client)
                await self._upstream.aclose()
            metrics.connections_open.dec()
            self._log_close(internal)

    def _log_close(self, internal: bool) -> None:
        reason = self._conn.closed_by
        if internal and reason is None:
            kind = "internal_error"
        elif reason is None:
            kind = "shutdown" if self._services.drain.stopping else "client_closed"
        else:
            kind = reason.kind
            if kind == "client_closed" and self._services.drain.stopping:
                kind = "shutdown"
        self._services.metrics.connections_closed.labels(kind).inc()
        message = str(reason) if reason is not None else ""
        if isinstance(reason, ClientLeft):
            log.debug("client connection %s ended: %s", self, message)
        elif message:
            # A client that goes away (even mid-frame, or leaving a broken pipe) is the
            # client's business, not a fault: INFO; anything the proxy ended it for: WARNING.
            log.log(
                logging.INFO if kind in _CLIENT_LEFT else logging.WARNING,
                "closed client connection %s: %s",
                self,
                message,
                extra={"connection": self.connection_id, "peer": str(self.peer),
                       "broker": self.node_id, "reason": message},
            )  # fmt: skip
        else:
            log.debug("client connection %s ended", self)

    async def _guard(
        self,
        nursery: trio.Nursery,
        pump: Callable[[], Awaitable[None]],
    ) -> None:
        """Run a pump; turn its expected failures into one close reason for the connection."""
        try:
            await pump()
            return
        except ConnectionClosed as reason:
            self._conn.note_closed(reason)
        except WireError as error:
            self._conn.note_closed(ClientProtocolError(f"protocol error: {error}"))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            self._conn.note_closed(_broken(error))
        nursery.cancel_scope.cancel()


#: What the OS says when the peer has gone: EPIPE (written to after the client closed and its
#: host answered with a reset), ECONNRESET (the client reset the connection).
_PEER_GONE = {
    errno.EPIPE: "the client closed the connection before its answers were all sent",
    errno.ECONNRESET: "the client reset the connection",
}


def _broken(error: trio.BrokenResourceError | trio.ClosedResourceError) -> ConnectionClosed:
    """Why a stream failed under the connection. The upstream side raises UpstreamFailed, so
    a broken stream here is the client's; a client that is simply gone is no fault."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__  # trio's error, under TLS another, then the OSError
    gone = _PEER_GONE.get(cause.errno or 0) if isinstance(cause, OSError) else None
    if gone is not None:
        return ClientLeft(gone)
    return ConnectionBroken(f"connection broke: {str(error) or type(error).__name__}")


def peer_name(stream: trio.abc.Stream) -> str:
    """The client's address for log lines ("?" when the stream has none), under any TLS."""
    return stream_address(stream)
