# Strategy: the request side of one client connection, as a thin pump: read a frame's size, check
# it, pay for the frame from the pool (the KIP-72 mute), read it, ask the state machine what it
# becomes (`Connection.receive`; a fetch the proxy answers is the held path's:
# proxy/held/holds.py), owe its slot and send what goes upstream.
#
# While memory is short, Kafka's rule: one request per connection in processing. A connection
# whose earlier responses are not all written waits for them before it is given memory for the
# next (`_one_in_processing`), so none holds several requests' worth of the pool while others
# wait for their first; the waiting ones get memory in random order, in rounds (a Turn,
# proxy/primitives/memory.py). With memory to spare, clients pipeline through the proxy as they
# like.
"""A client connection's request pump."""

from __future__ import annotations

import time

import trio

from proxy.connection.client_auth import ClientAuthentication
from proxy.connection.handoff import Handoff
from proxy.connection.records import Recorder
from proxy.connection.services import ConnectionServices
from proxy.connection.state import Arrival, Connection, Forwarded, HeldFetch, Unanswered
from proxy.connection.upstream_link import CONNECTION_BOUND_APIS, UpstreamLink
from proxy.errors import ClientClosed, ClientProtocolError, FrameTimeout, IdleTimeout
from proxy.held.holds import ClientFetch, ConnectionHolds
from proxy.primitives.framed import FrameReader, PeerClosed
from proxy.primitives.lease import Lease
from proxy.primitives.stream_deadlines import ReadTimeouts
from proxy.primitives.wake_order import Turn
from proxy.routing.rewrite import LocalAnswer, RequestPlan, plan_request
from wire.apis import ApiKey

__all__ = ["READ_AHEAD", "RequestPump"]

_SIZE_BYTES = 4
#: api key, api version and correlation id: no request is shorter.
_MIN_REQUEST_BYTES = 8
_API_VERSIONS = int(ApiKey.API_VERSIONS)
#: Bytes one receive may bring past the piece being read (proxy/primitives/framed.py): small
#: pipelined frames come several per receive; what a client sends this way is held before its pool
#: reservation, at most this much per connection.
READ_AHEAD = 16 * 1024
#: A larger request is reserved from the pool this much at a time (doubling), as its bytes
#: arrive (proxy/primitives/framed.py): a client that declares a large frame and sends
#: nothing holds this much, not the frame. Requests this small (nearly all) are reserved in one go.
_FIRST_PIECE_BYTES = 64 * 1024


