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
#     if needed, hold the fetch in the purgatory, and build the response. A fetch the proxy
#     knows has nothing new (an idle consumer's) enters the purgatory from the request pump
#     and the response pump is woken only when it is done: one task hand-off per idle cycle.
#     With the proxy's identity the upstream reads go on the proxy's shared channels, so a
#     consumer that only fetches needs no upstream connection of its own: it is opened on need
#     and closed when idle (proxy/connection/upstream_link.py).
#   - a Produce with acks=1/all waits for its answer at most its timeout_ms: the response pump
#     reads the answer under its own cancel scope whose deadline is the produce's, and the
#     DelayedProduce in the produce purgatory is completed or expired accordingly. On expiry
#     the client gets REQUEST_TIMED_OUT and the late answer is skipped (Connection.give_up).
#     Upstream frames are read by a cancel-safe FrameReader for that reason.
#
# client_auth = "passthrough" (issue 16): the upstream connection is opened without the proxy's
# SASL and carries the client's own SaslHandshake / SaslAuthenticate. Nothing is held or
# answered from the proxy's state until the cluster has accepted the client
# (proxy/connection/client_auth.py). A held fetch's reads then go on this connection
# (proxy/connection/own_reads.py), so every record the client receives was fetched with its
# identity.
#
# Sockets (proxy/framed.py): reads bring up to _READ_AHEAD bytes at once; a pump defers its
# write while the next frame is already in hand, so a pipelined batch goes out with one writev
# (its reader writes the deferred bytes before it waits; the pumps flush before their other
# waits).
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
from proxy.connection.own_reads import OwnReads
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
from proxy.connection.upstream_link import UpstreamLink, answered_id
from proxy.error_peek import peek_error_code
from proxy.errors import (
    AuthenticationFailed,
    ClientClosed,
    ClientProtocolError,
    ConnectionBroken,
    ConnectionClosed,
    FrameTimeout,
    IdleTimeout,
)
from proxy.framed import FrameReader, PeerClosed, ReadTimeouts, StreamWriter
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
    ResponseHeader,
    encode_request_header,
    encode_response_header,
    parse_response_header,
    peek_request_header,
)
from wire.messages.api_versions_response import ApiVersionsResponse
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse
from wire.messages.sasl_authenticate_response import SaslAuthenticateResponse

__all__ = ["ClientConnection", "peer_name"]

log = logging.getLogger("purgatory_proxy.connection.client")

