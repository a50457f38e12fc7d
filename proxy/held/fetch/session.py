# Strategy: the broker side of KIP-227 fetch sessions, as pure bookkeeping: the proxy
# terminates clients' sessions itself and fetches upstream sessionless, so it always knows each
# session's whole partition set and offsets, which a held fetch needs to tell news. No trio,
# no sockets, no clock (the caller passes now_ms).
"""KIP-227 fetch sessions, held by the proxy for its clients."""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple
from uuid import UUID

from wire.messages.fetch_request import FetchPartition, FetchRequest

__all__ = [
    "FETCH_SESSION_ID_NOT_FOUND",
    "FETCH_SESSION_TOPIC_ID_ERROR",
    "FINAL_EPOCH",
    "INVALID_FETCH_SESSION_EPOCH",
    "CachedPartition",
    "ContextKind",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "PartitionKey",
    "PartitionNews",
    "next_epoch",
]

# Kafka error codes of this protocol (clients/.../protocol/Errors.java).
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1

#: Kafka's max.incremental.fetch.session.cache.slots default.
DEFAULT_MAX_SESSIONS = 1000
#: Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: an idle session may be evicted after this.
DEFAULT_EVICTION_MS = 120_000

#: A partition of a session: (topic name, or topic id from Fetch v13 on; partition index).
PartitionKey = tuple[str | UUID, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch): 1..2**31-1, wrapping to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


class PartitionNews(NamedTuple):
    """What one upstream fetch learned about a partition, for the response to the client
    (a NamedTuple: one per partition per answer, built in a third of a frozen dataclass's
    time)."""

    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    has_records: bool
    error_code: int = 0


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: what the client asks for and what it was last told."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    told_high_watermark: int = -1
    told_last_stable_offset: int = -1
    told_log_start_offset: int = -1

    @classmethod
    def from_request(cls, partition: FetchPartition) -> CachedPartition:
        return cls(
            fetch_offset=partition.fetch_offset,
            partition_max_bytes=partition.partition_max_bytes,
            current_leader_epoch=partition.current_leader_epoch,
            last_fetched_epoch=partition.last_fetched_epoch,
            log_start_offset=partition.log_start_offset,
        )

    def update_request(self, partition: FetchPartition) -> None:
        self.fetch_offset = partition.fetch_offset
        self.partition_max_bytes = partition.partition_max_bytes
        self.current_leader_epoch = partition.current_leader_epoch
        self.last_fetched_epoch = partition.last_fetched_epoch
        self.log_start_offset = partition.log_start_offset

    def was_told(self, high_watermark: int, last_stable_offset: int, log_start_offset: int) -> bool:
        """Whether these offsets are what the client was last told (an incremental response
        need not carry the partition for them)."""
        return (
            high_watermark == self.told_high_watermark
            and last_stable_offset == self.told_last_stable_offset
            and log_start_offset == self.told_log_start_offset
        )

    def take_news(self, news: PartitionNews) -> bool:
        """Record what the client is about to be told; True if an incremental response must
        carry this partition (it has records, an error, or changed offsets)."""
        changed = not self.was_told(
            news.high_watermark, news.last_stable_offset, news.log_start_offset
        )
        self.told_high_watermark = news.high_watermark
        self.told_last_stable_offset = news.last_stable_offset
        self.told_log_start_offset = news.log_start_offset
        return changed or news.has_records or news.error_code != 0


@dataclass(slots=True)
class FetchSession:
    """A client's fetch session: its partitions in the order they were added."""

    session_id: int
    uses_topic_ids: bool
    partitions: dict[PartitionKey, CachedPartition]
    epoch: int
    created_ms: int
    last_used_ms: int


