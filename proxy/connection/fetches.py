# Strategy: a connection's side of the fetches the proxy answers itself (the held-requests
# service does the holding). The request pump asks `hold_repeat` (an idle consumer's repeat,
# held from its bytes) or `ticket` (the fetch planned and decided), then `start` owes its slot:
# held at once (decision HOLD), its first look sent on the client's own upstream connection
# (an active consumer), or read the shared way by the answer. The response pump awaits
# `answer` / `answer_repeat` and calls `finish` once written. One fetch at a time per
# connection; at most one read-ahead (fetch_ahead.py) from pool memory nobody waits for.
"""A client connection's held fetches: from Fetch request to written response."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

import trio
from prometheus_client import Counter

from proxy.connection.fetch_ahead import LEAST_WAIT_S, Predictions, ReadAhead, serves
from proxy.connection.fetch_frames import EmptyAnswers, frame_parts, is_empty
from proxy.connection.own_reads import OwnReads
from proxy.connection.state import Arrival, HeldFetch, HeldRepeat
from proxy.connection.upstream_link import UpstreamLink
from proxy.held.decision import FetchDecision
from proxy.held.delayed import DelayedFetch
from proxy.held.fetch_answer import nothing_to_tell
from proxy.held.fetch_repeat import FetchRepeat
from proxy.held.fetch_session import ContextKind, FetchContext
from proxy.held.service import HeldRequests
from proxy.held.ticket import FetchTicket
from proxy.observability.metrics import Metrics
from proxy.observability.outcomes import Outcome
from proxy.primitives.memory import MemoryPool
from proxy.routing.rewrite import BrokerDirectory, RequestPlan, advertise_node_endpoints
from wire.apis import ApiKey, response_header_version
from wire.codec import decode, encode
from wire.framing import frame as framed
from wire.headers import (
    RequestHeader,
    encode_request_header,
    parse_response_header,
)
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

__all__ = ["ClientFetches", "FetchAnswer"]

_SIZE_BYTES = 4


class FetchAnswer(NamedTuple):
    """A held fetch's response and what its request record needs."""

    parts: list[bytes | bytearray | memoryview]  # the frame, size prefix first
    frame_bytes: int
    error_code: int | None
    upstream_done_s: float  # the reads' end, not the wait in the purgatory
    outcome: Outcome
    held_ms: float


