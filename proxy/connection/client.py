# Strategy: one client connection = two thin I/O pumps in one nursery around a sans-I/O
# Connection (proxy/connection/state.py), which owns the queue of owed responses and matches
# upstream answers by correlation id.
#
#   request pump:  read size -> check -> allocate from the pool (the KIP-72 mute) -> read body
#                  -> plan (forward / answer locally / hold / close) -> owe a slot -> write
#                  upstream -> release the memory
#                  While memory is short, Kafka's rule: one request per connection in
#                  processing. A connection whose earlier responses are not all written waits
#                  for them before it is given memory for the next (`_one_in_processing`), so
#                  none holds several requests' worth of the broker's and the pool's attention
#                  while others wait for their first; the waiting ones get memory in random
#                  order, in rounds (proxy/memory.py: a connection served in a round waits for
#                  the next, its Turn). A forwarded request's bytes stay in the pool, as
#                  in processing, until its answer is written (`_processing`): they left the
#                  proxy's memory for the kernel's and the broker's, and a client pipelining
#                  large requests fills those. With memory to spare, clients pipeline
#                  through the proxy as they like.
#   response pump: for each owed slot in order, answer it by its kind (Local, Forwarded,
#                  HeldProduce, HeldFetch, HeldRepeat) and write the answer to the client
#
# The connection owns an upstream connection to the broker it targets, opened when a request
# first needs it. Kafka answers the requests of one connection in order, so client order is
# preserved without re-sequencing and correlation ids pass through unchanged. acks=0 produces
# are owed nothing (Kafka sends no response; an answer Tansu sends anyway is skipped).
#
# Held requests (proxy/held/service.py; off with [fetch] hold = false):
#   - a Fetch on a broker port is answered by the proxy: proxy/connection/fetches.py is the
#     connection's side of it (the request pump starts it, the response pump writes the
#     answer). With the proxy's identity its upstream reads go on the proxy's shared channels,
#     so a consumer that only fetches needs no upstream connection of its own: it is opened on
#     need and closed when idle (proxy/connection/upstream_link.py).
#   - a Produce with acks=1/all waits for its answer at most its timeout_ms: the response pump
#     reads the answer under its own cancel scope whose deadline is the produce's, and the
#     DelayedProduce in the produce purgatory is completed or expired accordingly. On expiry
#     the client gets REQUEST_TIMED_OUT and the late answer is skipped (Connection.give_up).
#     Upstream frames are read by a cancel-safe FrameReader for that reason.
#
# client_auth = "passthrough" (issue 16): the upstream connection is opened without the proxy's
# SASL and carries the client's own SaslHandshake / SaslAuthenticate. Nothing is held or
# answered from the proxy's state until the cluster has accepted the client
# (proxy/connection/client_auth.py); a held fetch's reads then go on this connection. Until
# then the client is bounded as a Kafka SASL listener bounds it (issue 29): frames up to
# memory.unauthenticated_request_max_bytes while its SASL exchange is under way, and
# connections.authentication_timeout_ms from connect to acceptance (the connection, and its
# upstream connection, end there: `_auth_scope`).
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

import errno
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from proxy.connection.client_auth import ClientAuthentication
from proxy.connection.fetches import ClientFetches
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
    HeldRepeat,
    Local,
    Slot,
    Unanswered,
)
from proxy.connection.upstream_link import CONNECTION_BOUND_APIS, UpstreamLink, answered_id
from proxy.error_peek import peek_error_code
from proxy.errors import (
    AuthenticationFailed,
    AuthenticationTimeout,
    ClientClosed,
    ClientLeft,
    ClientProtocolError,
    ConnectionBroken,
    ConnectionClosed,
    FrameTimeout,
    IdleTimeout,
    SendTimeout,
    UpstreamFailed,
)
from proxy.framed import FrameReader, PeerClosed, ReadTimeouts, StreamWriter, WriteTimeout
from proxy.held.decision import produce_hold_ms
from proxy.held.delayed import DelayedProduce
from proxy.held.ticket import FetchTicket
from proxy.memory import Lease, Turn
from proxy.outcomes import Outcome
from proxy.rewrite import (
    LocalAnswer,
    RequestPlan,
    plan_request,
    rewrite_response,
)
from proxy.stream_address import stream_address
from wire.apis import ApiKey
from wire.errors import WireError
from wire.framing import size_prefix
from wire.headers import (
    peek_request_header,
)

