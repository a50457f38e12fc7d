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
# Held requests (issue 6, proxy/fetching.py; off with [fetch] hold = false):
#   - a Fetch on a broker port is answered by the proxy: the request pump applies it to the
#     proxy's fetch session and sends a sessionless first look upstream unless the proxy knows
#     there is nothing new; the response pump reads that answer in turn and lets
#     Fetching.answer hold the fetch in the purgatory; the response is built by the proxy.
#   - a Produce with acks=1/all waits for its answer in the produce purgatory, at most its
#     timeout_ms; then the client gets REQUEST_TIMED_OUT and the late answer is dropped like
#     an acks=0 answer. Upstream frames are read by a cancel-safe FrameReader for that reason.
#
# Any error ends the whole connection (both sides) with one log line that says why; nothing
# here can affect another connection.
#
# Observation: each slot carries its request's timings (arrival, time muted, time written
# upstream); when the response has been written to the client (or, for acks=0, when the request
# has been written upstream) one RequestRecord goes to the server's Observer (metrics + request
# log). That costs a few clock reads per request and a two-byte peek at the response's
# top-level error code where the schema puts it at a fixed offset (proxy/error_peek.py).
"""One client connection: reader (pool) -> upstream -> ordered writer."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from proxy.delayed import DelayedProduce
from proxy.error_peek import peek_error_code
from proxy.errors import UpstreamUnavailable
from proxy.fetching import FetchTicket
from proxy.framed import FrameReader, PeerClosed, receive_exactly, receive_frame
from proxy.request_log import RequestRecord
from proxy.rewrite import (
    LocalAnswer,
    RequestPlan,
    advertise_node_endpoints,
    plan_request,
    produce_timed_out,
    rewrite_response,
)
from proxy.routing import Address
from proxy.secure_upstream import open_upstream
from wire.apis import API_BY_KEY, ApiKey, response_header_version
from wire.codec import decode, encode, encode_parts
from wire.errors import WireError
from wire.framing import frame as framed
from wire.framing import read_frame_size, size_prefix
from wire.headers import (
    ResponseHeader,
    encode_request_header,
    encode_response_header,
    parse_response_header,
    peek_request_header,
)
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

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
    """End this client connection; the message is the one log line that says why.

    ``kind`` is the reason's label in the connections-closed metric.
    """

    def __init__(self, message: str, kind: str = "protocol_error") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class _Slot:
    """A response the client is owed, in request order, and its request's timings.

    Times are ``trio.current_time()`` seconds except ``ts`` (epoch seconds, for the log).
    """

    correlation_id: int
    plan: RequestPlan | None
    local: bytes | None
    arrival_s: float
    ts: float
    muted_s: float
    request_bytes: int
    sent_s: float = 0.0
    local_api: tuple[int, int] = (0, 0)  # (api key, version) of a locally answered request
    fetch: FetchTicket | None = None  # a Fetch the proxy answers itself (issue 6)


class ClientConnection:
    """A client's TCP connection and the upstream connection that serves it."""

    def __init__(
        self, proxy: Proxy, stream: trio.abc.Stream, node_id: int | None, connection_id: int
    ) -> None:
        self.proxy = proxy
        self.client = stream
        self.node_id = node_id
        self.connection_id = connection_id
        self.peer = _peer_name(stream)
        self.broker = "bootstrap" if node_id is None else str(node_id)
        self._observer = proxy.observer
        # Held fetches and produces; fetches only on broker ports (a bootstrap connection may
        # reach any broker, and sessions belong to one).
        self._fetching = proxy.fetching
        self._hold_fetches = proxy.fetching is not None and node_id is not None
        self._tickets: set[FetchTicket] = set()  # their pool leases are released on close
        self._fetch_turn = trio.Semaphore(1)
        # The produce whose answer the response pump awaits under a deadline, and the scope
        # its expiry cancels (see _pump_responses).
        self._held_produce: _Slot | None = None
        self._produce_wait = trio.CancelScope()
        self._close_reason: str | None = None
        self._close_kind = "client_closed"

    def __repr__(self) -> str:
        target = "bootstrap" if self.node_id is None else f"broker {self.node_id}"
        return f"<ClientConnection #{self.connection_id} {self.peer} -> {target}>"

    async def run(self) -> None:
        """Serve the connection until either side closes or misbehaves.

        Resource handling: both streams are closed in ``finally``; the pool lease of a request
        being read is released by the request pump's own ``finally`` (cancellation included).
        """
        upstream: trio.abc.Stream | None = None
        metrics = self.proxy.metrics
        metrics.connections_open.inc()
        try:
            upstream = await self._connect_upstream()
            metrics.upstream_open.inc()
            slots_in, slots_out = trio.open_memory_channel[_Slot](_MAX_IN_FLIGHT)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guard, nursery, self._pump_responses, upstream, slots_out)
                await self._guard(nursery, self._pump_requests, upstream, slots_in)
        except CloseConnection as reason:
            self._note(str(reason), reason.kind)
        except Exception:
            # A bug of ours, not the client's: it must still end only this connection.
            self._note("", "internal_error")
            log.exception("internal error on client connection %s; closing it", self)
        finally:
            for ticket in self._tickets:
                ticket.release()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.client)
                if upstream is not None:
                    await trio.aclose_forcefully(upstream)
                    metrics.upstream_open.dec()
            metrics.connections_open.dec()
            kind = self._close_kind
            if kind == "client_closed" and self.proxy.stopping:
                kind = "shutdown"
            metrics.connections_closed.labels(kind).inc()
            if self._close_reason:
                log.warning(
                    "closed client connection %s: %s",
                    self,
                    self._close_reason,
                    extra={"connection": self.connection_id, "peer": str(self.peer),
                           "broker": self.node_id, "reason": self._close_reason},
                )  # fmt: skip
            else:
                log.debug("client connection %s ended", self)

    async def _guard(
        self, nursery: trio.Nursery, pump: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        """Run a pump; turn its expected failures into one close reason for the connection."""
        try:
            await pump(*args)
        except CloseConnection as reason:
            self._note(str(reason), reason.kind)
            nursery.cancel_scope.cancel()
        except WireError as error:
            self._note(f"protocol error: {error}", "protocol_error")
            nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            self._note(f"connection broke: {error or type(error).__name__}", "broken")
            nursery.cancel_scope.cancel()

    def _note(self, reason: str, kind: str) -> None:
        if self._close_reason is None:
            self._close_reason = reason
            self._close_kind = kind

    async def _connect_upstream(self) -> trio.abc.Stream:
        candidates = self.proxy.upstream_for(self.node_id)
        if not candidates:
            self.proxy.metrics.upstream_connects.labels("failed").inc()
            raise CloseConnection(
                f"no upstream address known for broker {self.node_id}", "upstream"
            )
        timeout_s = self.proxy.config.upstream.connect_timeout_ms / 1000
        errors = []
        security = self.proxy.upstream_security
        for address in candidates:
            try:
                # TLS and the proxy's own SASL identity when configured (issue 16).
                stream = await open_upstream(address, security, timeout_s)
                self.proxy.metrics.upstream_connects.labels("ok").inc()
                return stream
            except UpstreamUnavailable as error:
                self.proxy.metrics.upstream_connects.labels("failed").inc()
                errors.append(str(error))
        raise CloseConnection("upstream unreachable (" + "; ".join(errors) + ")", "upstream")

    # -- requests --------------------------------------------------------------------------

    async def _pump_requests(
        self, upstream: trio.abc.Stream, slots: trio.MemorySendChannel[_Slot]
    ) -> None:
        """Read, check, pay for and forward requests until the client closes.

        Timeouts use one cancel scope for the whole connection whose deadline moves with the
        phase (idle between frames, frame once its size is read, none while muted or
        forwarding): cheaper than a fresh scope per read, which showed in profiles.
        """
        connections = self.proxy.config.connections
        idle_s = connections.idle_timeout_ms / 1000
        frame_s = connections.frame_timeout_ms / 1000
        max_frame = int(self.proxy.config.memory.socket_request_max_bytes)
        pool = self.proxy.pool
        timeout = trio.CancelScope()
        size = 0
        async with slots:
            with self.proxy.reading(), timeout:
                while True:
                    size = 0  # between frames: the idle timeout applies
                    timeout.deadline = trio.current_time() + idle_s
                    size_prefix = await self._read_size_prefix()
                    if size_prefix is None:
                        return
                    size = _checked_size(size_prefix, max_frame)
                    arrival_s, ts = trio.current_time(), time.time()
                    timeout.deadline = math.inf  # muting is the proxy's doing, not the client's
                    # Muted time is time parked in the pool, not the checkpoint of a free
                    # allocation: try first, park only when the pool is out of memory.
                    lease, muted_s = pool.try_allocate(size), 0.0
                    if lease is None:
                        lease = await pool.allocate(size)
                        muted_s = trio.current_time() - arrival_s
                    with lease:
                        timeout.deadline = trio.current_time() + frame_s
                        frame = await self._read_body(size_prefix, size)
                        timeout.deadline = math.inf
                        body = memoryview(frame)[_SIZE_BYTES:]
                        plan = plan_request(body, self.proxy)
                        if isinstance(plan, LocalAnswer):
                            slot = _Slot(plan.correlation_id, None, plan.response,
                                         arrival_s, ts, muted_s, size + _SIZE_BYTES)  # fmt: skip
                            slot.local_api = peek_request_header(body)[:2]
                            del frame, body  # the pool's again: do not keep it alive
                            await slots.send(slot)
                            continue
                        slot = _Slot(plan.correlation_id, plan, None,
                                     arrival_s, ts, muted_s, size + _SIZE_BYTES)  # fmt: skip
                        slot.fetch = self._fetch_ticket(plan, body)
                        if slot.fetch is None:
                            # Set before the slot is queued: the response pump may take it
                            # (and start a held produce's clock) before send() returns.
                            slot.sent_s = trio.current_time()
                            await slots.send(slot)
                            await upstream.send_all(frame)
                            # The lease ends with this block: the buffer must not outlive it
                            # (a parked connection would keep its last frame alive).
                            del frame, body
                            if not plan.expects_response:
                                self._report(slot, None, 0, trio.current_time(), "no_response")
                            continue
                        del frame, body
                    # A fetch the proxy answers itself; the request's memory is free again.
                    await self._start_fetch(upstream, slots, slot)
        if timeout.cancelled_caught:
            if size:  # the frame's size had been read: the client stalled inside it
                raise CloseConnection(
                    f"frame of {size} bytes not complete in time (connections.frame_timeout_ms)",
                    "frame_timeout",
                )
            raise CloseConnection(
                f"idle for {idle_s:g} s (connections.idle_timeout_ms)", "idle_timeout"
            )

    def _fetch_ticket(self, plan: RequestPlan, body: memoryview) -> FetchTicket | None:
        """A Fetch this connection holds in the proxy (None: forward the request as it is)."""
        if not self._hold_fetches or plan.header.api_key != ApiKey.FETCH:
            return None
        assert self._fetching is not None and self.node_id is not None
        version = plan.header.api_version
        request = decode(FetchRequest, body[plan.body_offset :], version)
        if request.replica_id >= 0:
            return None  # a follower's fetch: not a client's, not ours to hold
        return self._fetching.plan(self.node_id, request, version)

    async def _start_fetch(
        self, upstream: trio.abc.Stream, slots: trio.MemorySendChannel[_Slot], slot: _Slot
    ) -> None:
        """Queue a held fetch's slot; send its immediate upstream fetch if it needs one.

        The immediate fetch goes on this connection's own upstream connection, in request
        order, so the response pump reads its answer like any other; its response budget is
        taken from the pool first (KIP-72), which may mute this connection.
        """
        ticket = slot.fetch
        assert ticket is not None and slot.plan is not None and self._fetching is not None
        # One fetch at a time holds a response budget: a client that pipelines fetches and
        # never reads the answers waits here (TCP back-pressure) instead of draining the pool.
        await self._fetch_turn.acquire()
        self._tickets.add(ticket)
        request_frame = None
        if ticket.ask_upstream:
            pool = self.proxy.pool
            budget = self._fetching.response_max_bytes
            lease = pool.try_allocate(budget)
            if lease is None:
                parked_s = trio.current_time()
                lease = await pool.allocate(budget)
                slot.muted_s += trio.current_time() - parked_s
            lease.hand_off()  # the response pump releases it
            ticket.lease = lease
            header = slot.plan.header
            request_frame = framed(
                encode_request_header(header),
                encode(self._fetching.immediate_request(ticket), header.api_version),
            )
        slot.sent_s = trio.current_time()
        await slots.send(slot)
        if request_frame is not None:
            await upstream.send_all(request_frame)

    async def _read_size_prefix(self) -> bytes | bytearray | None:
        """The next frame's 4 size bytes, or None when the client closed between frames."""
        try:
            return await receive_exactly(self.client, _SIZE_BYTES)
        except PeerClosed as closed:
            if closed.received == 0:
                return None
            raise CloseConnection(
                "client closed the connection inside a frame size", "client_closed"
            ) from None

    async def _read_body(self, size_prefix: bytes | bytearray, size: int) -> bytearray:
        """The whole frame, prefix included, read straight into one buffer."""
        try:
            return await receive_frame(self.client, bytes(size_prefix), size)
        except PeerClosed as closed:
            raise CloseConnection(
                f"client closed the connection after {closed.received} of {size} bytes",
                "client_closed",
            ) from None

    # -- responses -------------------------------------------------------------------------

    async def _pump_responses(
        self, upstream: trio.abc.Stream, slots: trio.MemoryReceiveChannel[_Slot]
    ) -> None:
        reader = FrameReader(upstream)
        # Requests whose answers may come and must be skipped, in request order: acks=0
        # produces (Kafka sends nothing, Tansu answers) and produces the proxy already answered
        # REQUEST_TIMED_OUT.
        unanswered: list[int] = []
        async with slots:
            while True:
                # One cancel scope serves every held produce until one expires: its expiry
                # cancels the wait for its answer, the only thing awaited while it is held. (A
                # scope per produce cost ~15 us, more than the rest of holding it.)
                self._produce_wait = trio.CancelScope()
                with self._produce_wait:
                    await self._send_responses(slots, reader, unanswered)
                    return  # the request side closed the channel; every response was sent
                slot = self._held_produce
                assert slot is not None and slot.plan is not None
                unanswered.append(slot.correlation_id)  # its answer may still come: skip it
                timed_out = produce_timed_out(slot.plan)
                await self.client.send_all(timed_out)
                self._report(slot, None, len(timed_out), trio.current_time(), "timeout")

    async def _send_responses(
        self, slots: trio.MemoryReceiveChannel[_Slot], reader: FrameReader, unanswered: list[int]
    ) -> None:
        """Answer each slot in order; returns when the request side has closed the channel."""
        async for slot in slots:
            plan = slot.plan
            if plan is None:
                assert slot.local is not None
                await self.client.send_all(slot.local)
                self._report(slot, None, len(slot.local), trio.current_time(), "ok")
                continue
            if not plan.expects_response:
                unanswered.append(slot.correlation_id)
                continue
            if slot.fetch is not None:
                await self._answer_fetch(slot, slot.fetch, reader, unanswered)
                continue
            if plan.produced is not None and self._fetching is not None:
                frame = await self._held_produce_answer(slot, plan, reader, unanswered)
            else:
                frame = await _next_owed_response(reader, slot.correlation_id, unanswered)
            received_s = trio.current_time()
            header = plan.header
            body = memoryview(frame)[_SIZE_BYTES:]
            error_code = peek_error_code(header.api_key, header.api_version, body)
            out: bytes | bytearray = frame
            if plan.rewrite:
                rewritten = rewrite_response(plan, body, self.proxy)
                if rewritten is not body:  # re-encoded: the only case that copies
                    out = size_prefix(len(rewritten)) + rewritten
            await self.client.send_all(out)
            self._report(slot, error_code, len(out), received_s,
                         "error" if error_code else "ok")  # fmt: skip

    async def _held_produce_answer(
        self, slot: _Slot, plan: RequestPlan, reader: FrameReader, unanswered: list[int]
    ) -> bytearray:
        """The upstream's answer to a produce, held in the produce purgatory meanwhile.

        If its timeout_ms passes first, the DelayedProduce's expiry cancels
        ``self._produce_wait`` and ``_pump_responses`` answers ``self._held_produce`` with
        REQUEST_TIMED_OUT. A produce that was answered wakes the fetches held on its
        partitions.
        """
        fetching, produced = self._fetching, plan.produced
        assert fetching is not None and produced is not None
        if produced.timeout_ms <= 0:
            frame = await _next_owed_response(reader, slot.correlation_id, unanswered)
        else:
            waited_ms = math.floor((trio.current_time() - slot.sent_s) * 1000)
            operation = DelayedProduce(max(0, produced.timeout_ms - waited_ms), self._produce_wait)
            self._held_produce = slot
            fetching.produces.try_complete_else_watch(operation, ())
            frame = await _next_owed_response(reader, slot.correlation_id, unanswered)
            operation.force_complete()
            self._held_produce = None
        names = fetching.names
        fetching.produced(
            [names.key(name, topic_id, index)
             for name, topic_id, indexes in produced.topics for index in indexes]
        )  # fmt: skip
        return frame

    async def _answer_fetch(
        self, slot: _Slot, ticket: FetchTicket, reader: FrameReader, unanswered: list[int]
    ) -> None:
        """Build, hold and send the response to a fetch the proxy terminates."""
        assert self._fetching is not None and slot.plan is not None
        version = slot.plan.header.api_version
        header_version = response_header_version(ApiKey.FETCH, version)
        first = None
        received_s = slot.sent_s
        if ticket.ask_upstream:
            frame = await _next_owed_response(reader, slot.correlation_id, unanswered)
            received_s = trio.current_time()
            body = memoryview(frame)[_SIZE_BYTES:]
            _, start = parse_response_header(body, header_version)
            first = decode(FetchResponse, body[start:], version)
            ticket.shrink(self.proxy.pool, len(frame))
        response = await self._fetching.answer(ticket, first)
        if response.node_endpoints:
            advertise_node_endpoints(response, self.proxy)
        # One copy: the records go from the upstream frame straight into the output buffer.
        out = framed(
            encode_response_header(ResponseHeader(slot.correlation_id), header_version),
            *encode_parts(response, version),
        )
        await self.client.send_all(out)
        ticket.release()
        self._tickets.discard(ticket)
        self._fetch_turn.release()
        error_code = response.error_code or None
        outcome = "error" if error_code else ("expired" if ticket.expired else "ok")
        self._report(slot, error_code, len(out), received_s, outcome, ticket.held_ms)

    def _report(
        self,
        slot: _Slot,
        error_code: int | None,
        response_bytes: int,
        upstream_done_s: float,
        outcome: str,
        held_ms: float = 0.0,
    ) -> None:
        """Hand one finished request's record to the observer (never blocks).

        ``upstream_done_s``: when the upstream's part ended (response read, or the request
        written for acks=0); the record's latency runs to now.
        """
        now_s = trio.current_time()
        if slot.plan is not None:
            header = slot.plan.header
            api_key, api_version, client_id = header.api_key, header.api_version, header.client_id
            broker, upstream_ms = self.broker, (upstream_done_s - slot.sent_s) * 1000
        else:
            (api_key, api_version), client_id = slot.local_api, None
            broker, upstream_ms = "local", 0.0
        spec = API_BY_KEY.get(api_key)
        self._observer.request_done(
            RequestRecord(
                ts=slot.ts,
                api=spec.name if spec is not None else str(api_key),
                api_version=api_version,
                client_id=client_id,
                conn=self.connection_id,
                broker=broker,
                latency_ms=(now_s - slot.arrival_s) * 1000,
                upstream_ms=upstream_ms,
                held_ms=held_ms,
                muted_ms=slot.muted_s * 1000,
                request_bytes=slot.request_bytes,
                response_bytes=response_bytes,
                outcome=outcome,
                error_code=error_code,
            )
        )


def _checked_size(size_prefix: bytes | bytearray, max_frame: int) -> int:
    """The frame size a prefix announces, refused when no request could be that size."""
    size = read_frame_size(size_prefix, max_frame)
    if size < _MIN_REQUEST_BYTES:
        raise CloseConnection(f"frame of {size} bytes is too short to hold a request header")
    return size


async def _next_owed_response(
    upstream: FrameReader, correlation_id: int, unanswered: list[int]
) -> bytearray:
    """The upstream's response frame (size prefix included) to ``correlation_id``, skipping
    answers to acks=0 produces.

    Responses come in request order, so once the owed one arrives, no answer to an earlier
    acks=0 produce can follow: ``unanswered`` is emptied.
    """
    while True:
        frame = await _read_response(upstream)
        answered = int.from_bytes(frame[_SIZE_BYTES : _SIZE_BYTES + 4], "big", signed=True)
        if answered == correlation_id:
            unanswered.clear()
            return frame
        if answered not in unanswered:
            raise CloseConnection(
                f"upstream answered correlation id {answered}, expected {correlation_id}",
                "upstream",
            )
        del unanswered[: unanswered.index(answered) + 1]


async def _read_response(upstream: FrameReader) -> bytearray:
    """The upstream's next response frame, size prefix included (cancel-safe)."""
    try:
        return await upstream.next_frame()
    except PeerClosed:
        raise CloseConnection("upstream broker closed the connection", "upstream") from None


def _peer_name(stream: trio.abc.Stream) -> str:
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return "?"
    try:
        host, port, *_ = stream.socket.getpeername()
    except OSError:
        return "?"
    return str(Address(host, port))
