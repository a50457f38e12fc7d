# Strategy: the bookkeeping of one client connection without I/O (h11's Connection, for
# Kafka): what the client is owed, in request order (`owe`, `next_owed`), what each request
# becomes (`receive`), and which upstream answers are awaited, matched by correlation id
# (`upstream_answer`; an answer to acks=0 or to a produce already answered is skipped). Pure:
# it and everything it imports are trio-free
# (tests/unit/proxy/connection/test_connection_purity.py).
"""The sans-I/O state of one client connection: owed responses and upstream matching."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

from proxy.errors import ConnectionClosed, UpstreamFailed
from proxy.routing.rewrite import LocalAnswer, ProducedPartitions, RequestPlan
from wire.headers import peek_request_header
from wire.sentinel import Sentinel

if TYPE_CHECKING:
    from proxy.held.holds import ClientFetch  # (a type only: this module is trio-free)

__all__ = [
    "NEED_REQUEST",
    "REQUESTS_DONE",
    "Arrival",
    "Connection",
    "Forwarded",
    "HeldFetch",
    "HeldProduce",
    "Local",
    "Slot",
    "Unanswered",
]


#: next_owed(): nothing is owed yet; wait for the request side.
NEED_REQUEST: Final = Sentinel("NEED_REQUEST")
#: next_owed(): the request side has ended and every owed response was taken.
REQUESTS_DONE: Final = Sentinel("REQUESTS_DONE")


class Arrival(NamedTuple):
    """A request's timings, for its RequestRecord.

    Times are ``trio.current_time()`` seconds except ``ts`` (epoch seconds, for the log);
    ``sent_s`` is when it went upstream (or was queued, for requests that do not). A
    NamedTuple: one per request, built in a third of a frozen dataclass's time.
    """

    arrival_s: float
    ts: float
    muted_s: float
    request_bytes: int
    sent_s: float

    def sent_at(self, sent_s: float, muted_s: float | None = None) -> Arrival:
        """This request, sent upstream (or queued) at ``sent_s``, after ``muted_s`` in the
        pool if it waited longer (``_replace`` costs more than building it anew)."""
        muted = self.muted_s if muted_s is None else muted_s
        return Arrival(self.arrival_s, self.ts, muted, self.request_bytes, sent_s)


@dataclass(frozen=True, slots=True)
class Local:
    """A request the proxy answers itself; ``response`` is the whole frame."""

    correlation_id: int
    api: tuple[int, int]  # (api key, version), for the record
    response: bytes
    arrival: Arrival


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A request forwarded upstream whose answer the client gets (rewritten if need be)."""

    plan: RequestPlan
    arrival: Arrival


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A produce with acks=0: forwarded, no response owed; an upstream answer is skipped."""

    plan: RequestPlan
    arrival: Arrival


@dataclass(frozen=True, slots=True)
class HeldProduce:
    """A produce with acks=1/all whose answer waits at most its timeout_ms."""

    plan: RequestPlan
    produced: ProducedPartitions
    arrival: Arrival

    @property
    def sent_s(self) -> float:
        """When it went upstream (trio clock): its timeout runs from then."""
        return self.arrival.sent_s


@dataclass(frozen=True, slots=True)
class HeldFetch:
    """A fetch the proxy answers itself; ``fetch`` is the held path's
    (proxy/held/fetch/client.py), from its plan to its written answer."""

    fetch: ClientFetch
    arrival: Arrival

    @property
    def plan(self) -> RequestPlan:
        """Its request's plan (an idle consumer's repeat: the learnt fetch's)."""
        return self.fetch.plan


Slot = Local | Forwarded | HeldFetch | HeldProduce


#: Optional upstream entries kept at most. Kafka never answers acks=0, so a client that only
#: sends acks=0 adds entries nothing pops: past this many the oldest are forgotten as they
#: reach the head (a required answer still due keeps what follows it). A broker that does
#: answer acks=0 (Tansu) answers in order, long before this many are in flight.
MAX_OPTIONAL: Final = 4096