class ContextKind(enum.Enum):
    """How a fetch request maps to a context (Kafka's FetchSessionCache.newContext)::

        session_id  epoch   context       what happens
        0           0       FULL          fetch what the request lists; a session is created
                                          when the response is built (id 0 if the cache has
                                          no room)
        0           -1      SESSIONLESS   fetch what the request lists; no session
        S           0 / -1  FULL / SLESS  as above, and session S is closed first
        S           e > 0   INCREMENTAL   S must exist (else FETCH_SESSION_ID_NOT_FOUND) and
                                          be at epoch e (else INVALID_FETCH_SESSION_EPOCH);
                                          the request's partitions are added/updated,
                                          forgotten ones removed, and the response carries
                                          only partitions with news

    "News" for a partition is what Kafka's CachedPartition.maybeUpdateResponseData checks:
    records, an error, or a high watermark / last stable offset / log start offset that
    differs from what this session's client was last told.
    """

    FULL = "full"
    SESSIONLESS = "sessionless"
    INCREMENTAL = "incremental"
    ERROR = "error"


@dataclass(slots=True)
class FetchContext:
    """How to answer one fetch request: what to fetch, and which partitions to send back.

    Attributes:
        kind: see ContextKind.
        error_code: non-zero only for ERROR: answer with it at the top level, no partitions.
        partitions: every partition the fetch covers, in response order, with what the client
            asked for (for INCREMENTAL, the session's whole set after this request's changes).
    """

    kind: ContextKind
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)
    error_code: int = 0
    _session: FetchSession | None = None
    _cache: FetchSessionCache | None = None
    _uses_topic_ids: bool = False

    @property
    def session(self) -> FetchSession | None:
        """The session an incremental context goes on (None for the other kinds)."""
        return self._session

    def respond(
        self, news: dict[PartitionKey, PartitionNews], now_ms: int
    ) -> tuple[int, list[PartitionKey]]:
        """Close the context with what was fetched.

        Returns:
            The session id to put in the response, and the partitions it must carry, in order
            (all of them for a full or sessionless fetch; only those with news for an
            incremental one). A full fetch creates its session here, as Kafka does when it
            builds the response; the id is 0 when the cache had no room.
        """
        if self.kind is ContextKind.ERROR:
            return INVALID_SESSION_ID, []
        if self.kind is ContextKind.INCREMENTAL:
            assert self._session is not None
            carried = [
                key for key, cached in self.partitions.items()
                if key in news and cached.take_news(news[key])
            ]  # fmt: skip
            return self._session.session_id, carried
        keys = list(self.partitions)
        for key, cached in self.partitions.items():
            if key in news:
                cached.take_news(news[key])
        if self.kind is ContextKind.FULL and self._cache is not None:
            session_id = self._cache.maybe_create(self.partitions, self._uses_topic_ids, now_ms)
            return session_id, keys
        return INVALID_SESSION_ID, keys