class RequestPump:
    """Reads, checks, pays for and passes on one client's requests.

    Args:
        services: the pool, the drain, the broker directory, known ApiVersions, settings.
        client: the client's stream.
        node_id: the broker whose port it is on (None: bootstrap).
        conn, handoff: the connection's state, and what the pumps share.
        upstream: the connection's upstream link.
        auth: what the cluster said of the client's authentication (passthrough).
        holds: the connection's held requests (None: ``[fetch] hold = false``).
        recorder: where a finished acks=0 produce is reported.
    """

    def __init__(
        self,
        services: ConnectionServices,
        client: trio.abc.Stream,
        node_id: int | None,
        conn: Connection,
        handoff: Handoff,
        upstream: UpstreamLink,
        auth: ClientAuthentication,
        holds: ConnectionHolds | None,
        recorder: Recorder,
    ) -> None:
        self._services = services
        self._client = client
        self._node_id = node_id
        self._conn = conn
        self._handoff = handoff
        self._upstream = upstream
        self._auth = auth
        self._holds = holds
        self._recorder = recorder
        self._hold_produces = holds is not None
        self._hold_fetches = holds is not None and holds.holds_fetches

    async def run(self) -> None:
        """Read, check, pay for and forward requests until the client closes.

        Timeouts use one cancel scope for the whole connection, whose deadline the reader
        arms only while it waits (idle for a prefix, frame for a body; proxy/primitives/framed.py)
        and which is stood down while muted: cheaper than a fresh scope per read, or a deadline
        move per frame, which both showed in profiles.
        """
        services = self._services
        settings = services.settings
        idle_s, frame_s = settings.idle_timeout_s, settings.frame_timeout_s
        auth = self._auth
        # Frames while a passthrough client's SASL exchange is under way (client_auth.py).
        sasl_max = settings.sasl_request_max_bytes
        pool, link, holds, conn = services.pool, self._upstream, self._holds, self._conn
        turn = Turn()  # this connection's place in the pool's rounds while memory is tight
        timeout = trio.CancelScope()
        # The reader arms the idle and frame deadlines only while it waits
        # (proxy/primitives/framed.py); muting is the proxy's doing, not the client's, and is not
        # timed (stand_down). It also writes the requests deferred below before it waits.
        timeouts = ReadTimeouts(timeout, idle_s, frame_s)
        reader = FrameReader(self._client, settings.request_max_bytes, read_ahead=READ_AHEAD,
                             timeouts=timeouts, flush=link,
                             first_piece_bytes=_FIRST_PIECE_BYTES)  # fmt: skip
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
                        # An idle consumer's repeated fetch is held from its bytes.
                        fetch = None if holds is None else holds.hold_repeat(body)
                        if fetch is None:
                            fetch = await self._pass_on(frame, body, reader, arrival_s, ts,
                                                        muted_s)  # fmt: skip
                        request_bytes = len(frame)
                        # The lease ends with this block: the buffer must not outlive it
                        # (a parked connection would keep its last frame alive).
                        del frame, body
                    if fetch is not None:
                        # A fetch the proxy answers itself; the request's memory is free again.
                        arrival = Arrival(arrival_s, ts, muted_s, request_bytes, arrival_s)
                        await self._start_fetch(fetch, arrival)
        finally:
            conn.end_requests()
            self._handoff.owed.unpark_all()
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
        conn, answered = self._conn, self._handoff.answered
        while conn.in_processing:
            await answered.park()

    async def _start_fetch(self, fetch: ClientFetch, arrival: Arrival) -> None:
        """Start a fetch the proxy answers and owe its slot: with its first look sent on the
        client's upstream connection if the held path hands one back."""
        holds, owe = self._holds, self._handoff.owe
        assert holds is not None
        started = await holds.start(fetch)
        muted_s = arrival.muted_s + started.muted_s
        slot = HeldFetch(fetch, arrival.sent_at(trio.current_time(), muted_s))
        if started.first_look is None:
            await owe(slot, wake=started.wake)
        else:
            await self._upstream.forward(owe, slot, started.first_look, may_defer=False)

    async def _pass_on(
        self,
        frame: bytearray,
        body: memoryview,
        reader: FrameReader,
        arrival_s: float,
        ts: float,
        muted_s: float,
    ) -> ClientFetch | None:
        """Plan a request (``frame``, size prefix included, arrived at ``arrival_s`` / epoch
        ``ts`` after ``muted_s`` in the pool) and pass it on: answered here, or forwarded
        upstream (its slot owed); a Fetch the proxy answers itself is returned, for the caller
        to start once the request's memory is free again."""
        auth, link, owe = self._auth, self._upstream, self._handoff.owe
        passthrough = auth.passthrough
        plan = plan_request(body, self._services.brokers, client_sasl=passthrough)
        if (
            not passthrough
            and isinstance(plan, RequestPlan)
            and plan.header.api_key == _API_VERSIONS
        ):
            plan = self._known_api_versions(plan)
        # sent_s is set before the slot is owed: the response pump may take it (and start a
        # held produce's clock) before we send. Built once here: it is on every request's path.
        now_s = trio.current_time()
        arrival = Arrival(arrival_s, ts, muted_s, len(frame), now_s)
        if isinstance(plan, LocalAnswer):
            await owe(self._conn.receive(plan, body, arrival, hold_produce=False))
            return None
        trusted = not passthrough or auth.trusted(now_s)
        if trusted and self._hold_fetches and plan.header.api_key == ApiKey.FETCH:
            assert self._holds is not None
            fetch = self._holds.take(plan, body)
            if fetch is not None:
                return fetch
        slot = self._conn.receive(plan, body, arrival, hold_produce=self._hold_produces and trusted)
        if isinstance(slot, Forwarded):
            if plan.header.api_key == ApiKey.SASL_HANDSHAKE:
                auth.handshake()
            elif plan.header.api_key in CONNECTION_BOUND_APIS:
                link.stay_open()
        answered = not isinstance(slot, Unanswered)
        if answered:
            self._handoff.processing(len(frame))  # (its lease still holds it a moment)
        await link.forward(owe, slot, frame, may_defer=reader.frame_in_hand())
        if not answered:
            self._recorder.report(slot, None, 0, trio.current_time(), "no_response")
        return None

    def _known_api_versions(self, plan: RequestPlan) -> RequestPlan | LocalAnswer:
        """ApiVersions answered from the cluster's last answer for this port, if it is
        recent (proxy/connection/api_versions.py): no upstream connection opens for it."""
        known = self._services.api_versions.answer(self._node_id, plan.header, trio.current_time())
        return plan if known is None else LocalAnswer(plan.correlation_id, known)

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