class Connection:
    """What one client connection owes, and which upstream frames answer it.

    Args:
        max_in_flight: responses the connection may owe before the request side must wait
            (``has_room``): a client that pipelines without reading is back-pressured.

    Error handling: ``upstream_answer`` raises UpstreamFailed for an answer nobody asked for;
    ``note_closed`` keeps the first reason the connection ends for.
    """

    __slots__ = (
        "_ended",
        "_max_in_flight",
        "_optional",
        "_owed",
        "_own_ids",
        "_taken",
        "_upstream",
        "closed_by",
    )

    def __init__(self, max_in_flight: int) -> None:
        self._max_in_flight = max_in_flight
        self._owed: deque[Slot] = deque()
        self._taken = 0  # 1 while the response pump answers the slot it took last
        # (correlation id, optional, paid) in the order the requests went upstream.
        self._upstream: deque[tuple[int, bool, bool]] = deque()
        # How many entries of the upstream ledger are optional.
        self._optional = 0
        self._ended = False
        self._own_ids = -1  # the next id for the proxy's own reads, counting down
        self.closed_by: ConnectionClosed | None = None

    def __repr__(self) -> str:
        return f"<Connection owed={len(self._owed)} upstream={len(self._upstream)}>"

    # -- the request side ----------------------------------------------------------------

    def receive(
        self,
        plan: RequestPlan | LocalAnswer,
        body: memoryview,
        arrival: Arrival,
        *,
        hold_produce: bool,
    ) -> Local | Forwarded | HeldProduce | Unanswered:
        """The slot of a request (``body``: its frame without the size) that is not a fetch
        the proxy answers: answered here (Local), forwarded with nothing owed (acks=0),
        forwarded and held for its answer at most its timeout (a produce, when
        ``hold_produce``), or forwarded. The pump owes it (``owe``) and sends what it says."""
        if isinstance(plan, LocalAnswer):
            api = peek_request_header(body)[:2]
            return Local(plan.correlation_id, api, plan.response, arrival)
        if not plan.expects_response:
            return Unanswered(plan, arrival)
        if plan.produced is not None and hold_produce:
            return HeldProduce(plan, plan.produced, arrival)
        return Forwarded(plan, arrival)

    @property
    def has_room(self) -> bool:
        """Whether another owed response may be queued now."""
        return len(self._owed) < self._max_in_flight

    def owe(self, slot: Slot | Unanswered) -> None:
        """Record a request, in request order: what the client is owed, what goes upstream."""
        if isinstance(slot, Unanswered):
            self._upstream.append((slot.plan.header.correlation_id, True, False))
            self._optional += 1
            while self._optional > MAX_OPTIONAL and self._upstream[0][1]:
                self._upstream.popleft()
                self._optional -= 1
            return
        # Local sends nothing upstream; a HeldFetch at most its own first look, whose
        # response budget the fetch reserved before it was sent.
        if isinstance(slot, Forwarded | HeldProduce):
            self._upstream.append((slot.plan.header.correlation_id, False, False))
        elif isinstance(slot, HeldFetch):
            first_look_id = slot.fetch.first_look_id
            if first_look_id is not None:
                self._upstream.append((first_look_id, False, True))
        self._owed.append(slot)

    def expect_own_answer(self) -> int:
        """A correlation id for a request of the proxy's own on this upstream connection
        (sent now, after everything already in the ledger), recorded as awaited; its answer's
        memory is paid for by the caller (a held fetch's response budget)."""
        in_flight = {expected for expected, _, _ in self._upstream}
        while True:
            correlation_id = self._own_ids
            self._own_ids = -1 if correlation_id <= -(2**31) + 1 else correlation_id - 1
            if correlation_id not in in_flight:
                break
        self._upstream.append((correlation_id, False, True))
        return correlation_id

    @property
    def next_answer_paid(self) -> bool:
        """Whether the next upstream answer was paid for when its request was sent (an
        optional entry first counts as unpaid: it or a later answer comes next)."""
        ledger = self._upstream
        return bool(ledger) and ledger[0][2]

    @property
    def upstream_idle(self) -> bool:
        """No answer is awaited from the upstream (optional ones are not awaited)."""
        return len(self._upstream) == self._optional

    def forget_upstream(self) -> None:
        """The upstream connection was closed while idle: the answers it owed die with it."""
        self._upstream.clear()
        self._optional = 0

    def end_requests(self) -> None:
        """The request side is done: no more slots will be owed."""
        self._ended = True

    # -- the response side ---------------------------------------------------------------

    def next_owed(self) -> Slot | Sentinel:
        """The next slot to answer, NEED_REQUEST, or REQUESTS_DONE (asking means the slot
        taken before is answered)."""
        if self._owed:
            self._taken = 1
            return self._owed.popleft()
        self._taken = 0
        return REQUESTS_DONE if self._ended else NEED_REQUEST

    @property
    def in_processing(self) -> int:
        """Responses owed and not yet written: queued, or being answered."""
        return len(self._owed) + self._taken

    def upstream_answer(self, correlation_id: int) -> bool:
        """Match an upstream frame: True if it is an owed answer, False if it is to be skipped.

        Raises:
            UpstreamFailed: nothing sent upstream expects this answer now.
        """
        ledger = self._upstream
        while ledger:
            expected, optional, _ = ledger.popleft()
            self._optional -= optional
            if expected == correlation_id:
                return not optional
            if not optional:
                raise UpstreamFailed(
                    f"upstream answered correlation id {correlation_id}, expected {expected}"
                )
        raise UpstreamFailed(f"upstream answered correlation id {correlation_id} unasked")

    def give_up(self, correlation_id: int) -> None:
        """The client was answered without the upstream (a produce's timeout passed): its
        upstream answer, if it still comes, is to be skipped."""
        ledger = self._upstream
        for position, (expected, optional, paid) in enumerate(ledger):
            if expected == correlation_id and not optional:
                ledger[position] = (expected, True, paid)
                self._optional += 1
                return

    # -- the end -------------------------------------------------------------------------

    def note_closed(self, reason: ConnectionClosed) -> None:
        """Record why the connection ends; the first reason noted is the one reported."""
        if self.closed_by is None:
            self.closed_by = reason