__all__ = ["ClientConnection", "peer_name"]

log = logging.getLogger("purgatory_proxy.connection.client")

_SIZE_BYTES = 4
#: Close reasons that only say the client went away (logged at INFO, see _log_close).
_CLIENT_LEFT = frozenset({"client_closed", "broken", "shutdown"})
#: api key, api version and correlation id: no request is shorter.
_MIN_REQUEST_BYTES = 8
#: Responses a connection may owe before the proxy stops reading its requests. A client that
#: pipelines without reading its answers is back-pressured here instead of growing a queue.
_MAX_IN_FLIGHT = 1024
_API_VERSIONS = int(ApiKey.API_VERSIONS)
#: Bytes one receive may bring past the piece being read (proxy/framed.py): small pipelined
#: frames come several per receive; what a client sends this way is held before its pool
#: reservation, at most this much per connection.
_READ_AHEAD = 16 * 1024
#: A larger request is reserved from the pool this much at a time (doubling), as its bytes
#: arrive (proxy/framed.py, issue 29): a client that declares a large frame and sends nothing
#: holds this much, not the frame. Requests this small (nearly all) are reserved in one go.
_FIRST_PIECE_BYTES = 64 * 1024


@dataclass(slots=True)
class _HeldAnswer:
    """The produce whose answer the response pump awaits until the purgatory expires it (see
    ``_pump_responses``); ``frame`` is the broker's, when it came as the produce expired."""

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
        # The response pump's only writer; its scope cuts a client that does not take an
        # answer (connections.send_timeout_ms, proxy/framed.py).
        self._send_scope = trio.CancelScope()
        send_timeout_s = services.settings.send_timeout_s
        self._client_out = StreamWriter(stream, WriteTimeout(self._send_scope, send_timeout_s))
        self.node_id = node_id
        self.connection_id = connection_id
        self.peer = peer_name(stream)
        self.broker = "bootstrap" if node_id is None else str(node_id)
        self._observer = services.observer
        self._conn = Connection(_MAX_IN_FLIGHT)
        self._auth = ClientAuthentication(services.passthrough)
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
        # The request pump, waiting for every owed response to be written (memory is short).
        self._answered_lot = trio.lowlevel.ParkingLot()
        # This connection's requests in processing in the pool (see the header).
        self._processing_bytes = 0
        # Held fetches and produces; fetches only on broker ports (a bootstrap connection may
        # reach any broker, and sessions belong to one).
        self._held = services.held
        self._fetches: ClientFetches | None = None
        if services.held is not None and node_id is not None:
            self._fetches = ClientFetches(
                services.held,
                node_id,
                services.pool,
                services.brokers,
                self._upstream,
                self._owed_lot,
                passthrough=services.passthrough,
                metrics=services.metrics,
            )
        self._answer_wait = trio.CancelScope()
        self._held_answer: _HeldAnswer | None = None
        # Passthrough: the connection must be accepted by the cluster before this deadline
        # (set when it starts to run, cleared by the first acceptance).
        self._auth_scope = trio.CancelScope()

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
        auth_timeout_s = self._services.settings.authentication_timeout_s
        if not self._auth.accepted_once:
            self._auth_scope.deadline = trio.current_time() + auth_timeout_s
        try:
            # The upstream link's idle watch lives beside the pumps and ends with them.
            with self._auth_scope:
                async with trio.open_nursery() as beside:
                    self._upstream.bind(beside)
                    async with trio.open_nursery() as pumps:
                        pumps.start_soon(self._guard, pumps, self._pump_responses)
                        await self._guard(pumps, self._pump_requests)
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
            self._services.pool.end_processing(self._processing_bytes)
            if isinstance(self._conn.closed_by, UpstreamFailed):  # the broker died or hangs
                self._services.api_versions.forget(self.node_id)
            if self._fetches is not None:
                self._fetches.abandon()
            if self._held_answer is not None:
                self._held_answer.operation.force_complete()
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

    # -- requests --------------------------------------------------------------------------

    async def _pump_requests(self) -> None:
        """Read, check, pay for and forward requests until the client closes.

        Timeouts use one cancel scope for the whole connection, whose deadline the reader
        arms only while it waits (idle for a prefix, frame for a body; proxy/framed.py) and
        which is stood down while muted: cheaper than a fresh scope per read, or a deadline
        move per frame, which both showed in profiles.
        """
        services = self._services
        settings = services.settings
        idle_s, frame_s = settings.idle_timeout_s, settings.frame_timeout_s
        max_frame = settings.request_max_bytes
        auth = self._auth
        # Frames while a passthrough client's SASL exchange is under way (client_auth.py).
        sasl_max = settings.sasl_request_max_bytes
        pool, link, fetches, conn = services.pool, self._upstream, self._fetches, self._conn
        turn = Turn()  # this connection's place in the pool's rounds while memory is tight
        timeout = trio.CancelScope()
        # The reader arms the idle and frame deadlines only while it waits (proxy/framed.py);
        # muting is the proxy's doing, not the client's, and is not timed (stand_down). It
        # also writes the requests deferred below before it waits.
        timeouts = ReadTimeouts(timeout, idle_s, frame_s)
        reader = FrameReader(self.client, max_frame, read_ahead=_READ_AHEAD, timeouts=timeouts,
                             flush=link, first_piece_bytes=_FIRST_PIECE_BYTES)  # fmt: skip
        size = 0
        try:
            with services.drain.reading(), timeout:
                while True:
                    size = 0  # between frames: the idle timeout applies
                    announced = await self._read_size(reader)
                    if announced is None:
                        return
                    size = announced
                    if sasl_max is not None and size > sasl_max and auth.in_sasl:
                        raise ClientProtocolError(
                            f"frame of {size} bytes before the client authenticated; at most "
                            f"{sasl_max} (memory.unauthenticated_request_max_bytes, Kafka's "
                            "sasl.server.max.receive.size)"
                        )
                    arrival_s, ts = trio.current_time(), time.time()
                    muted_s = 0.0
                    if conn.in_processing and pool.tight:
                        await self._one_in_processing(timeouts)
                        muted_s = trio.current_time() - arrival_s
                    # Muted time is time parked in the pool, not the checkpoint of a free
                    # allocation: try first, park only when the pool is out of memory. A large
                    # frame's lease grows as its bytes arrive (reader.finish).
                    first_piece = min(size, _FIRST_PIECE_BYTES)
                    lease = pool.try_allocate(first_piece, turn)
                    if lease is None:
                        await link.flush()
                        timeouts.stand_down()
                        lease = await pool.allocate(first_piece, turn)
                        muted_s = trio.current_time() - arrival_s
                    with lease:
                        frame = await self._read_body(reader, size, lease)
                        body = memoryview(frame)[_SIZE_BYTES:]
                        # An idle consumer's repeated fetch is held from its bytes (fetches.py).
                        repeat = held_fetch = None
                        if fetches is not None and fetches.repeats:
                            arrival = Arrival(arrival_s, ts, muted_s, size + _SIZE_BYTES,
                                              arrival_s)  # fmt: skip
                            repeat = fetches.hold_repeat(body, arrival)
                        if repeat is None:
                            held_fetch = await self._pass_on(frame, reader, arrival_s, ts,
                                                             muted_s)  # fmt: skip
                        # The lease ends with this block: the buffer must not outlive it
                        # (a parked connection would keep its last frame alive).
                        del frame, body
                    if repeat is not None:
                        await self._owe(repeat, wake=False)  # its hold's end wakes the pump
                    elif held_fetch is not None:
                        # A fetch the proxy answers itself; the request's memory is free again.
                        assert fetches is not None
                        plan, ticket = held_fetch
                        arrival = Arrival(arrival_s, ts, muted_s, size + _SIZE_BYTES, arrival_s)
                        await fetches.start(plan, ticket, arrival, self._owe)
        finally:
            self._conn.end_requests()
            self._owed_lot.unpark_all()
        if timeout.cancelled_caught:
            if size:  # the frame's size had been read: the client stalled inside it
                raise FrameTimeout(
                    f"frame of {size} bytes not complete in time (connections.frame_timeout_ms)"
                )
            raise IdleTimeout(f"idle for {idle_s:g} s (connections.idle_timeout_ms)")

    async def _one_in_processing(self, timeouts: ReadTimeouts) -> None:
        """Memory is short: wait until every response owed is written (Kafka keeps a channel
        muted from a complete receive until its response is sent). Not timed: the wait is the
        proxy's doing, not the client's."""
        await self._upstream.flush()  # the answers awaited need their requests sent
        timeouts.stand_down()
        conn = self._conn
        while conn.in_processing:
            await self._answered_lot.park()

    async def _pass_on(
        self, frame: bytearray, reader: FrameReader, arrival_s: float, ts: float, muted_s: float
    ) -> tuple[RequestPlan, FetchTicket] | None:
        """Plan a request (``frame``, size prefix included, arrived at ``arrival_s`` / epoch
        ``ts`` after ``muted_s`` in the pool) and pass it on: answered here, forwarded
        upstream (its slot owed), or, for a Fetch the proxy answers itself, its plan and ticket
        for the caller to start once the request's memory is free again."""
        auth, link = self._auth, self._upstream
        passthrough = auth.passthrough
        body = memoryview(frame)[_SIZE_BYTES:]
        plan = plan_request(body, self._services.brokers, client_sasl=passthrough)
        if (
            not passthrough
            and isinstance(plan, RequestPlan)
            and plan.header.api_key == _API_VERSIONS
        ):
            plan = self._known_api_versions(plan)
        if isinstance(plan, LocalAnswer):
            api = peek_request_header(body)[:2]
            arrival = Arrival(arrival_s, ts, muted_s, len(frame), arrival_s)
            await self._owe(Local(plan.correlation_id, api, plan.response, arrival))
            return None
        trusted = not passthrough or auth.trusted(trio.current_time())
        ticket = self._fetch_ticket(plan, body) if trusted else None
        if ticket is not None:
            return plan, ticket
        # sent_s is set before the slot is owed: the response pump may take it (and start a
        # held produce's clock) before we send.
        arrival = Arrival(arrival_s, ts, muted_s, len(frame), trio.current_time())
        slot: Slot | Unanswered
        if not plan.expects_response:
            slot = Unanswered(plan, arrival)
        elif plan.produced is not None and self._held is not None and trusted:
            slot = HeldProduce(plan, plan.produced, arrival)
        else:
            slot = Forwarded(plan, arrival)
            if plan.header.api_key == ApiKey.SASL_HANDSHAKE:
                auth.handshake()
            elif plan.header.api_key in CONNECTION_BOUND_APIS:
                link.stay_open()
        if not isinstance(slot, Unanswered):
            self._processing(len(frame))  # (its lease still holds it: counted twice a moment)
        await link.forward(self._owe, slot, frame, may_defer=reader.frame_in_hand())
        if isinstance(slot, Unanswered):
            self._report(slot, None, 0, trio.current_time(), "no_response")
        return None

    def _processing(self, size_bytes: int) -> None:
        """``size_bytes`` more (or, negative, fewer) of this connection's requests are
        forwarded and not yet answered (MemoryPool.start_processing, end_processing)."""
        self._processing_bytes += size_bytes
        pool = self._services.pool
        if size_bytes > 0:
            pool.start_processing(size_bytes)
        else:
            pool.end_processing(-size_bytes)

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
        if self._fetches is None or plan.header.api_key != ApiKey.FETCH:
            return None
        return self._fetches.ticket(plan, body)

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

    async def _read_body(self, reader: FrameReader, size: int, lease: Lease) -> bytearray:
        """The whole frame, prefix included, read straight into one buffer (``lease`` grows
        with it)."""
        try:
            return await reader.finish(lease)
        except PeerClosed as closed:
            raise ClientClosed(
                f"client closed the connection after {closed.received} of {size} bytes"
            ) from None

    # -- responses -------------------------------------------------------------------------

    async def _pump_responses(self) -> None:
        """Answer every owed slot in order until the request side has ended.

        A held produce's answer is awaited under ``self._answer_wait``, a scope with no
        deadline: the produce purgatory's wheel expires the produce, and its ``on_expiration``
        cancels the scope and makes the REQUEST_TIMED_OUT answer (proxy/held/delayed.py). One
        scope serves every produce until one expires (a scope per produce cost ~15 us in
        profiles); leaving it lands here, where the answer is sent and a fresh scope opened.
        Around it all, ``self._send_scope``: its deadline stands only while a write waits for
        the client (connections.send_timeout_ms).
        """
        with self._send_scope:
            while True:
                self._answer_wait = trio.CancelScope()
                with self._answer_wait:
                    await self._answer_in_order()
                    if self._held_answer is None:
                        return  # the request side ended; every response was sent
                held = self._held_answer
                assert held is not None and held.operation.answer is not None
                self._held_answer = None
                slot, timed_out = held.slot, held.operation.answer
                if held.frame is not None:  # the broker's answer is the truth: it is sent
                    await self._send_produce_answer(slot, held.frame)
                    continue
                self._conn.give_up(slot.plan.header.correlation_id)  # its answer may still come
                self._upstream.expect_late_answer()  # ... and must, unless the broker hangs
                await self._client_out.send_all(timed_out)
                self._processing(-slot.arrival.request_bytes)
                self._report(slot, None, len(timed_out), trio.current_time(), "timeout")
        timeout_s = self._services.settings.send_timeout_s
        raise SendTimeout(
            f"client did not take its answer within {timeout_s:g} s "
            "(connections.send_timeout_ms); its memory is released"
        )

    async def _answer_in_order(self) -> None:
        """Answer slots in order; return when the request side has ended (a held produce's
        expiry cancels the caller's ``self._answer_wait`` instead)."""
        conn, out = self._conn, self._client_out
        while True:
            slot = conn.next_owed()
            if slot is NEED_REQUEST:
                await out.flush()
                if self._answered_lot:  # the request pump waits for this (memory is short)
                    self._answered_lot.unpark_all()
                await self._wait_for_request()
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
                # The proxy's own refusals (UNSUPPORTED_VERSION to a client newer than the
                # proxy, UNSUPPORTED_SASL_MECHANISM to one that tries SASL) count as errors.
                error = peek_error_code(*slot.api, memoryview(slot.response)[_SIZE_BYTES:])
                outcome: Outcome = "error" if error else "ok"
                self._report(slot, error, len(slot.response), trio.current_time(), outcome)
            elif isinstance(slot, HeldProduce):
                if not await self._answer_produce(slot):
                    return
            else:
                assert isinstance(slot, HeldFetch | HeldRepeat)
                await out.flush()  # it may wait in the purgatory
                await self._answer_fetch(slot)

    async def _wait_for_request(self) -> None:
        """Wait until a slot is owed. While a read-ahead is out, only until its time to be
        claimed has passed: then it is given up (proxy/connection/fetches.py)."""
        fetches = self._fetches
        if fetches is None or fetches.ahead_expires_s is None:
            await self._owed_lot.park()
            return
        with trio.move_on_at(fetches.ahead_expires_s):
            await self._owed_lot.park()
        fetches.expire_ahead()

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
            self._auth.learn(header.api_key, header.api_version, body, error_code,
                             trio.current_time())  # fmt: skip
            if self._auth.accepted_once:
                self._auth_scope.deadline = math.inf
        out: bytes | bytearray = frame
        if plan.rewrite:
            rewritten = rewrite_response(plan, body, self._services.brokers)
            if rewritten is not body:  # re-encoded: the only case that copies
                out = size_prefix(len(rewritten)) + rewritten
        if header.api_key == _API_VERSIONS and not error_code and not self._auth.passthrough:
            # For this port's next clients (proxy/connection/api_versions.py).
            self._services.api_versions.keep(self.node_id, out, header.api_version,
                                             trio.current_time())  # fmt: skip
        writer = self._client_out
        if writer.has_room_for(out) and self._upstream.frame_in_hand():
            writer.defer(out)
        else:
            await writer.send_all(out)
        self._upstream.release_answer()  # written (or, small, deferred: DEFER_MAX_BYTES)
        self._processing(-slot.arrival.request_bytes)
        self._report(slot, error_code, len(out), received_s, "error" if error_code else "ok")
        if error_code and header.api_key == ApiKey.SASL_AUTHENTICATE:
            raise AuthenticationFailed(
                f"the cluster refused the client's SASL authentication (error {error_code}); "
                "it closes such connections, and so does the proxy"
            )

    async def _answer_produce(self, slot: HeldProduce) -> bool:
        """Hold a produce in the purgatory until its answer, and send it (True). Its expiry
        cancels ``self._answer_wait``, and ``_pump_responses`` sends the timeout's answer; if
        the broker's came as it expired, False: that one is sent there, outside the scope."""
        assert self._held is not None
        correlation_id = slot.plan.header.correlation_id
        ready = self._upstream.peek()
        waited_ms = math.floor((trio.current_time() - slot.arrival.sent_s) * 1000)
        hold_ms = produce_hold_ms(
            slot.produced.timeout_ms,
            waited_ms,
            answered=ready is not None and answered_id(ready) == correlation_id,
        )
        if hold_ms is None:  # answered already (pipelined answers come in batches)
            await self._send_produce_answer(slot, await self._upstream.answer(correlation_id))
            return True
        operation = self._held.produce.hold(hold_ms, slot.plan, self._answer_wait)
        self._held_answer = held = _HeldAnswer(slot, operation)
        frame = await self._upstream.answer(correlation_id)  # Cancelled: it expired
        if not operation.answered(frame):  # it expired as the answer came
            held.frame = frame
            return False
        self._held_answer = None
        await self._send_produce_answer(slot, frame)
        return True

    async def _send_produce_answer(self, slot: HeldProduce, frame: bytearray) -> None:
        """Send an answered produce and wake the fetches held on its partitions."""
        assert self._held is not None
        await self._send_forwarded(slot, frame)
        names = self._held.names
        self._held.produce.produced(
            [names.key(name, topic_id, index)
             for name, topic_id, indexes in slot.produced.topics for index in indexes]
        )  # fmt: skip

    async def _answer_fetch(self, slot: HeldFetch | HeldRepeat) -> None:
        """Build, hold and send the response to a fetch the proxy terminates."""
        fetches = self._fetches
        assert fetches is not None
        if isinstance(slot, HeldRepeat):
            answer = await fetches.answer_repeat(slot)
        else:
            answer = await fetches.answer(slot)
        # No copy: the records go from the upstream frame to the client's socket (writev);
        # joining them was a quarter of the proxy's CPU consuming 1 KiB records.
        await self._client_out.send_parts(answer.parts)
        fetches.finish(slot.ticket if isinstance(slot, HeldFetch) else None)
        self._report(slot, answer.error_code, answer.frame_bytes, answer.upstream_done_s,
                     answer.outcome, answer.held_ms)  # fmt: skip

    def _report(
        self,
        slot: Slot | Unanswered,
        error_code: int | None,
        response_bytes: int,
        upstream_done_s: float,
        outcome: Outcome,
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
