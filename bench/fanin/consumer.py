# Strategy: one idle consumer = one TCP connection and one trio task that does what a real
# consumer's fetcher does, with nothing else (no group, no commits), so thousands fit in one
# process and the benchmark measures what they cost the proxy and the broker.
#
#   FetchSession  the client half of KIP-227, as Java's FetchSessionHandler does it for one
#                 partition: the first request is FULL (session_id=0, epoch=0); if the answer
#                 carries a session id, later requests are INCREMENTAL (that id, epoch 1, 2,
#                 ..., wrapping to 1) and name the partition only when its fetch offset has
#                 changed since the session last heard of it; an answer with session id 0
#                 (Tansu never creates sessions) keeps the client on full requests; a top-level
#                 error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, ...) starts
#                 over with a full request. Pure: no I/O, no clock.
#   consume       the loop: Fetch, read the answer, advance the offset past any records, tell
#                 the Fleet, fetch again at once (a partition error waits retry.backoff.ms
#                 = 100 ms first, as clients do, so an error cannot spin).
#   Fleet         what the benchmark reads: how many consumers are connected and up, answers
#                 received, errors by kind, and the current delivery Probe; and its `go`
#                 event: consumers connect, then wait for it before their first Fetch.
#   Probe         one produced record: its offset and send time; each live consumer's first
#                 answer that moves it past the offset is that consumer's delivery latency.
"""Idle long-polling consumers (KIP-227 fetch sessions) for the fan-in benchmark."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import trio

from bench.fanin.client import Connection, KafkaError, TopicRoute
from wire.apis import ApiKey
from wire.errors import WireError
from wire.messages import FetchRequest, FetchResponse
from wire.messages.fetch_request import FetchPartition, FetchTopic
from wire.records import scan_batches

__all__ = ["DEFAULT_MAX_WAIT_MS", "FetchSession", "FetchSettings", "Fleet", "Probe", "consume"]

#: KIP-227: a full request opens (or re-opens) a session at epoch 0.
INITIAL_EPOCH = 0
_MAX_EPOCH = 2**31 - 1
#: Java's retry.backoff.ms default: the wait after a partition error before fetching again.
RETRY_BACKOFF_S = 0.1
#: The Java client's fetch.max.wait.ms default.
DEFAULT_MAX_WAIT_MS = 500


@dataclass(frozen=True)
class FetchSettings:
    """The consumer configuration that shapes each Fetch (Java client names in comments)."""

    max_wait_ms: int = DEFAULT_MAX_WAIT_MS  # fetch.max.wait.ms
    min_bytes: int = 1  # fetch.min.bytes
    max_bytes: int = 52_428_800  # fetch.max.bytes
    partition_max_bytes: int = 1_048_576  # max.partition.fetch.bytes


@dataclass(frozen=True)
class Outcome:
    """What one Fetch answer meant for the consumer."""

    delivered: bool = False
    error: str | None = None


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: 1, 2, ..., 2**31 - 1, then 1 again (0 is for full requests)."""
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class FetchSession:
    """The client side of a KIP-227 fetch session over one partition.

    Task safety: one consumer's task; :meth:`next_request` and :meth:`on_response` alternate.
    """

    __slots__ = ("_sent_offset", "epoch", "fetch_offset", "route", "session_id", "settings")

    def __init__(self, route: TopicRoute, settings: FetchSettings, fetch_offset: int = 0) -> None:
        self.route = route
        self.settings = settings
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.fetch_offset = fetch_offset
        #: The offset the session was last told (None: the session does not know it yet).
        self._sent_offset: int | None = None

    @property
    def is_full(self) -> bool:
        """Whether the next request is a full one (no session, or a session being opened)."""
        return self.epoch == INITIAL_EPOCH

    def next_request(self) -> FetchRequest:
        """The next Fetch: full, or incremental naming only a partition that changed."""
        topics: list[FetchTopic] = []
        if self.is_full or self.fetch_offset != self._sent_offset:
            partition = FetchPartition(
                partition=self.route.partition,
                fetch_offset=self.fetch_offset,
                partition_max_bytes=self.settings.partition_max_bytes,
            )
            topics.append(
                FetchTopic(
                    topic=self.route.topic, topic_id=self.route.topic_id, partitions=[partition]
                )
            )
            self._sent_offset = self.fetch_offset
        return FetchRequest(
            max_wait_ms=self.settings.max_wait_ms,
            min_bytes=self.settings.min_bytes,
            max_bytes=self.settings.max_bytes,
            session_id=self.session_id,
            session_epoch=self.epoch,
            topics=topics,
        )

    def on_response(self, response: FetchResponse) -> Outcome:
        """Take in the answer to the last :meth:`next_request`."""
        if response.error_code:
            # Java: FETCH_SESSION_ID_NOT_FOUND starts a new session; for other errors it
            # closes the old one with a full request too. Either way: full next time.
            self.session_id, self.epoch, self._sent_offset = 0, INITIAL_EPOCH, None
            return Outcome(error=f"fetch error {response.error_code}")
        if self.is_full:
            self.session_id = response.session_id
            self.epoch = INITIAL_EPOCH if response.session_id == 0 else next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        delivered = False
        error: str | None = None
        for topic in response.responses:
            for partition in topic.partitions:
                if partition.partition_index != self.route.partition:
                    continue
                if partition.error_code:
                    error = f"partition error {partition.error_code}"
                    continue
                if partition.records:
                    batches = scan_batches(partition.records).batches
                    if batches and batches[-1].next_offset > self.fetch_offset:
                        self.fetch_offset = batches[-1].next_offset
                        delivered = True
        return Outcome(delivered=delivered, error=error)


