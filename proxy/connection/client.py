# Strategy: one client connection = two thin I/O pumps in one nursery around a sans-I/O
# Connection (proxy/connection/state.py), which owns the queue of owed responses and matches
# upstream answers by correlation id.
#
#   request pump:  read size -> check -> allocate from the pool (the KIP-72 mute) -> read body
#                  -> plan (forward / answer locally / hold / close) -> owe a slot -> write
#                  upstream -> release the memory
#   response pump: for each owed slot in order, answer it by its kind (Local, Forwarded,
#                  HeldProduce, HeldFetch) and write the answer to the client
#
# The connection owns an upstream connection to the broker it targets, opened when a request
# first needs it. Kafka answers the requests of one connection in order, so client order is
# preserved without re-sequencing and correlation ids pass through unchanged. acks=0 produces
# are owed nothing (Kafka sends no response; an answer Tansu sends anyway is skipped).
#
# Held requests (proxy/held/service.py; off with [fetch] hold = false):
#   - a Fetch on a broker port is answered by the proxy: the request pump applies it to the
#     proxy's fetch session; the response pump, in turn, has HeldRequests.answer look upstream
#     if needed, hold the fetch in the purgatory, and build the response. With the proxy's
#     identity those reads go on the proxy's shared channels, so a consumer that only fetches
#     needs no upstream connection of its own: one unused for
#     connections.upstream_idle_timeout_ms is closed (`_close_idle_upstream`).
#   - a Produce with acks=1/all waits for its answer at most its timeout_ms: the response pump
#     reads the answer under its own cancel scope whose deadline is the produce's, and the
#     DelayedProduce in the produce purgatory is completed or expired accordingly. On expiry
#     the client gets REQUEST_TIMED_OUT and the late answer is skipped (Connection.give_up).
#     Upstream frames are read by a cancel-safe FrameReader for that reason.
#
# client_auth = "passthrough" (issue 16): the upstream connection is opened without the proxy's
# SASL and carries the client's own SaslHandshake / SaslAuthenticate. Nothing is held or
# answered from the proxy's state until the cluster has accepted the client
# (proxy/connection/client_auth.py). A held fetch's reads then go on this connection (OwnReads,
# with proxy-chosen correlation ids; answers to later requests that arrive meanwhile wait in
# `_early`), so every record the client receives was fetched with its identity.
#
# Any error ends the whole connection (both sides) with one ConnectionClosed reason, one log
# line and one metric label; nothing here can affect another connection.
#
# Observation: each slot carries its request's timings (Arrival); when the response has been
# written to the client (or, for acks=0, when the request has been written upstream) one
# RequestRecord goes to the Observer (metrics + request log): a few clock reads per request and
# a two-byte peek at the response's top-level error code (proxy/error_peek.py).
"""One client connection: reader (pool) -> upstream -> ordered writer."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from proxy.connection.client_auth import ClientAuthentication
from proxy.connection.records import request_record
from proxy.connection.services import ConnectionServices
from proxy.connection.state import (
    NEED_REQUEST,
    REQUESTS_DONE,
    Arrival,
    Connection,
    Forwarded,
    HeldFetch,
    HeldProduce,
    Local,
    Slot,
    Unanswered,
)
from proxy.error_peek import peek_error_code
from proxy.errors import (
    ClientClosed,
    ClientProtocolError,
    ConnectionBroken,
    ConnectionClosed,
    FrameTimeout,
    IdleTimeout,
    UpstreamFailed,
    UpstreamUnavailable,
)
from proxy.framed import FrameReader, PeerClosed
from proxy.held.delayed import DelayedProduce
from proxy.held.service import FetchTicket
from proxy.rewrite import (
    LocalAnswer,
    RequestPlan,
    advertise_node_endpoints,
    plan_request,
    produce_timed_out,
    rewrite_response,
)
from proxy.routing import Address
from wire.apis import ApiKey, response_header_version
from wire.codec import decode, encode, encode_parts
from wire.errors import WireError
from wire.framing import frame as framed
from wire.framing import size_prefix
from wire.headers import (
    RequestHeader,
    ResponseHeader,
    encode_request_header,
    encode_response_header,
    parse_response_header,
    peek_request_header,
)
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse
from wire.messages.sasl_authenticate_response import SaslAuthenticateResponse

__all__ = ["ClientConnection"]

log = logging.getLogger("purgatory_proxy.connection.client")

_SIZE_BYTES = 4
#: api key, api version and correlation id: no request is shorter.
_MIN_REQUEST_BYTES = 8
#: Responses a connection may owe before the proxy stops reading its requests. A client that
#: pipelines without reading its answers is back-pressured here instead of growing a queue.
_MAX_IN_FLIGHT = 1024


@dataclass(slots=True)
class _HeldAnswer:
    """The produce whose answer the response pump awaits under its deadline (see
    ``_pump_responses``); ``frame`` is set when the answer came as the deadline passed."""

    slot: HeldProduce
    operation: DelayedProduce
    frame: bytearray | None = None


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
        self.peer = _peer_name(stream)
        self.broker = "bootstrap" if node_id is None else str(node_id)
        self._observer = services.observer
        self._conn = Connection(_MAX_IN_FLIGHT)
        self._auth = ClientAuthentication(services.passthrough)
        # Passthrough: the partitions (as the client names them) this connection has fetched
        # itself, the only ones its fetches may be answered about from the proxy's knowledge.
        self._known: set[tuple[object, int]] | None = set() if services.passthrough else None
        # The upstream connection, opened on first need (see _upstream_stream).
        self._upstream: trio.abc.Stream | None = None
        self._reader: FrameReader | None = None
        self._upstream_used_s = 0.0
        self._forwarding = False  # the request pump is between owing a slot and sending it
        self._early: dict[int, bytearray] = {}  # passthrough: answers read ahead of their turn
        self._send_lock = trio.Lock()  # passthrough: both pumps send upstream
        self._nursery: trio.Nursery | None = None
        self._owed_lot = trio.lowlevel.ParkingLot()  # the response pump, waiting for a slot
        self._room_lot = trio.lowlevel.ParkingLot()  # the request pump, waiting for room
        # Held fetches and produces; fetches only on broker ports (a bootstrap connection may
        # reach any broker, and sessions belong to one).
        self._held = services.held
        self._hold_fetches = services.held is not None and node_id is not None
        self._tickets: set[FetchTicket] = set()  # their pool leases are released on close
        self._fetch_turn = trio.Semaphore(1)
        self._answer_wait = trio.CancelScope()
        self._held_answer: _HeldAnswer | None = None

    def __repr__(self) -> str:
        target = "bootstrap" if self.node_id is None else f"broker {self.node_id}"
        return f"<ClientConnection #{self.connection_id} {self.peer} -> {target}>"

    async def run(self) -> None:
        """Serve the connection until either side closes or misbehaves.

        Resource handling: both streams are closed in ``finally``; the pool lease of a request
        being read is released by the request pump's own ``finally`` (cancellation included),
        held fetches' leases here, and a produce still held leaves the purgatory here.
        """
        metrics = self._services.metrics
        metrics.connections_open.inc()
        internal = False
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._guard, nursery, self._pump_responses)
                await self._guard(nursery, self._pump_requests)
        except ConnectionClosed as reason:
            self._conn.note_closed(reason)
        except Exception:
            # A bug of ours, not the client's: it must still end only this connection.
            internal = True
            log.exception("internal error on client connection %s; closing it", self)
        finally:
            for ticket in self._tickets:
                ticket.release()
            if self._held_answer is not None:
                self._held_answer.operation.force_complete()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.client)
                await self._close_upstream()
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
        if message:
            log.warning(
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
            self._conn.note_closed(
                ConnectionBroken(f"connection broke: {error or type(error).__name__}")
            )
        nursery.cancel_scope.cancel()

    # -- the upstream connection ----------------------------------------------------------

    async def _upstream_stream(self) -> trio.abc.Stream:
        """The upstream connection, opened now if there is none (first use, or closed idle)."""
        upstream = self._upstream
        if upstream is None:
            upstream = self._upstream = await self._connect_upstream()
            self._reader = FrameReader(upstream)
            self._upstream_used_s = trio.current_time()
            self._services.metrics.upstream_open.inc()
            idle_ms = self._services.config.connections.upstream_idle_timeout_ms
            if idle_ms > 0 and not self._auth.passthrough and self._nursery is not None:
                self._nursery.start_soon(self._close_idle_upstream, upstream, idle_ms / 1000)
        return upstream

    async def _close_idle_upstream(self, upstream: trio.abc.Stream, idle_s: float) -> None:
        """Close ``upstream`` once unused for ``idle_s`` with nothing owed on it.

        Safe without locks: only the request pump adds to the upstream ledger, and it marks
        the span from owing a slot to sending it (``_forwarding``); between checkpoints
        nothing else runs, so the check and the forgetting below happen at one instant.
        """
        while self._upstream is upstream:
            await trio.sleep_until(self._upstream_used_s + idle_s)
            if (
                self._upstream is upstream
                and not self._forwarding
                and self._conn.upstream_idle
                and trio.current_time() >= self._upstream_used_s + idle_s
            ):
                await self._close_upstream()

    async def _close_upstream(self) -> None:
        upstream, self._upstream, self._reader = self._upstream, None, None
        if upstream is not None:
            self._conn.forget_upstream()
            self._services.metrics.upstream_open.dec()
            await trio.aclose_forcefully(upstream)

    async def _send_upstream(self, upstream: trio.abc.Stream, frame: bytes | bytearray) -> None:
        self._upstream_used_s = trio.current_time()
        if self._auth.passthrough:  # the response pump sends its own reads too
            async with self._send_lock:
                await upstream.send_all(frame)
        else:
            await upstream.send_all(frame)

    async def _connect_upstream(self) -> trio.abc.Stream:
        services = self._services
        candidates = services.upstream_for(self.node_id)
        connects = services.metrics.upstream_connects
        if not candidates:
            connects.labels("failed").inc()
            raise UpstreamFailed(f"no upstream address known for broker {self.node_id}")
        errors = []
        for address in candidates:
            try:
                # TLS, and the proxy's own SASL identity unless clients pass theirs (issue 16).
                stream = await services.client_dialer.connect(address)
                connects.labels("ok").inc()
                return stream
            except UpstreamUnavailable as error:
                connects.labels("failed").inc()
                errors.append(str(error))
        raise UpstreamFailed("upstream unreachable (" + "; ".join(errors) + ")")

    # -- requests --------------------------------------------------------------------------

    async def _pump_requests(self) -> None:
        """Read, check, pay for and forward requests until the client closes.

        Timeouts use one cancel scope for the whole connection whose deadline moves with the
        phase (idle between frames, frame once its size is read, none while muted or
        forwarding): cheaper than a fresh scope per read, which showed in profiles.
        """
        services = self._services
        connections = services.config.connections
        idle_s = connections.idle_timeout_ms / 1000
        frame_s = connections.frame_timeout_ms / 1000
        max_frame = int(services.config.memory.socket_request_max_bytes)
        pool, brokers, held, auth = services.pool, services.brokers, self._held, self._auth
        passthrough = auth.passthrough
        timeout = trio.CancelScope()
        reader = FrameReader(self.client, max_frame)
        size = 0
        try:
            with services.drain.reading(), timeout:
                while True:
                    size = 0  # between frames: the idle timeout applies
                    timeout.deadline = trio.current_time() + idle_s
                    announced = await self._read_size(reader)
                    if announced is None:
                        return
                    size = announced
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
                        frame = await self._read_body(reader, size)
                        timeout.deadline = math.inf
                        body = memoryview(frame)[_SIZE_BYTES:]
                        plan = plan_request(body, brokers, client_sasl=passthrough)
                        request_bytes = size + _SIZE_BYTES
                        if isinstance(plan, LocalAnswer):
                            api = peek_request_header(body)[:2]
                            del frame, body  # the pool's again: do not keep it alive
                            arrival = Arrival(arrival_s, ts, muted_s, request_bytes, arrival_s)
                            await self._owe(Local(plan.correlation_id, api, plan.response, arrival))
                            continue
                        trusted = auth.trusted(trio.current_time())
                        ticket = self._fetch_ticket(plan, body) if trusted else None
                        if ticket is None:
                            # sent_s is set before the slot is owed: the response pump may
                            # take it (and start a held produce's clock) before we send.
                            arrival = Arrival(arrival_s, ts, muted_s, request_bytes,
                                              trio.current_time())  # fmt: skip
                            slot: Slot | Unanswered
                            if not plan.expects_response:
                                slot = Unanswered(plan, arrival)
                            elif plan.produced is not None and held is not None and trusted:
                                slot = HeldProduce(plan, plan.produced, arrival)
                            else:
                                slot = Forwarded(plan, arrival)
                                if plan.header.api_key == ApiKey.SASL_HANDSHAKE:
                                    auth.handshake()
                            upstream = await self._upstream_stream()
                            self._forwarding = True
                            await self._owe(slot)
                            await self._send_upstream(upstream, frame)
                            self._forwarding = False
                            # The lease ends with this block: the buffer must not outlive it
                            # (a parked connection would keep its last frame alive).
                            del frame, body
                            if isinstance(slot, Unanswered):
                                self._report(slot, None, 0, trio.current_time(), "no_response")
                            continue
                        del frame, body
                    # A fetch the proxy answers itself; the request's memory is free again.
                    await self._start_fetch(plan, ticket, arrival_s, ts, muted_s, request_bytes)
        finally:
            self._conn.end_requests()
            self._owed_lot.unpark_all()
        if timeout.cancelled_caught:
            if size:  # the frame's size had been read: the client stalled inside it
                raise FrameTimeout(
                    f"frame of {size} bytes not complete in time (connections.frame_timeout_ms)"
                )
            raise IdleTimeout(f"idle for {idle_s:g} s (connections.idle_timeout_ms)")

    async def _owe(self, slot: Slot | Unanswered) -> None:
        """Queue ``slot`` for the response pump, waiting while the client owes too many."""
        conn = self._conn
        while not conn.has_room:
            await self._room_lot.park()
        conn.owe(slot)
        self._owed_lot.unpark()

    def _fetch_ticket(self, plan: RequestPlan, body: memoryview) -> FetchTicket | None:
        """A Fetch this connection holds in the proxy (None: forward the request as it is)."""
        if not self._hold_fetches or plan.header.api_key != ApiKey.FETCH:
            return None
        assert self._held is not None and self.node_id is not None
        version = plan.header.api_version
        request = decode(FetchRequest, body[plan.body_offset :], version)
        if request.replica_id >= 0:
            return None  # a follower's fetch: not a client's, not ours to hold
        return self._held.plan(self.node_id, request, version, self._known)

    async def _start_fetch(
        self,
        plan: RequestPlan,
        ticket: FetchTicket,
        arrival_s: float,
        ts: float,
        muted_s: float,
        request_bytes: int,
    ) -> None:
        """Owe a held fetch's slot; the response pump does the rest (HeldRequests.answer)."""
        # One fetch at a time: a client that pipelines fetches and never reads the answers
        # waits here (TCP back-pressure) instead of holding response budgets of the pool.
        await self._fetch_turn.acquire()
        self._tickets.add(ticket)
        arrival = Arrival(arrival_s, ts, muted_s, request_bytes, trio.current_time())
        await self._owe(HeldFetch(plan, ticket, arrival))

    async def _read_size(self, reader: FrameReader) -> int | None:
        """The next frame's checked size, or None when the client closed between frames."""
        try:
            size = await reader.next_size()
        except PeerClosed:
            raise ClientClosed("client closed the connection inside a frame size") from None
        if size is not None and size < _MIN_REQUEST_BYTES:
            raise ClientProtocolError(
                f"frame of {size} bytes is too short to hold a request header"
            )
        return size

    async def _read_body(self, reader: FrameReader, size: int) -> bytearray:
        """The whole frame, prefix included, read straight into one buffer."""
        try:
            return await reader.finish()
        except PeerClosed as closed:
            raise ClientClosed(
                f"client closed the connection after {closed.received} of {size} bytes"
            ) from None

    # -- responses -------------------------------------------------------------------------

    async def _pump_responses(self) -> None:
        """Answer every owed slot in order until the request side has ended.

        A held produce's answer is awaited under ``self._answer_wait`` with the produce's
        deadline; one scope serves every produce until one expires (a scope per produce cost
        ~15 us in profiles, more than the rest of holding it). Leaving the scope — the deadline
        won, or the answer arrived as it passed — lands here, where the produce is settled and
        a fresh scope is opened.
        """
        while True:
            self._answer_wait = trio.CancelScope()
            with self._answer_wait:
                await self._answer_in_order()
                if self._held_answer is None:
                    return  # the request side ended; every response was sent
            held = self._held_answer
            assert held is not None
            self._held_answer = None
            slot = held.slot
            if held.frame is not None:
                held.operation.force_complete()
                await self._send_produce_answer(slot, held.frame)
                continue
            held.operation.expire()
            self._conn.give_up(slot.plan.header.correlation_id)  # its answer may still come
            timed_out = produce_timed_out(slot.plan)
            await self.client.send_all(timed_out)
            self._report(slot, None, len(timed_out), trio.current_time(), "timeout")

    async def _answer_in_order(self) -> None:
        """Answer slots in order; return when the request side has ended, or when a held
        produce's deadline passed as its answer arrived (``self._held_answer.frame`` set)."""
        conn = self._conn
        while True:
            slot = conn.next_owed()
            if slot is NEED_REQUEST:
                await self._owed_lot.park()
                continue
            if slot is REQUESTS_DONE:
                return
            self._room_lot.unpark()
            if isinstance(slot, Forwarded):
                frame = await self._owed_frame(slot.plan.header.correlation_id)
                await self._send_forwarded(slot, frame)
            elif isinstance(slot, Local):
                await self.client.send_all(slot.response)
                self._report(slot, None, len(slot.response), trio.current_time(), "ok")
            elif isinstance(slot, HeldProduce):
                if not await self._answer_produce(slot):
                    return
            else:
                assert isinstance(slot, HeldFetch)
                await self._answer_fetch(slot)

    async def _owed_frame(self, correlation_id: int) -> bytearray:
        """The upstream's answer to ``correlation_id`` (size prefix included), skipping
        answers nobody waits for (acks=0 produces, produces already timed out).

        Answers to requests sent after it can only come first when the response pump sent a
        read of its own meanwhile (passthrough): they wait in ``_early`` for their turn.
        """
        early = self._early.pop(correlation_id, None) if self._early else None
        if early is not None:
            return early
        conn, reader = self._conn, self._reader
        assert reader is not None  # a slot that expects an answer opened the connection
        while True:
            try:
                frame = await reader.next_frame()
            except PeerClosed:
                raise UpstreamFailed("upstream broker closed the connection") from None
            answered = int.from_bytes(frame[_SIZE_BYTES : _SIZE_BYTES + 4], "big", signed=True)
            if conn.upstream_answer(answered):
                if answered == correlation_id:
                    return frame
                self._early[answered] = frame  # the ledger vouches it was sent before ours

    async def _send_forwarded(self, slot: Forwarded | HeldProduce, frame: bytearray) -> None:
        received_s = trio.current_time()
        plan = slot.plan
        header = plan.header
        body = memoryview(frame)[_SIZE_BYTES:]
        error_code = peek_error_code(header.api_key, header.api_version, body)
        if self._auth.passthrough:
            self._learn_authentication(plan, body, error_code)
        out: bytes | bytearray = frame
        if plan.rewrite:
            rewritten = rewrite_response(plan, body, self._services.brokers)
            if rewritten is not body:  # re-encoded: the only case that copies
                out = size_prefix(len(rewritten)) + rewritten
        await self.client.send_all(out)
        self._report(slot, error_code, len(out), received_s, "error" if error_code else "ok")

    def _learn_authentication(
        self, plan: RequestPlan, body: memoryview, error_code: int | None
    ) -> None:
        """Feed the cluster's answers to the client's authentication state (passthrough)."""
        header = plan.header
        self._auth.answered(header.api_key)
        if header.api_key == ApiKey.SASL_AUTHENTICATE and not error_code:
            version = header.api_version
            _, start = parse_response_header(
                body, response_header_version(ApiKey.SASL_AUTHENTICATE, version)
            )
            answer = decode(SaslAuthenticateResponse, body[start:], version)
            self._auth.authenticated(answer.session_lifetime_ms, trio.current_time())

    async def _answer_produce(self, slot: HeldProduce) -> bool:
        """Hold a produce until its answer (sent, True) or its deadline (False: the caller
        leaves ``self._answer_wait``, see ``_pump_responses``)."""
        assert self._held is not None
        correlation_id = slot.plan.header.correlation_id
        timeout_ms = slot.produced.timeout_ms
        if timeout_ms <= 0:
            await self._send_produce_answer(slot, await self._owed_frame(correlation_id))
            return True
        waited_ms = math.floor((trio.current_time() - slot.arrival.sent_s) * 1000)
        operation = self._held.hold_produce(max(0, timeout_ms - waited_ms))
        self._held_answer = held = _HeldAnswer(slot, operation)
        wait = self._answer_wait
        wait.deadline = operation.expiration_ms / 1000
        frame = await self._owed_frame(correlation_id)  # Cancelled: the deadline won
        wait.deadline = math.inf
        if wait.cancel_called:  # it passed as the answer came: settle it outside the scope
            held.frame = frame
            return False
        self._held_answer = None
        operation.force_complete()
        await self._send_produce_answer(slot, frame)
        return True

    async def _send_produce_answer(self, slot: HeldProduce, frame: bytearray) -> None:
        """Send an answered produce and wake the fetches held on its partitions."""
        assert self._held is not None
        await self._send_forwarded(slot, frame)
        names = self._held.names
        self._held.produced(
            [names.key(name, topic_id, index)
             for name, topic_id, indexes in slot.produced.topics for index in indexes]
        )  # fmt: skip

    async def _answer_fetch(self, slot: HeldFetch) -> None:
        """Build, hold and send the response to a fetch the proxy terminates."""
        held, ticket = self._held, slot.ticket
        assert held is not None
        version = slot.plan.header.api_version
        header_version = response_header_version(ApiKey.FETCH, version)
        reads = OwnReads(self, slot.plan.header) if self._auth.passthrough else None
        response = await held.answer(ticket, reads)
        # The record's upstream time is that of the reads, not of the wait in the purgatory.
        received_s = trio.current_time() - ticket.held_ms / 1000
        if response.node_endpoints:
            advertise_node_endpoints(response, self._services.brokers)
        # One copy: the records go from the upstream frame straight into the output buffer.
        out = framed(
            encode_response_header(ResponseHeader(slot.plan.correlation_id), header_version),
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
        slot: Slot | Unanswered,
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
        self._observer.request_done(
            request_record(
                slot,
                self.connection_id,
                self.broker,
                error_code,
                response_bytes,
                upstream_done_s,
                outcome,
                held_ms,
                trio.current_time(),
            )
        )


class OwnReads:
    """A held fetch's upstream reads on its client's own connection (passthrough).

    Called from the response pump (inside HeldRequests.answer), which is the only reader of
    the upstream connection, so the answer is read right here; answers to the client's later
    requests that come first are kept for their turn (ClientConnection._owed_frame). The reads
    carry the client's client id: the cluster sees them as the client's, quotas included.
    """

    __slots__ = ("_connection", "_header")

    def __init__(self, connection: ClientConnection, header: RequestHeader) -> None:
        self._connection = connection
        self._header = header

    async def fetch(self, request: FetchRequest, version: int) -> FetchResponse:
        connection = self._connection
        upstream = await connection._upstream_stream()
        correlation_id = connection._conn.expect_own_answer()
        header = RequestHeader(ApiKey.FETCH, version, correlation_id, self._header.client_id)
        await connection._send_upstream(
            upstream, framed(encode_request_header(header), encode(request, version))
        )
        frame = await connection._owed_frame(correlation_id)
        body = memoryview(frame)[_SIZE_BYTES:]
        _, start = parse_response_header(body, response_header_version(ApiKey.FETCH, version))
        response = decode(FetchResponse, body[start:], version)
        known = connection._known
        if known is not None and not response.error_code:
            for topic in response.responses:
                name = topic.topic_id if topic.topic_id.int else topic.topic
                known.update(
                    (name, data.partition_index) for data in topic.partitions if not data.error_code
                )
        return response


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
