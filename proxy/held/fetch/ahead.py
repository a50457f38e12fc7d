# Strategy: an active consumer's fetch cycle is serial; reading ahead sends its most likely
# next upstream read (each partition past the last complete batch returned) while the client
# still reads the current answer, and its next fetch takes it as its first look if it is
# exactly that request (`serves`), else it is discarded. Only while the client's last fetch
# was the one predicted (`Predictions`). Pure: client.py does the I/O.
"""Reading ahead for an active consumer: predicting and matching its next fetch."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from uuid import UUID

from wire.errors import CorruptRecords
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.fetch_response import FetchResponse
from wire.records import RecordBatchHeader, iter_batches

if TYPE_CHECKING:
    from proxy.primitives.lease import Lease  # (a type only: this module is pure)

__all__ = ["LEAST_WAIT_S", "Predictions", "ReadAhead", "next_read", "serves"]

#: READ_COMMITTED: the readable end is the last stable offset.
_READ_COMMITTED = 1

#: The least time a read-ahead waits to be claimed: the clients' default fetch.max.wait.ms
#: (Java, librdkafka, kafka-python, aiokafka), so a consumer fetching with max wait 0 keeps
#: its read-aheads while it fetches at full speed.
LEAST_WAIT_S = 0.5


@dataclass(slots=True, eq=False)
class ReadAhead:
    """One read-ahead in flight on a client's upstream connection.

    Attributes:
        request: the upstream fetch sent (what the client's next fetch must ask for exactly).
        version: its Fetch version (the client's).
        correlation_id: the proxy's own id it went under (Connection.expect_own_answer).
        generation: which opening of the upstream connection carries it
            (UpstreamLink.generation): a connection closed and opened again does not.
        lease: its response budget, taken from the pool without waiting (KIP-72); it becomes
            the fetch's lease when used, and is released when discarded, given up or when the
            connection ends.
        expires_s: when it is given up if the client has not claimed it (trio time: sent +
            the client's max wait, at least ``LEAST_WAIT_S``).
    """

    request: FetchRequest
    version: int
    correlation_id: int
    generation: int
    lease: Lease
    expires_s: float

    def release(self) -> None:
        """Give its response budget back to the pool (once)."""
        if not self.lease.released:
            self.lease.release()


def next_read(sent: FetchRequest, response: FetchResponse) -> FetchRequest | None:
    """The upstream request of the client's next fetch, as predicted from ``response`` (the
    answer the client is getting to ``sent``), or None when nothing is worth reading ahead.

    A partition moves to the offset past the last *complete* batch it returned (a client
    skips a trailing partial batch and asks for it again); its last fetched epoch (KIP-320),
    if the client sends one, becomes that batch's leader epoch. Partitions absent from the
    response (an incremental session's partitions without news) keep their offset.
    """
    if response.error_code:
        return None
    moved: dict[tuple[str | UUID, int], tuple[int, int]] = {}
    more = False
    isolation = sent.isolation_level
    for topic in response.responses:
        name: str | UUID = topic.topic_id if topic.topic_id.int else topic.topic
        for data in topic.partitions:
            if data.error_code:
                return None  # the client reacts to errors (metadata, reset): let it ask
            if not data.records:
                continue
            last: RecordBatchHeader | None = None
            try:
                for batch in iter_batches(data.records):
                    last = batch
            except CorruptRecords:
                return None
            if last is None:
                continue
            moved[name, data.partition_index] = (last.next_offset, last.partition_leader_epoch)
            readable = (
                data.last_stable_offset
                if isolation == _READ_COMMITTED and data.last_stable_offset >= 0
                else data.high_watermark
            )
            more = more or last.next_offset < readable
    if not more:
        return None
    return replace(sent, topics=[_moved(wanted, moved) for wanted in sent.topics])


def _moved(wanted: FetchTopic, moved: dict[tuple[str | UUID, int], tuple[int, int]]) -> FetchTopic:
    """``wanted`` with the partitions in ``moved`` at their next offset and epoch."""
    name = wanted.topic_id if wanted.topic_id.int else wanted.topic
    partitions: list[FetchPartition] = []
    for partition in wanted.partitions:
        step = moved.get((name, partition.partition))
        if step is not None:
            offset, epoch = step
            partition = replace(
                partition,
                fetch_offset=offset,
                last_fetched_epoch=epoch if partition.last_fetched_epoch >= 0 else -1,
            )
        partitions.append(partition)
    return replace(wanted, partitions=partitions)


def serves(ahead: ReadAhead, first_look: FetchRequest, version: int, generation: int) -> bool:
    """Whether ``ahead`` asks what the first look a fetch would send now (``first_look``, at
    ``version``) asks, on the upstream connection's opening ``generation``: same partitions in
    the same order at the same offsets and epochs, same isolation level and sizes. How long
    either lets the broker wait, and for how many bytes, may differ: a busy consumer's first
    look is its long-poll, a read-ahead goes while more is readable (answered at once), and
    the answer is judged by the client's own min bytes and deadline either way."""
    if ahead.generation != generation or ahead.version != version:
        return False
    request = ahead.request
    if (request.max_wait_ms, request.min_bytes) == (first_look.max_wait_ms, first_look.min_bytes):
        return request == first_look
    return request == replace(
        first_look, max_wait_ms=request.max_wait_ms, min_bytes=request.min_bytes
    )


class Predictions:
    """Whether one connection's fetches follow the predictions (see the module header):
    ``trusted`` once the client's fetch was the one predicted from the answer before it, and
    until one is not. Not trusted at first: a read-ahead goes from the second answer on."""

    __slots__ = ("_next", "trusted")

    def __init__(self) -> None:
        self._next: FetchRequest | None = None
        self.trusted = False

    def fetched(self, first_look: FetchRequest | None) -> None:
        """A fetch came whose first look would be ``first_look`` (None: it asks nothing
        upstream at once, or not on the client's own connection)."""
        predicted, self._next = self._next, None
        if predicted is not None:
            self.trusted = first_look is not None and first_look == predicted

    def answered(self, looked: FetchRequest, response: FetchResponse) -> FetchRequest | None:
        """The client gets ``response`` to the first look ``looked``: the read-ahead to send,
        or None (nothing to read ahead, or the client does not ask where its answers end)."""
        self._next = predicted = next_read(looked, response)
        return predicted if self.trusted else None