@dataclass
class Probe:
    """One record produced while every consumer waits; filled in by the consumers.

    A consumer may hold the record before the producer holds its acknowledgement, so
    deliveries seen before the offset is known are kept and judged by :meth:`acknowledged`.
    """

    sent_at: float
    expected: set[int]
    offset: int | None = None
    arrivals: dict[int, float] = field(default_factory=dict)
    early: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    highest_next_offset: int = 0
    done: trio.Event = field(default_factory=trio.Event)

    def arrived(self, index: int, next_offset: int, now: float) -> None:
        """Consumer ``index`` now fetches from ``next_offset`` (it got records at ``now``)."""
        self.highest_next_offset = max(self.highest_next_offset, next_offset)
        if index not in self.expected or index in self.arrivals:
            return
        if self.offset is None:
            self.early.setdefault(index, []).append((next_offset, now))
        elif next_offset > self.offset:
            self.arrivals[index] = now
            self._check()

    def acknowledged(self, offset: int) -> None:
        """The record is at ``offset``: judge the deliveries seen so far."""
        self.offset = offset
        for index, seen in self.early.items():
            for next_offset, now in seen:
                if next_offset > offset and index in self.expected:
                    self.arrivals[index] = now
                    break
        self.early.clear()
        self._check()

    def lost(self, index: int) -> None:
        self.expected.discard(index)
        self._check()

    def _check(self) -> None:
        if self.offset is not None and len(self.arrivals) >= len(self.expected):
            self.done.set()

    def latencies_ms(self) -> list[float]:
        return [(t - self.sent_at) * 1000 for t in self.arrivals.values()]


@dataclass
class Fleet:
    """All consumers of one measurement, as the benchmark sees them."""

    size: int
    connect_limit: trio.CapacityLimiter
    live: set[int] = field(default_factory=set)
    answers: int = 0
    full_requests: int = 0
    incremental_requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    fetch_versions: Counter[int] = field(default_factory=Counter)
    sessions: int = 0
    probe: Probe | None = None
    settled: trio.Event = field(default_factory=trio.Event)
    #: Consumers connected (TCP + ApiVersions); all of them (or failed): ``connected_all``.
    connected: int = 0
    connected_all: trio.Event = field(default_factory=trio.Event)
    #: Set by the benchmark: connected consumers start fetching (see ``consume``).
    go: trio.Event = field(default_factory=trio.Event)

    def _check_settled(self) -> None:
        failed = sum(self.failures.values())
        if self.connected + failed >= self.size:
            self.connected_all.set()
        if len(self.live) + failed >= self.size:
            self.settled.set()

    def connected_one(self) -> None:
        self.connected += 1
        self._check_settled()

    def up(self, index: int) -> None:
        self.live.add(index)
        self._check_settled()

    def failed(self, index: int, reason: str) -> None:
        self.live.discard(index)
        self.failures[reason] += 1
        if self.probe is not None:
            self.probe.lost(index)
        self._check_settled()


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:80]}"


async def consume(
    index: int, route: TopicRoute, settings: FetchSettings, fleet: Fleet, start_offset: int = 0
) -> None:
    """Run one consumer from ``start_offset`` until cancelled; report to ``fleet``.

    It connects at once and fetches only once ``fleet.go`` is set: the fleet connects first
    and then polls, so at large N the consumers already polling cannot starve the connects
    of the rest (at N = 10,000 on 2 cores, most of the setup time went there).

    Error handling: a connection that fails (refused, reset, an undecodable answer) ends
    this consumer only; the reason is counted in ``fleet.failures``. It does not reconnect:
    the benchmark reports how many consumers stayed up rather than measuring reconnects.
    """
    try:
        async with fleet.connect_limit:
            connection = await Connection.open(
                route.leader_host, route.leader_port, f"fanin-{index}"
            )
    except (OSError, trio.BrokenResourceError, KafkaError, WireError) as exc:
        fleet.failed(index, "connect: " + _reason(exc))
        return
    try:
        fleet.connected_one()
        await fleet.go.wait()
        fleet.fetch_versions[connection.versions.get(ApiKey.FETCH, -1)] += 1
        session = FetchSession(route, settings, start_offset)
        first = True
        while True:
            if session.is_full:
                fleet.full_requests += 1
            else:
                fleet.incremental_requests += 1
            response, _ = await connection.call(FetchResponse, session.next_request())
            now = trio.current_time()
            fleet.answers += 1
            had_session = session.session_id != 0
            outcome = session.on_response(response)
            if session.session_id and not had_session:
                fleet.sessions += 1
            if first:
                first = False
                fleet.up(index)
            if outcome.delivered and fleet.probe is not None:
                fleet.probe.arrived(index, session.fetch_offset, now)
            if outcome.error is not None:
                fleet.errors[outcome.error] += 1
                await trio.sleep(RETRY_BACKOFF_S)
    except (OSError, trio.BrokenResourceError, KafkaError, WireError) as exc:
        fleet.failed(index, _reason(exc))
    finally:
        with trio.CancelScope(shield=True):
            await connection.aclose()