_SIZE_BYTES = 4
#: api key, api version and correlation id: no request is shorter.
_MIN_REQUEST_BYTES = 8
#: Responses a connection may owe before the proxy stops reading its requests. A client that
#: pipelines without reading its answers is back-pressured here instead of growing a queue.
_MAX_IN_FLIGHT = 1024
_API_VERSIONS = int(ApiKey.API_VERSIONS)
_CORRELATION_ID_BYTES = 4
#: Bytes one receive may bring past the piece being read (proxy/framed.py): small pipelined
#: frames come several per receive; what a client sends this way is held before its pool
#: reservation, at most this much per connection.
_READ_AHEAD = 16 * 1024


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
        self._client_out = StreamWriter(stream)  # the response pump's only
        self.node_id = node_id
        self.connection_id = connection_id
        self.peer = peer_name(stream)
        self.broker = "bootstrap" if node_id is None else str(node_id)
        self._observer = services.observer
        self._conn = Connection(_MAX_IN_FLIGHT)
        self._auth = ClientAuthentication(services.passthrough)
        # Passthrough: the partitions (as the client names them) this connection has fetched
        # itself, the only ones its fetches may be answered about from the proxy's knowledge.
        self._known: set[tuple[object, int]] | None = set() if services.passthrough else None
        self._upstream = UpstreamLink(
            services,
            node_id,
            self._conn,
            shared_sends=services.passthrough,
            read_ahead=_READ_AHEAD,
            flush_before_wait=self._client_out,
        )
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
            # The upstream link's idle watch lives beside the pumps and ends with them.
            async with trio.open_nursery() as beside:
                self._upstream.bind(beside)
                async with trio.open_nursery() as pumps:
                    pumps.start_soon(self._guard, pumps, self._pump_responses)
                    await self._guard(pumps, self._pump_requests)
                beside.cancel_scope.cancel()
        except ConnectionClosed as reason:
            self._conn.note_closed(reason)
        except Exception:
            # A bug of ours, not the client's: it must still end only this connection.
            internal = True
            log.exception("internal error on client connection %s; closing it", self)
        finally:
            for ticket in self._tickets:
                ticket.abandon()
            if self._held_answer is not None:
                self._held_answer.operation.force_complete()
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
                ConnectionBroken(f"connection broke: {str(error) or type(error).__name__}")
            )
        nursery.cancel_scope.cancel()

    # -- requests --------------------------------------------------------------------------

    async def _pump_requests(self) -> None:
        """Read, check, pay for and forward requests until the client closes.

        Timeouts use one cancel scope for the whole connection, whose deadline the reader
        arms only while it waits (idle for a prefix, frame for a body; proxy/framed.py) and
        which is stood down while muted: cheaper than a fresh scope per read, or a deadline
        move per frame, which both showed in profiles.
        """
        services = self._services
        connections = services.config.connections
        idle_s = connections.idle_timeout_ms / 1000
        frame_s = connections.frame_timeout_ms / 1000
        max_frame = int(services.config.memory.socket_request_max_bytes)
        pool, brokers, held, auth = services.pool, services.brokers, self._held, self._auth
        passthrough, link = auth.passthrough, self._upstream
        timeout = trio.CancelScope()
        # The reader arms the idle and frame deadlines only while it waits (proxy/framed.py);
        # muting is the proxy's doing, not the client's, and is not timed (stand_down). It
        # also writes the requests deferred below before it waits.
        timeouts = ReadTimeouts(timeout, idle_s, frame_s)
        reader = FrameReader(self.client, max_frame, read_ahead=_READ_AHEAD,
                             timeouts=timeouts, flush=link)  # fmt: skip
        size = 0
        try:
            with services.drain.reading(), timeout:
                while True:
                    size = 0  # between frames: the idle timeout applies
                    announced = await self._read_size(reader)
                    if announced is None:
                        return
                    size = announced
                    arrival_s, ts = trio.current_time(), time.time()
                    # Muted time is time parked in the pool, not the checkpoint of a free
                    # allocation: try first, park only when the pool is out of memory.
                    lease, muted_s = pool.try_allocate(size), 0.0
                    if lease is None:
                        await link.flush()
                        timeouts.stand_down()
                        lease = await pool.allocate(size)
                        muted_s = trio.current_time() - arrival_s
                    with lease:
                        frame = await self._read_body(reader, size)
                        body = memoryview(frame)[_SIZE_BYTES:]
                        plan = plan_request(body, brokers, client_sasl=passthrough)
                        request_bytes = size + _SIZE_BYTES
                        if (
                            not passthrough
                            and isinstance(plan, RequestPlan)
                            and plan.header.api_key == _API_VERSIONS
                        ):
                            plan = self._known_api_versions(plan)
                        if isinstance(plan, LocalAnswer):
                            api = peek_request_header(body)[:2]
                            del frame, body  # the pool's again: do not keep it alive
                            arrival = Arrival(arrival_s, ts, muted_s, request_bytes, arrival_s)
                            await self._owe(Local(plan.correlation_id, api, plan.response, arrival))
                            continue
                        trusted = not passthrough or auth.trusted(trio.current_time())
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
                            await link.forward(
                                self._owe, slot, frame, may_defer=reader.frame_in_hand()
                            )
                            # The lease ends with this block: the buffer must not outlive it
                            # (a parked connection would keep its last frame alive).
                            del frame, body
                            if isinstance(slot, Unanswered):
                                self._report(slot, None, 0, trio.current_time(), "no_response")
                            continue
                        del frame, body
                    # A fetch the proxy answers itself; the request's memory is free again.
                    await self._start_fetch(plan, ticket, arrival_s, ts, muted_s,
                                            request_bytes)  # fmt: skip
        finally:
            self._conn.end_requests()
            self._owed_lot.unpark_all()
        if timeout.cancelled_caught:
            if size:  # the frame's size had been read: the client stalled inside it
                raise FrameTimeout(
                    f"frame of {size} bytes not complete in time (connections.frame_timeout_ms)"
                )
            raise IdleTimeout(f"idle for {idle_s:g} s (connections.idle_timeout_ms)")

    def _known_api_versions(self, plan: RequestPlan) -> RequestPlan | LocalAnswer:
        """ApiVersions answered from the cluster's last answer for this port, if it is
        recent (proxy/connection/api_versions.py): no upstream connection opens for it."""
        known = self._services.api_versions.answer(self.node_id, plan.header, trio.current_time())
        return plan if known is None else LocalAnswer(plan.correlation_id, known)

    async def _owe(self, slot: Slot | Unanswered, *, wake: bool = True) -> None:
        """Queue ``slot`` for the response pump, waiting while the client owes too many.
        ``wake=False``: something else wakes the pump when the slot can be answered."""
        conn = self._conn
        while not conn.has_room:
            await self._upstream.flush()  # the answers that make room need them
            await self._room_lot.park()
        conn.owe(slot)
        if wake and self._owed_lot:  # the pump waits for it (unpark alone costs ~1 µs)
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
        """Owe a held fetch's slot; the response pump does the rest (HeldRequests.answer).

        An active consumer (its upstream connection is open: it did more than fetch lately)
        gets its first look sent right here, in request order on that connection, like a
        forwarded request: one task hand-off fewer than a read on the shared channels, which
        is what consuming at full speed pays per fetch. Its response budget comes from the
        pool first (KIP-72), which may mute this connection. An idle consumer's first looks
        go on the shared channels, so its connection is left to close.
        """
        # One fetch at a time: a client that pipelines fetches and never reads the answers
        # waits here (TCP back-pressure) instead of holding response budgets of the pool.
        # What was deferred goes first: the answer this may wait for can need it.
        link, held = self._upstream, self._held
        assert held is not None
        await link.flush()
        try:  # (acquire() takes a trip through the scheduler even when the turn is free)
            self._fetch_turn.acquire_nowait()
        except trio.WouldBlock:
            await self._fetch_turn.acquire()
        self._tickets.add(ticket)
        if ticket.nothing_new and held.hold_now(ticket, self._owed_lot):
            # Held already: the response pump is woken by the end of the hold, not now.
            arrival = Arrival(arrival_s, ts, muted_s, request_bytes, trio.current_time())
            await self._owe(HeldFetch(plan, ticket, arrival), wake=False)
            return
        first: bytes | None = None
        if ticket.ask_upstream and link.is_open and not self._auth.passthrough:
            pool = self._services.pool
            lease = pool.try_allocate(held.response_max_bytes)
            if lease is None:
                parked_s = trio.current_time()
                lease = await pool.allocate(held.response_max_bytes)
                muted_s += trio.current_time() - parked_s
            lease.hand_off()  # the response pump releases it (ticket.release)
            ticket.lease = lease
            header = plan.header
            body = encode(held.immediate_request(ticket), header.api_version)
            first = framed(encode_request_header(header), body)
        arrival = Arrival(arrival_s, ts, muted_s, request_bytes, trio.current_time())
        if first is None or not link.is_open:  # (closed while muted: the shared way, then)
            await self._owe(HeldFetch(plan, ticket, arrival))
            return
        await link.forward(
            self._owe, HeldFetch(plan, ticket, arrival, first_sent=True), first, may_defer=False
        )

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
            await self._client_out.send_all(timed_out)
            self._report(slot, None, len(timed_out), trio.current_time(), "timeout")

    async def _answer_in_order(self) -> None:
        """Answer slots in order; return when the request side has ended, or when a held
        produce's deadline passed as its answer arrived (``self._held_answer.frame`` set)."""
        conn, out = self._conn, self._client_out
        while True:
            slot = conn.next_owed()
            if slot is NEED_REQUEST:
                await out.flush()
                await self._owed_lot.park()
                continue
            if slot is REQUESTS_DONE:
                await out.flush()
                return
            if self._room_lot:
                self._room_lot.unpark()
            if isinstance(slot, Forwarded):
                frame = await self._upstream.answer(slot.plan.header.correlation_id)
                await self._send_forwarded(slot, frame)
            elif isinstance(slot, Local):
                await out.send_all(slot.response)
                self._report(slot, None, len(slot.response), trio.current_time(), "ok")
            elif isinstance(slot, HeldProduce):
                if not await self._answer_produce(slot):
                    return
            else:
                assert isinstance(slot, HeldFetch)
                await out.flush()  # it may wait in the purgatory
                await self._answer_fetch(slot)

    async def _send_forwarded(self, slot: Forwarded | HeldProduce, frame: bytearray) -> None:
        """Write an upstream answer to the client: deferred while the next one is already in
        hand (the next write or wait of this pump writes it; its record counts it as written
        now, microseconds early)."""
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
        if header.api_key == _API_VERSIONS and not error_code:
            self._keep_api_versions(out, header.api_version)
        writer = self._client_out
        if writer.has_room_for(out) and self._upstream.frame_in_hand():
            writer.defer(out)
        else:
            await writer.send_all(out)
        self._report(slot, error_code, len(out), received_s, "error" if error_code else "ok")
        if error_code and header.api_key == ApiKey.SASL_AUTHENTICATE:
            raise AuthenticationFailed(
                f"the cluster refused the client's SASL authentication (error {error_code}); "
                "it closes such connections, and so does the proxy"
            )

    def _keep_api_versions(self, frame: bytes | bytearray, version: int) -> None:
        """Keep the cluster's ApiVersions answer, as sent, for the next clients of this port.
        (Its response header is v0 at every version, KIP-511: the correlation id alone.)"""
        known, now_s = self._services.api_versions, trio.current_time()
        if self._auth.passthrough or not known.wants(self.node_id, now_s):
            return
        body = memoryview(frame)[_SIZE_BYTES + _CORRELATION_ID_BYTES :]
        known.learn(self.node_id, decode(ApiVersionsResponse, body, version), now_s)

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
        ready = self._upstream.peek()
        if timeout_ms <= 0 or (ready is not None and answered_id(ready) == correlation_id):
            # Already answered (pipelined answers come in batches): nothing to hold, no
            # deadline to move (a purgatory entry and two deadline moves cost ~12 µs).
            await self._send_produce_answer(slot, await self._upstream.answer(correlation_id))
            return True
        waited_ms = math.floor((trio.current_time() - slot.arrival.sent_s) * 1000)
        operation = self._held.hold_produce(max(0, timeout_ms - waited_ms))
        self._held_answer = held = _HeldAnswer(slot, operation)
        wait = self._answer_wait
        wait.deadline = operation.expiration_ms / 1000
        frame = await self._upstream.answer(correlation_id)  # Cancelled: the deadline won
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
        reads, first = None, None
        if self._known is not None:  # passthrough: the client's own identity reads
            reads = OwnReads(self._upstream, slot.plan.header.client_id, self._known)
        elif slot.first_sent:
            frame = await self._upstream.answer(slot.plan.correlation_id)
            body = memoryview(frame)[_SIZE_BYTES:]
            _, start = parse_response_header(body, header_version)
            first = decode(FetchResponse, body[start:], version)
        response = await held.answer(ticket, reads, first)
        # The record's upstream time is that of the reads, not of the wait in the purgatory.
        received_s = trio.current_time() - ticket.held_ms / 1000
        if response.node_endpoints:
            advertise_node_endpoints(response, self._services.brokers)
        header = encode_response_header(ResponseHeader(slot.plan.correlation_id), header_version)
        parts = encode_parts(response, version)
        size = len(header) + sum(len(part) for part in parts)
        # No copy: the records go from the upstream frame to the client's socket (writev);
        # joining them was a quarter of the proxy's CPU consuming 1 KiB records.
        await self._client_out.send_parts([size_prefix(size), header, *parts])
        ticket.release()
        self._tickets.discard(ticket)
        self._fetch_turn.release()
        error_code = response.error_code or None
        outcome = "error" if error_code else ("expired" if ticket.expired else "ok")
        self._report(slot, error_code, _SIZE_BYTES + size, received_s, outcome, ticket.held_ms)

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


def peer_name(stream: trio.abc.Stream) -> str:
    """The client's address for log lines ("?" when the stream has none), under any TLS."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return "?"
    try:
        host, port, *_ = stream.socket.getpeername()
    except OSError:
        return "?"
    return str(Address(host, port))