class ClientFetches:
    """The held fetches of one client connection.

    Args:
        held: the proxy's held-requests service.
        node_id: the broker whose port the connection is on (its fetch sessions are there).
        pool: where an active consumer's first look pays its response budget (KIP-72).
        brokers: to advertise the brokers a response names (KIP-951 node endpoints).
        upstream: the connection's upstream link (first looks; passthrough reads).
        respond_wake: the lot the response pump parks on; a fetch held at once unparks it
            when it is done.
        passthrough: the client's identity reads its records (see the module header).
        metrics: read-aheads are counted there.

    Resource handling: ``abandon`` returns the memory of every fetch still in progress (and
    of a read-ahead) and takes its wait out of the purgatory; the connection calls it when it
    ends.
    """

    def __init__(
        self,
        held: HeldRequests,
        node_id: int,
        pool: MemoryPool,
        brokers: BrokerDirectory,
        upstream: UpstreamLink,
        respond_wake: trio.lowlevel.ParkingLot,
        *,
        passthrough: bool,
        metrics: Metrics,
    ) -> None:
        self._held = held
        self._node_id = node_id
        self._pool = pool
        self._brokers = brokers
        self._upstream = upstream
        self._respond_wake = respond_wake
        self._passthrough = passthrough
        # Passthrough: the partitions (as the client names them) this connection has fetched
        # itself, the only ones its fetches may be answered about from the proxy's knowledge.
        self._known: set[tuple[object, int]] | None = set() if passthrough else None
        self._tickets: set[FetchTicket] = set()  # their pool leases are released on close
        self._turn = trio.Semaphore(1)
        # The last idle incremental fetch, and the plan it had, to recognise its repeats.
        self._repeat: tuple[FetchRepeat, RequestPlan] | None = None
        # A held repeat's wait, and the ticket its answer made if news came, until answered.
        self._repeat_hold: DelayedFetch | None = None
        self._repeat_ticket: FetchTicket | None = None
        self._empty_answers = EmptyAnswers()
        # The upstream request of the first look of the fetch whose turn it is, when it went
        # on this connection (what a read-ahead is predicted from), and the read-ahead in
        # flight.
        self._looked: FetchRequest | None = None
        self._ahead: ReadAhead | None = None
        self._predictions = Predictions()
        read_aheads = metrics.read_aheads
        self._aheads_sent = read_aheads.labels("sent")
        self._aheads_used = read_aheads.labels("used")
        self._aheads_discarded = read_aheads.labels("discarded")
        self._aheads_expired = read_aheads.labels("expired")

    @property
    def repeats(self) -> bool:
        """Whether an idle consumer's repeats may come (a template is learnt)."""
        return self._repeat is not None

    def hold_repeat(self, body: memoryview, arrival: Arrival) -> HeldRepeat | None:
        """Hold an idle consumer's repeated fetch from its bytes, without decoding, planning
        or a ticket (proxy/held/fetch_repeat.py, FetchHolding.hold_repeat), and return its
        slot to owe (``wake=False``: the end of the hold wakes the response pump). None: not
        one, or not now (another fetch's turn, a read-ahead out): start it as usual."""
        if self._repeat is None or self._ahead is not None or not self._turn.value:
            return None
        repeat, plan = self._repeat
        matched = repeat.match(body)
        if matched is None:
            return None
        correlation_id, epoch = matched
        hold = self._held.holding.hold_repeat(self._node_id, repeat, epoch, self._respond_wake)
        if hold is None:
            return None
        self._turn.acquire_nowait()  # free: checked above, and nothing awaited since
        self._predictions.fetched(None)
        self._repeat_hold = hold
        return HeldRepeat(plan, repeat, correlation_id, hold, trio.current_time(), arrival)

    def ticket(self, plan: RequestPlan, body: memoryview) -> FetchTicket | None:
        """The ticket of a Fetch the proxy answers itself (None: forward it as it is)."""
        version = plan.header.api_version
        request = decode(FetchRequest, body[plan.body_offset :], version)
        if request.replica_id >= 0:
            return None  # a follower's fetch: not a client's, not ours to hold
        ticket = self._held.planner.plan(self._node_id, request, version, self._known)
        # Repeats are learnt from fetches the proxy knows have nothing new (an active
        # consumer's differ each time, and learning costs three encodes), never in
        # passthrough (which plans only what its connection has read).
        if (
            self._known is None
            and ticket.decision is FetchDecision.HOLD
            and _may_repeat(request, ticket.context)
        ):
            self._learn_repeat(plan, body, request, ticket)
        return ticket

    def _learn_repeat(
        self, plan: RequestPlan, body: memoryview, request: FetchRequest, ticket: FetchTicket
    ) -> None:
        """Keep ``request`` as the template of its repeats, unless it is the one kept."""
        context, known = ticket.context, self._repeat
        if known is not None and known[0].session is context.session and known[0].match(body):
            return
        repeat = FetchRepeat.learn(body, plan.body_offset, request, ticket.version, context)
        self._repeat = None if repeat is None else (repeat, plan)

    async def start(
        self,
        plan: RequestPlan,
        ticket: FetchTicket,
        arrival: Arrival,
        owe: Callable[..., Awaitable[None]],
    ) -> None:
        """Owe the fetch's slot with ``owe`` (the connection's), in request order; see the
        module header for the three ways. ``arrival.sent_s`` is replaced by now; its
        ``muted_s`` grows by any wait for the pool."""
        link, held = self._upstream, self._held
        await link.flush()  # what was deferred goes first: the answer may need it
        try:  # (acquire() takes a trip through the scheduler even when the turn is free)
            self._turn.acquire_nowait()
        except trio.WouldBlock:
            await self._turn.acquire()
        self._tickets.add(ticket)
        first_look: FetchRequest | None = None
        if ticket.decision is FetchDecision.FETCH and link.is_open and not self._passthrough:
            first_look = held.planner.immediate_request(ticket)
        self._predictions.fetched(first_look)
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            version = plan.header.api_version
            if first_look is not None and serves(ahead, first_look, version, link.generation):
                # Its first look is asked already (perhaps answered): no new upstream request.
                ticket.pay(ahead.lease)
                self._looked = ahead.request
                self._aheads_used.inc()
                slot = HeldFetch(plan, ticket, arrival.sent_at(trio.current_time()),
                                 first_sent=True, ahead_id=ahead.correlation_id)  # fmt: skip
                await owe(slot)
                return
            self._discard(ahead, self._aheads_discarded)
        if ticket.decision is FetchDecision.HOLD and held.holding.hold_now(
            ticket, self._respond_wake
        ):
            # Held already: the response pump is woken by the end of the hold, not now.
            await owe(HeldFetch(plan, ticket, arrival.sent_at(trio.current_time())), wake=False)
            return
        muted_s = arrival.muted_s
        first: bytes | None = None
        if first_look is not None:
            lease = self._pool.try_allocate(held.response_max_bytes)
            if lease is None:
                parked_s = trio.current_time()
                lease = await self._pool.allocate(held.response_max_bytes)
                muted_s += trio.current_time() - parked_s
            lease.hand_off()  # released by finish (ticket.release)
            ticket.pay(lease)
            header = plan.header
            body = encode(first_look, header.api_version)
            first = framed(encode_request_header(header), body)
        arrival = arrival.sent_at(trio.current_time(), muted_s)
        if first is None or not link.is_open:  # (closed while muted: the shared way, then)
            await owe(HeldFetch(plan, ticket, arrival))
            return
        self._looked = first_look
        await link.forward(
            owe, HeldFetch(plan, ticket, arrival, first_sent=True), first, may_defer=False
        )

    async def answer(self, slot: HeldFetch) -> FetchAnswer:
        """Build (hold, if need be) the response to ``slot``'s fetch."""
        ticket, header = slot.ticket, slot.plan.header
        version = header.api_version
        header_version = response_header_version(ApiKey.FETCH, version)
        reads, first = None, None
        if self._known is not None:  # passthrough: the client's own identity reads
            reads = OwnReads(self._upstream, header.client_id, self._known)
        elif slot.first_sent:
            ahead_id = slot.ahead_id
            frame = await self._upstream.answer(
                slot.plan.correlation_id if ahead_id is None else ahead_id
            )
            body = memoryview(frame)[_SIZE_BYTES:]
            _, start = parse_response_header(body, header_version)
            first = decode(FetchResponse, body[start:], version)
            if ahead_id is not None and _has_error(first):
                # Read before the client asked: an error may be stale. Ask afresh (the shared
                # way: HeldRequests.answer's own first look).
                ticket.release()
                first = None
        looked, self._looked = self._looked, None
        response = await self._held.answer(ticket, reads, first)
        if looked is not None and first is not None and not ticket.held_ms and not ticket.expired:
            await self._read_ahead(looked, response, header, ticket.request.max_wait_ms)
        return self._answer_of(response, ticket, version, slot.plan.correlation_id)

    async def answer_repeat(self, slot: HeldRepeat) -> FetchAnswer:
        """The response to a repeat held from its bytes (``hold_repeat``): once its hold ends
        by its deadline with nothing to tell, the session's empty answer, built from nothing
        but the correlation id; after news (or something to tell), a ticket and the usual
        answer (re-fetched, built, encoded)."""
        hold, repeat = slot.hold, slot.repeat
        await hold.wait()
        session, held = repeat.session, self._held
        if (
            hold.expired
            and session is not None
            and nothing_to_tell(repeat.context, held.states, held.names)
        ):
            held_ms = (trio.current_time() - slot.held_from_s) * 1000
            frame = self._empty_answers.frame(
                session.session_id, repeat.version, slot.correlation_id
            )
            return FetchAnswer([frame], len(frame), None, slot.held_from_s, "expired", held_ms)
        ticket = self._repeat_ticket = FetchTicket.of_repeat(self._node_id, repeat, hold,
                                                             slot.held_from_s)  # fmt: skip
        self._tickets.add(ticket)  # its re-fetch's lease is released by finish or abandon
        response = await held.answer(ticket)
        return self._answer_of(response, ticket, repeat.version, slot.correlation_id)

    def _answer_of(
        self, response: FetchResponse, ticket: FetchTicket, version: int, correlation_id: int
    ) -> FetchAnswer:
        """``response`` to ``ticket``'s fetch as the parts of its frame, and its record's
        facts."""
        upstream_done_s = trio.current_time() - ticket.held_ms / 1000
        if response.node_endpoints:
            advertise_node_endpoints(response, self._brokers)
        error_code = response.error_code or None
        outcome: Outcome = "error" if error_code else ("expired" if ticket.expired else "ok")
        if is_empty(response):
            frame = self._empty_answers.frame(response.session_id, version, correlation_id)
            return FetchAnswer([frame], len(frame), None, upstream_done_s, outcome, ticket.held_ms)
        parts = frame_parts(response, version, correlation_id)
        size = sum(len(part) for part in parts)
        return FetchAnswer(parts, size, error_code, upstream_done_s, outcome, ticket.held_ms)

    async def _read_ahead(
        self, looked: FetchRequest, response: FetchResponse, header: RequestHeader, wait_ms: int
    ) -> None:
        """Send the read-ahead of the client's next fetch (``header``: its last fetch's, whose
        max wait was ``wait_ms``), if there is one worth sending (fetch_ahead.Predictions) and
        pool memory nobody waits for, while the pool stays at least half free with it."""
        link, pool = self._upstream, self._pool
        request = self._predictions.answered(looked, response)
        if request is None or self._ahead is not None or not link.is_open:
            return
        size = self._held.response_max_bytes
        if pool.limit_bytes >= 0 and pool.available_bytes - size < pool.limit_bytes / 2:
            return  # consumers that pause with one out hold at most half the pool
        lease = pool.try_allocate(size)
        if lease is None:
            return
        lease.hand_off()  # released by the request pump (used or discarded) or by abandon
        try:
            version = header.api_version
            correlation_id = await link.send_ahead(
                version, header.client_id, encode(request, version)
            )
        except BaseException:
            lease.release()
            raise
        if correlation_id is None:
            lease.release()
            return
        expires_s = trio.current_time() + max(wait_ms / 1000, LEAST_WAIT_S)
        self._ahead = ReadAhead(request, version, correlation_id, link.generation, lease,
                                expires_s)  # fmt: skip
        self._aheads_sent.inc()

    @property
    def ahead_expires_s(self) -> float | None:
        """When the read-ahead out is given up unless claimed (None: none is out)."""
        ahead = self._ahead
        return None if ahead is None else ahead.expires_s

    def expire_ahead(self) -> None:
        """Give up the read-ahead out if its time has passed unclaimed: the client paused or
        stalls, and its memory and upstream answer are not kept for it."""
        ahead = self._ahead
        if ahead is not None and trio.current_time() >= ahead.expires_s:
            self._ahead = None
            self._discard(ahead, self._aheads_expired)

    def _discard(self, ahead: ReadAhead, outcome: Counter) -> None:
        """Nobody will take the read-ahead: drop its answer (the connection answers in order:
        it is skipped when it comes), release its memory, count it under ``outcome``."""
        if ahead.generation == self._upstream.generation:
            self._upstream.drop(ahead.correlation_id)
        ahead.release()
        outcome.inc()

    def finish(self, ticket: FetchTicket | None = None) -> None:
        """The response is written: its memory is the pool's again, the next fetch's turn.
        ``ticket``: the fetch's (None: a held repeat's, with the ticket its answer made, if
        it made one)."""
        if ticket is None:
            ticket, self._repeat_ticket, self._repeat_hold = self._repeat_ticket, None, None
        if ticket is not None:
            ticket.release()
            self._tickets.discard(ticket)
        self._turn.release()

    def abandon(self) -> None:
        """The connection ended: no fetch of it keeps memory or a place in the purgatory."""
        for ticket in self._tickets:
            ticket.abandon()
        hold, self._repeat_hold = self._repeat_hold, None
        if hold is not None:
            hold.force_complete()
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self._discard(ahead, self._aheads_discarded)


def _has_error(response: FetchResponse) -> bool:
    """Whether the fetch, or any partition of it, was answered with an error."""
    return bool(response.error_code) or any(
        data.error_code for topic in response.responses for data in topic.partitions
    )


def _may_repeat(request: FetchRequest, context: FetchContext) -> bool:
    """Whether ``request`` is what an idle consumer repeats (proxy/held/fetch_repeat.py): a
    fetch that may wait, and either incremental, changing nothing in its session, or
    sessionless (closing no session: the repeat would skip that)."""
    if request.max_wait_ms <= 0:
        return False
    if context.kind is ContextKind.INCREMENTAL:
        return not request.topics and not request.forgotten_topics_data
    return context.kind is ContextKind.SESSIONLESS and request.session_id == 0