class FetchSessionCache:
    """The proxy's fetch sessions, bounded like the broker's cache.

    When the cache is full, a new session takes the slot of the least recently used session
    that has been idle for ``eviction_ms``; if there is none, the client gets session id 0 and
    keeps sending full fetches (Kafka's rule for unprivileged clients, KIP-227).

    Args:
        max_sessions: cache size (Kafka: max.incremental.fetch.session.cache.slots).
        eviction_ms: idle time after which a session may be evicted.
        new_id: source of candidate session ids (positive int32); injectable for tests. By
            default ``secrets``: an id is all that names a session in an incremental fetch, so
            one client must not be able to guess another's (``random``'s Mersenne Twister can
            be predicted from its outputs).
    """

    def __init__(
        self,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        eviction_ms: int = DEFAULT_EVICTION_MS,
        new_id: Callable[[], int] | None = None,
    ) -> None:
        if max_sessions < 0:
            raise ValueError(f"max_sessions must be >= 0, not {max_sessions}")
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._new_id = new_id or _secret_session_id
        # Insertion order is least-recently-used first: touching a session moves it last.
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self.created = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def __repr__(self) -> str:
        return f"<FetchSessionCache {len(self)}/{self.max_sessions} sessions>"

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def __iter__(self) -> Iterator[FetchSession]:
        """The sessions, least recently used first."""
        return iter(self._sessions.values())

    def new_context(self, request: FetchRequest, now_ms: int) -> FetchContext:
        """Classify a client's fetch request and apply it to its session (see ContextKind)."""
        uses_topic_ids = any(topic.topic_id.int for topic in request.topics)
        session_id, epoch = request.session_id, request.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            kind = ContextKind.FULL if epoch == INITIAL_EPOCH else ContextKind.SESSIONLESS
            partitions = {key: CachedPartition.from_request(p) for key, p in _requested(request)}
            return FetchContext(kind, partitions, _cache=self, _uses_topic_ids=uses_topic_ids)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(ContextKind.ERROR, error_code=FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(ContextKind.ERROR, error_code=INVALID_FETCH_SESSION_EPOCH)
        if request.topics and session.uses_topic_ids != uses_topic_ids:
            return FetchContext(ContextKind.ERROR, error_code=FETCH_SESSION_TOPIC_ID_ERROR)
        for key, partition in _requested(request):
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = CachedPartition.from_request(partition)
            else:
                cached.update_request(partition)
        for key in _forgotten(request):
            session.partitions.pop(key, None)
        if not session.partitions:
            # Kafka closes a session that lost its last partition and answers sessionless.
            del self._sessions[session_id]
            return FetchContext(ContextKind.SESSIONLESS)
        self.renew(session, now_ms)
        return FetchContext(ContextKind.INCREMENTAL, session.partitions, _session=session)

    def is_current(self, session: FetchSession, epoch: int) -> bool:
        """Whether an incremental fetch at ``epoch`` on ``session`` would be accepted: the
        session is still this cache's and expects that epoch."""
        return session.epoch == epoch and self._sessions.get(session.session_id) is session

    def renew(self, session: FetchSession, now_ms: int) -> None:
        """An incremental fetch on ``session`` was accepted: its next epoch, and it is the most
        recently used."""
        session.epoch = next_epoch(session.epoch)
        self._touch(session, now_ms)

    def maybe_create(
        self, partitions: dict[PartitionKey, CachedPartition], uses_topic_ids: bool, now_ms: int
    ) -> int:
        """Store a new session for a full fetch; its id, or 0 when there is no room."""
        if self.max_sessions == 0 or (
            len(self._sessions) >= self.max_sessions and not self._evict_one(now_ms)
        ):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._new_id()
        self._sessions[session_id] = FetchSession(
            session_id, uses_topic_ids, partitions, next_epoch(INITIAL_EPOCH), now_ms, now_ms
        )
        self.created += 1
        return session_id

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        del self._sessions[session.session_id]
        self._sessions[session.session_id] = session

    def _evict_one(self, now_ms: int) -> bool:
        oldest = next(iter(self._sessions.values()), None)
        if oldest is None or now_ms - oldest.last_used_ms < self.eviction_ms:
            return False
        del self._sessions[oldest.session_id]
        self.evictions += 1
        return True


def _secret_session_id() -> int:
    """A session id no client can predict: 1..2**31-1 from the operating system's CSPRNG."""
    return secrets.randbelow(2**31 - 1) + 1


def _topic_key(topic: str, topic_id: UUID) -> str | UUID:
    return topic_id if topic_id.int else topic


def _requested(request: FetchRequest) -> Iterable[tuple[PartitionKey, FetchPartition]]:
    for topic in request.topics:
        name = _topic_key(topic.topic, topic.topic_id)
        for partition in topic.partitions:
            yield (name, partition.partition), partition


def _forgotten(request: FetchRequest) -> Iterable[PartitionKey]:
    for topic in request.forgotten_topics_data:
        name = _topic_key(topic.topic, topic.topic_id)
        for index in topic.partitions:
            yield name, index
