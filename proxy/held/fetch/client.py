# Strategy: one client connection's side of the fetches the proxy answers itself, from the plan that
# says the proxy answers it to the answer's bytes. The request pump gets a `ClientFetch`
# (`hold_repeat`: an idle consumer's repeat, held from its bytes; or `take`: planned and decided),
# then `start`s it: held at once (decision HOLD), its first look handed back to send on the client's
# own upstream connection (an active consumer; a busy one's is its own long-poll, decision POLL), a
# read-ahead claimed, or read the shared way by the answer. The response pump awaits `answer` and
# calls `finish` once it is written. One fetch at a time per connection; at most one read-ahead
# (ahead.py), from pool memory nobody waits for.
"""A client connection's held fetches: from Fetch request to the answer's frame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import trio

from proxy.held.client_upstream import ClientUpstream
from proxy.held.fetch.answer import nothing_to_tell
from proxy.held.fetch.decision import FetchDecision
from proxy.held.fetch.delayed import DelayedFetch
from proxy.held.fetch.frames import EmptyAnswers, frame_parts, is_empty
from proxy.held.fetch.own_reads import OwnReads
from proxy.held.fetch.path import FetchPath
from proxy.held.fetch.read_ahead import ReadAheads
from proxy.held.fetch.repeat import FetchRepeat
from proxy.held.fetch.session import ContextKind, FetchContext
from proxy.held.fetch.ticket import FetchTicket
from proxy.observability.metrics import Metrics
from proxy.observability.outcomes import Outcome
from proxy.primitives.memory import MemoryPool
from proxy.routing.rewrite import BrokerDirectory, RequestPlan, advertise_node_endpoints
from wire.apis import ApiKey, response_header_version
from wire.codec import decode, encode
from wire.framing import frame as framed
from wire.headers import encode_request_header, parse_response_header
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

__all__ = ["ClientFetch", "ClientFetches", "FetchAnswer", "FetchStart"]

_SIZE_BYTES = 4


@dataclass(slots=True, eq=False)
class ClientFetch:
    """One client fetch the proxy answers itself, from its plan to its written answer.

    Attributes:
        plan: its request's plan (a repeat's is the learnt fetch's: its header names the API
            and the client for the request's record).
        correlation_id: the client's.
        ticket: planned and decided; None for a repeat held from its bytes, until its answer
            makes one (after news).
        repeat: the template a repeat matched; ``hold`` its wait in the purgatory, entered at
            ``held_from_s`` (trio clock).
        first_sent: its first look went upstream on the client's own connection (with the
            client's correlation id, or as the read-ahead ``ahead_id`` of the proxy's own).
    """

    plan: RequestPlan
    correlation_id: int
    ticket: FetchTicket | None = None
    repeat: FetchRepeat | None = None
    hold: DelayedFetch | None = None
    held_from_s: float = 0.0
    first_sent: bool = False
    ahead_id: int | None = None
    polling: bool = False  # its long-poll is out (decision POLL): see FetchPlanner.polling

    @property
    def first_look_id(self) -> int | None:
        """The correlation id whose answer the client's upstream connection owes this fetch,
        paid for before it was sent (None: it owes none, or a read-ahead's, awaited already)."""
        return self.correlation_id if self.first_sent and self.ahead_id is None else None


class FetchStart(NamedTuple):
    """What the request pump does with a fetch once started: send ``first_look`` (a frame)
    on the client's upstream connection, or owe it as it is, waking the response pump unless
    the end of its hold will (``wake``). ``muted_s``: the time it waited for the pool."""

    first_look: bytes | None
    muted_s: float
    wake: bool


#: A fetch held at once or a claimed read-ahead: nothing to send, no pool wait.
_HELD = FetchStart(None, 0.0, wake=False)
_CLAIMED = FetchStart(None, 0.0, wake=True)


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
        path: the proxy's held fetch path.
        node_id: the broker whose port the connection is on (its fetch sessions are there).
        pool: where an active consumer's first look pays its response budget (KIP-72).
        brokers: to advertise the brokers a response names (KIP-951 node endpoints).
        upstream: the connection's own upstream connection (first looks; passthrough reads).
        wake: the lot the response pump parks on; a fetch held at once unparks it when done.
        passthrough: the client's identity reads its records (see the module header).
        metrics: read-aheads are counted there.

    Resource handling: ``abandon`` returns the memory of every fetch still in progress (and
    of a read-ahead) and takes its wait out of the purgatory; the connection calls it when it
    ends.
    """

    def __init__(
        self,
        path: FetchPath,
        node_id: int,
        pool: MemoryPool,
        brokers: BrokerDirectory,
        upstream: ClientUpstream,
        wake: trio.lowlevel.ParkingLot,
        *,
        passthrough: bool,
        metrics: Metrics,
    ) -> None:
        self._path = path
        self._node_id = node_id
        self._pool = pool
        self._brokers = brokers
        self._upstream = upstream
        self._wake = wake
        self._passthrough = passthrough
        # Passthrough: the partitions (as the client names them) this connection has fetched
        # itself, the only ones its fetches may be answered about from the proxy's knowledge.
        self._known: set[tuple[object, int]] | None = set() if passthrough else None
        self._fetches: set[ClientFetch] = set()  # their memory and holds, until finished
        self._turn = trio.Semaphore(1)
        # The last idle incremental fetch, and the plan it had, to recognise its repeats.
        self._repeat: tuple[FetchRepeat, RequestPlan] | None = None
        self._empty_answers = EmptyAnswers()
        # The upstream request of the first look of the fetch whose turn it is, when it went
        # on this connection (what a read-ahead is predicted from), and the read-ahead in
        # flight.
        self._looked: FetchRequest | None = None
        self._aheads = ReadAheads(upstream, pool, path.response_max_bytes, metrics)

    # -- the request side ----------------------------------------------------------------

    def hold_repeat(self, body: memoryview) -> ClientFetch | None:
        """Hold an idle consumer's repeated fetch from its bytes, without decoding, planning
        or a ticket (repeat.py, FetchHolding.hold_repeat): started already, its hold's end
        wakes the response pump. None: not one, or not now (another fetch's turn, a
        read-ahead out): ``take`` it as usual."""
        if self._repeat is None or self._aheads.out or not self._turn.value:
            return None
        repeat, plan = self._repeat
        matched = repeat.match(body)
        if matched is None:
            return None
        correlation_id, epoch = matched
        hold = self._path.holding.hold_repeat(self._node_id, repeat, epoch, self._wake)
        if hold is None:
            return None
        self._turn.acquire_nowait()  # free: checked above, and nothing awaited since
        self._aheads.claim(None, 0)  # (none is out: checked above)
        fetch = ClientFetch(plan, correlation_id, None, repeat, hold, trio.current_time())
        self._fetches.add(fetch)
        return fetch

    def take(self, plan: RequestPlan, body: memoryview) -> ClientFetch | None:
        """The fetch, planned and decided, if the proxy answers it itself (None: forward it
        as it is)."""
        version = plan.header.api_version
        request = decode(FetchRequest, body[plan.body_offset :], version)
        if request.replica_id >= 0:
            return None  # a follower's fetch: not a client's, not ours to hold
        ticket = self._path.planner.plan(self._node_id, request, version, self._known)
        # Repeats are learnt from fetches the proxy knows have nothing new (an active
        # consumer's differ each time, and learning costs three encodes), never in
        # passthrough (which plans only what its connection has read).
        if (
            self._known is None
            and ticket.decision is FetchDecision.HOLD
            and _may_repeat(request, ticket.context)
        ):
            self._learn_repeat(plan, body, request, ticket)
        return ClientFetch(plan, plan.correlation_id, ticket)

    def _learn_repeat(
        self, plan: RequestPlan, body: memoryview, request: FetchRequest, ticket: FetchTicket
    ) -> None:
        """Keep ``request`` as the template of its repeats, unless it is the one kept."""
        context, known = ticket.context, self._repeat
        if known is not None and known[0].session is context.session and known[0].match(body):
            return
        repeat = FetchRepeat.learn(body, plan.body_offset, request, ticket.version, context)
        self._repeat = None if repeat is None else (repeat, plan)

    async def start(self, fetch: ClientFetch) -> FetchStart:
        """Start a fetch from ``take`` once its turn comes (see the module header for the
        ways); a held repeat is started already."""
        ticket = fetch.ticket
        if ticket is None:
            return _HELD
        link, path = self._upstream, self._path
        await link.flush()  # what was deferred goes first: the answer may need it
        try:  # (acquire() takes a trip through the scheduler even when the turn is free)
            self._turn.acquire_nowait()
        except trio.WouldBlock:
            await self._turn.acquire()
        self._fetches.add(fetch)
        first_look = self._first_look(ticket)
        ahead = self._aheads.claim(first_look, fetch.plan.header.api_version)
        if ahead is not None:
            # Its first look is asked already (perhaps answered): no new upstream request.
            ticket.pay(ahead.lease)
            self._looked = ahead.request
            fetch.first_sent, fetch.ahead_id = True, ahead.correlation_id
            return _CLAIMED
        if ticket.decision is FetchDecision.HOLD and path.holding.hold_now(ticket, self._wake):
            return _HELD  # the response pump is woken by the end of the hold, not now
        if first_look is None:
            return FetchStart(None, 0.0, wake=True)
        muted_s = 0.0
        if ticket.decision is FetchDecision.POLL:
            lease = self._pool.try_allocate(path.response_max_bytes)
            if lease is None:  # (checked by _first_look: taken meanwhile)
                ticket.decision = FetchDecision.FETCH
                return FetchStart(None, 0.0, wake=True)
        else:
            lease = self._pool.try_allocate(path.response_max_bytes)
            if lease is None:
                parked_s = trio.current_time()
                lease = await self._pool.allocate(path.response_max_bytes)
                muted_s = trio.current_time() - parked_s
            if not link.is_open:  # closed while muted: the shared way, then
                lease.release()
                return FetchStart(None, muted_s, wake=True)
        lease.hand_off()  # released by finish (ticket.release)
        ticket.pay(lease)
        header = fetch.plan.header
        self._looked = first_look
        fetch.first_sent = True
        if ticket.decision is FetchDecision.POLL:
            fetch.polling = True
            path.planner.polling(ticket, out=True)
        frame = framed(encode_request_header(header), encode(first_look, header.api_version))
        return FetchStart(frame, muted_s, wake=True)

    def _first_look(self, ticket: FetchTicket) -> FetchRequest | None:
        """The upstream request ``ticket``'s start sends on the client's own connection, if
        any: a busy consumer's long-poll (POLL: opening the connection if need be), or an
        active consumer's first look (FETCH: only on a connection already open). A POLL is
        a FETCH instead when it would take the pool below half free: its budget is held for
        as long as the broker holds it, and waiting consumers cost nothing in the purgatory."""
        decision, path = ticket.decision, self._path
        if decision is FetchDecision.POLL:
            pool, size = self._pool, path.response_max_bytes
            if pool.limit_bytes < 0 or pool.available_bytes - size >= pool.limit_bytes / 2:
                return path.planner.poll_request(ticket)
            ticket.decision = decision = FetchDecision.FETCH
        if decision is FetchDecision.FETCH and self._upstream.is_open and not self._passthrough:
            return path.planner.immediate_request(ticket)
        return None

    # -- the response side ---------------------------------------------------------------

    async def answer(self, fetch: ClientFetch) -> FetchAnswer:
        """Build (hold, if need be) the response to ``fetch``."""
        if fetch.ticket is None:
            return await self._answer_repeat(fetch)
        ticket, header = fetch.ticket, fetch.plan.header
        version = header.api_version
        reads, first = None, None
        if self._known is not None:  # passthrough: the client's own identity reads
            reads = OwnReads(self._upstream, header.client_id, self._known)
        elif fetch.first_sent:
            ahead_id = fetch.ahead_id
            frame = await self._upstream.answer(
                fetch.correlation_id if ahead_id is None else ahead_id
            )
            self._poll_ended(fetch)
            body = memoryview(frame)[_SIZE_BYTES:]
            _, start = parse_response_header(body, response_header_version(ApiKey.FETCH, version))
            first = decode(FetchResponse, body[start:], version)
            if ahead_id is not None and _has_error(first):
                # Read before the client asked: an error may be stale. Ask afresh (the shared
                # way: FetchPath.answer's own first look).
                ticket.release()
                first = None
        looked, self._looked = self._looked, None
        response = await self._path.answer(ticket, reads, first)
        if looked is not None and first is not None and not ticket.held_ms and not ticket.expired:
            await self._aheads.send_after(looked, response, header, ticket.request.max_wait_ms)
        return self._answer_of(response, ticket, version, fetch.correlation_id)

    async def _answer_repeat(self, fetch: ClientFetch) -> FetchAnswer:
        """The response to a repeat held from its bytes (``hold_repeat``): once its hold ends
        by its deadline with nothing to tell, the session's empty answer, built from nothing
        but the correlation id; after news (or something to tell), a ticket and the usual
        answer (re-fetched, built, encoded)."""
        hold, repeat = fetch.hold, fetch.repeat
        assert hold is not None and repeat is not None
        await hold.wait()
        session, path = repeat.session, self._path
        if (
            hold.expired
            and session is not None
            and nothing_to_tell(repeat.context, path.states, path.names)
        ):
            held_ms = (trio.current_time() - fetch.held_from_s) * 1000
            frame = self._empty_answers.frame(
                session.session_id, repeat.version, fetch.correlation_id
            )
            return FetchAnswer([frame], len(frame), None, fetch.held_from_s, "expired", held_ms)
        # Its re-fetch's lease is released by finish or abandon.
        ticket = fetch.ticket = FetchTicket.of_repeat(self._node_id, repeat, hold,
                                                      fetch.held_from_s)  # fmt: skip
        response = await path.answer(ticket)
        return self._answer_of(response, ticket, repeat.version, fetch.correlation_id)

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

    async def idle(self, owed: trio.lowlevel.ParkingLot) -> None:
        """The response pump waits on ``owed`` for its next slot (a read-ahead out is given
        up at its time: read_ahead.py)."""
        await self._aheads.idle(owed)

    def _poll_ended(self, fetch: ClientFetch) -> None:
        if fetch.polling and fetch.ticket is not None:
            fetch.polling = False
            self._path.planner.polling(fetch.ticket, out=False)

    def finish(self, fetch: ClientFetch) -> None:
        """``fetch``'s answer is written: its memory is the pool's again, the next fetch's
        turn."""
        if fetch.ticket is not None:
            fetch.ticket.release()
        self._fetches.discard(fetch)
        self._turn.release()

    def abandon(self) -> None:
        """The connection ended: no fetch of it keeps memory or a place in the purgatory."""
        for fetch in self._fetches:
            self._poll_ended(fetch)
            if fetch.ticket is not None:
                fetch.ticket.abandon()
            if fetch.hold is not None and not fetch.hold.is_completed:
                fetch.hold.force_complete()
        self._fetches.clear()
        self._aheads.abandon()


def _has_error(response: FetchResponse) -> bool:
    """Whether the fetch, or any partition of it, was answered with an error."""
    return bool(response.error_code) or any(
        data.error_code for topic in response.responses for data in topic.partitions
    )


def _may_repeat(request: FetchRequest, context: FetchContext) -> bool:
    """Whether ``request`` is what an idle consumer repeats (repeat.py): a fetch that may
    wait, and either incremental, changing nothing in its session, or sessionless (closing no
    session: the repeat would skip that)."""
    if request.max_wait_ms <= 0:
        return False
    if context.kind is ContextKind.INCREMENTAL:
        return not request.topics and not request.forgotten_topics_data
    return context.kind is ContextKind.SESSIONLESS and request.session_id == 0
