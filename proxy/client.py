# Strategy: one client connection = two tasks in one nursery, sharing a FIFO of response slots.
#
#   request pump:  read size -> check -> allocate from the pool (the KIP-72 mute) -> read body
#                  -> decide (forward / answer locally / close) -> push a slot -> write upstream
#                  -> release the memory
#   response pump: for each slot in order: read the upstream's next response (or take the
#                  local answer) -> rewrite broker addresses if the API carries any -> write it
#                  to the client
#
# The connection owns its upstream connection to the broker it targets, and Kafka answers the
# requests of one connection in order, so client order is preserved without re-sequencing and
# correlation ids pass through unchanged. Produce with acks=0 gets an "unanswered" slot: Kafka
# sends no response for it and the client expects none, but some brokers (Tansu) answer it
# anyway, so such an answer is recognised by its correlation id and dropped.
#
# Any error ends the whole connection (both sides) with one log line that says why; nothing
# here can affect another connection.
"""One client connection: reader (pool) -> upstream -> ordered writer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from proxy.framed import PeerClosed, receive_exactly
from proxy.rewrite import LocalAnswer, RequestPlan, plan_request, rewrite_response
from proxy.routing import Address
from wire.errors import WireError
from wire.framing import read_frame_size

if TYPE_CHECKING:
    from proxy.server import Proxy

__all__ = ["ClientConnection"]

log = logging.getLogger("purgatory_proxy.client")

_SIZE_BYTES = 4
#: api key, api version and correlation id: no request is shorter.
_MIN_REQUEST_BYTES = 8
#: Responses a connection may owe before the proxy stops reading its requests. A client that
#: pipelines without reading its answers is back-pressured here instead of growing a queue.
_MAX_IN_FLIGHT = 1024


class CloseConnection(Exception):
    """End this client connection; the message is the one log line that says why."""


@dataclass(slots=True)
class _Slot:
    """A response the client is owed, in request order."""

    correlation_id: int
    plan: RequestPlan | None
    local: bytes | None = None


class ClientConnection:
    """A client's TCP connection and the upstream connection that serves it."""

    def __init__(
        self, proxy: Proxy, stream: trio.SocketStream, node_id: int | None, connection_id: int
    ) -> None:
        self.proxy = proxy
        self.client = stream
        self.node_id = node_id
        self.connection_id = connection_id
        self.peer = _peer_name(stream)
        self._close_reason: str | None = None

    def __repr__(self) -> str:
        target = "bootstrap" if self.node_id is None else f"broker {self.node_id}"
        return f"<ClientConnection #{self.connection_id} {self.peer} -> {target}>"

    async def run(self) -> None:
        """Serve the connection until either side closes or misbehaves.

        Resource handling: both streams are closed in ``finally``; the pool lease of a request
        being read is released by the request pump's own ``finally`` (cancellation included).
        """
        upstream: trio.SocketStream | None = None
        try:
            upstream = await self._connect_upstream()
            slots_in, slots_out = trio.open_memory_channel[_Slot](_MAX_IN_FLIGHT)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, nursery, self._pump_responses, upstream, slots_out)
                await self._guard(nursery, self._pump_requests, upstream, slots_in)
        except CloseConnection as reason:
            self._note(str(reason))
        except Exception:
            # A bug of ours, not the client's: it must still end only this connection.
            log.exception("internal error on client connection %s; closing it", self)
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.client)
                if upstream is not None:
                    await trio.aclose_forcefully(upstream)
            if self._close_reason:
                log.warning("closed client connection %s: %s", self, self._close_reason)
            else:
                log.debug("client connection %s ended", self)

    async def _guard(
        self, nursery: trio.Nursery, pump: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        """Run a pump; turn its expected failures into one close reason for the connection."""
        try:
            await pump(*args)
        except CloseConnection as reason:
            self._note(str(reason))
            nursery.cancel_scope.cancel()
        except WireError as error:
            self._note(f"protocol error: {error}")
            nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            self._note(f"connection broke: {error or type(error).__name__}")
            nursery.cancel_scope.cancel()

    def _note(self, reason: str) -> None:
        if self._close_reason is None:
            self._close_reason = reason

    async def _connect_upstream(self) -> trio.SocketStream:
        candidates = self.proxy.upstream_for(self.node_id)
        if not candidates:
            raise CloseConnection(f"no upstream address known for broker {self.node_id}")
        timeout_s = self.proxy.config.upstream.connect_timeout_ms / 1000
        errors = []
        for address in candidates:
            try:
                with trio.fail_after(timeout_s):
                    return await trio.open_tcp_stream(address.host, address.port)
            except (OSError, trio.TooSlowError) as error:
                errors.append(f"{address}: {error or 'timed out'}")
        raise CloseConnection("upstream unreachable (" + "; ".join(errors) + ")")

    # -- requests --------------------------------------------------------------------------

    async def _pump_requests(
        self, upstream: trio.SocketStream, slots: trio.MemorySendChannel[_Slot]
    ) -> None:
        connections = self.proxy.config.connections
        max_frame = int(self.proxy.config.memory.socket_request_max_bytes)
        async with slots:
            with self.proxy.reading():
                while True:
                    size = await self._read_size(connections.idle_timeout_ms / 1000, max_frame)
                    if size is None:
                        return
                    deadline = trio.current_time() + connections.frame_timeout_ms / 1000
                    with await self.proxy.pool.allocate(size):
                        body = await self._read_body(size, deadline)
                        plan = plan_request(body, self.proxy)
                        if isinstance(plan, LocalAnswer):
                            await slots.send(_Slot(plan.correlation_id, None, plan.response))
                            continue
                        await slots.send(_Slot(plan.correlation_id, plan))
                        await upstream.send_all(size.to_bytes(4, "big") + body)

    async def _read_size(self, idle_timeout_s: float, max_frame: int) -> int | None:
        """The next frame's checked size, or None when the client closed between frames."""
        with trio.move_on_after(idle_timeout_s) as idle:
            try:
                header = await receive_exactly(self.client, _SIZE_BYTES)
            except PeerClosed as closed:
                if closed.received == 0:
                    return None
                raise CloseConnection("client closed the connection inside a frame size") from None
        if idle.cancelled_caught:
            raise CloseConnection(f"idle for {idle_timeout_s:g} s (connections.idle_timeout_ms)")
        size = read_frame_size(header, max_frame)
        if size < _MIN_REQUEST_BYTES:
            raise CloseConnection(f"frame of {size} bytes is too short to hold a request header")
        return size

    async def _read_body(self, size: int, deadline: float) -> bytes | bytearray:
        with trio.move_on_at(deadline) as slow:
            try:
                return await receive_exactly(self.client, size)
            except PeerClosed as closed:
                raise CloseConnection(
                    f"client closed the connection after {closed.received} of {size} bytes"
                ) from None
        assert slow.cancelled_caught
        raise CloseConnection(
            f"frame of {size} bytes not complete in time (connections.frame_timeout_ms)"
        )

    # -- responses -------------------------------------------------------------------------

    async def _pump_responses(
        self, upstream: trio.SocketStream, slots: trio.MemoryReceiveChannel[_Slot]
    ) -> None:
        unanswered: list[int] = []  # acks=0 produces since the last response, in order
        async with slots:
            async for slot in slots:
                if slot.plan is None:
                    assert slot.local is not None
                    await self.client.send_all(slot.local)
                    continue
                if not slot.plan.expects_response:
                    unanswered.append(slot.correlation_id)
                    continue
                body = await _next_owed_response(upstream, slot.correlation_id, unanswered)
                if slot.plan.rewrite:
                    body = rewrite_response(slot.plan, body, self.proxy)
                await self.client.send_all(len(body).to_bytes(4, "big") + body)
        # The request side closed the channel and every owed response has been sent.


async def _next_owed_response(
    upstream: trio.SocketStream, correlation_id: int, unanswered: list[int]
) -> bytes | bytearray:
    """The upstream's response to ``correlation_id``, skipping answers to acks=0 produces.

    Responses come in request order, so once the owed one arrives, no answer to an earlier
    acks=0 produce can follow: ``unanswered`` is emptied.
    """
    while True:
        body = await _read_response(upstream)
        answered = int.from_bytes(body[:4], "big", signed=True)
        if answered == correlation_id:
            unanswered.clear()
            return body
        if answered not in unanswered:
            raise CloseConnection(
                f"upstream answered correlation id {answered}, expected {correlation_id}"
            )
        del unanswered[: unanswered.index(answered) + 1]


async def _read_response(upstream: trio.SocketStream) -> bytes | bytearray:
    """The upstream's next response frame body (correlation id first)."""
    try:
        header = await receive_exactly(upstream, _SIZE_BYTES)
        return await receive_exactly(upstream, int.from_bytes(header, "big"))
    except PeerClosed:
        raise CloseConnection("upstream broker closed the connection") from None


def _peer_name(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except OSError:
        return "?"
    return str(Address(host, port))
