"""The pure part of reading ahead (proxy/held/fetch/ahead.py): which request the
client's next fetch will send, and whether a read-ahead is exactly that."""

from __future__ import annotations

import struct
from dataclasses import replace

from proxy.held.fetch.ahead import Predictions, ReadAhead, next_read, serves
from proxy.primitives.memory import MemoryPool
from tests.support.one_partition import batch_at
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.fetch_response import FetchableTopicResponse, FetchResponse, PartitionData

NOT_LEADER_OR_FOLLOWER = 6


def sent(*offsets: int, last_fetched_epoch: int = -1, isolation: int = 0) -> FetchRequest:
    """An upstream fetch of partitions 0, 1, ... of topic "t" at ``offsets``."""
    return FetchRequest(
        max_wait_ms=100,
        max_bytes=1 << 20,
        isolation_level=isolation,
        topics=[
            FetchTopic(
                topic="t",
                partitions=[
                    FetchPartition(
                        partition=index,
                        fetch_offset=offset,
                        last_fetched_epoch=last_fetched_epoch,
                        partition_max_bytes=1 << 20,
                    )
                    for index, offset in enumerate(offsets)
                ],
            )
        ],
    )


def answer(*partitions: PartitionData) -> FetchResponse:
    return FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=list(partitions))])


def data(index: int, records: bytes, end: int, *, stable: int | None = None) -> PartitionData:
    return PartitionData(
        partition_index=index,
        high_watermark=end,
        last_stable_offset=end if stable is None else stable,
        records=records,
    )


def offsets(request: FetchRequest) -> list[int]:
    return [p.fetch_offset for t in request.topics for p in t.partitions]


def test_each_partition_moves_past_its_last_complete_batch() -> None:
    partial = batch_at(9)[:30]  # a trailing batch cut short: the client asks for it again
    predicted = next_read(
        sent(0, 7, 3),
        answer(data(0, batch_at(0) + batch_at(1), 10), data(2, batch_at(3) + partial, 10)),
    )
    assert predicted is not None
    assert offsets(predicted) == [2, 7, 4]  # partition 1 returned nothing: it keeps 7
    assert predicted.max_wait_ms == 100 and predicted.max_bytes == 1 << 20


def test_nothing_to_read_ahead() -> None:
    # Caught up: the answer reached the readable end.
    assert next_read(sent(0), answer(data(0, batch_at(0), 1))) is None
    # No records at all.
    assert next_read(sent(0), answer(data(0, b"", 5))) is None
    # An error: the client will refresh or reset, not fetch the next offset.
    failed = replace(data(0, batch_at(0), 5), error_code=NOT_LEADER_OR_FOLLOWER)
    assert next_read(sent(0), answer(failed)) is None
    assert next_read(sent(0), replace(answer(data(0, batch_at(0), 5)), error_code=1)) is None
    # READ_COMMITTED reads to the last stable offset, not the high watermark.
    assert next_read(sent(0, isolation=1), answer(data(0, batch_at(0), 5, stable=1))) is None


def test_the_last_fetched_epoch_follows_the_batch_when_the_client_sends_one() -> None:
    batch = bytearray(batch_at(0))
    struct.pack_into(">i", batch, 12, 4)  # partition leader epoch (outside the CRC)
    predicted = next_read(sent(0, last_fetched_epoch=3), answer(data(0, bytes(batch), 5)))
    assert predicted is not None
    assert predicted.topics[0].partitions[0].last_fetched_epoch == 4
    unused = next_read(sent(0), answer(data(0, bytes(batch), 5)))
    assert unused is not None and unused.topics[0].partitions[0].last_fetched_epoch == -1


def test_a_read_ahead_serves_only_exactly_its_request_on_the_same_opening() -> None:
    pool = MemoryPool(1 << 20, max_allocation_bytes=1 << 20)
    lease = pool.try_allocate(1024)
    assert lease is not None
    ahead = ReadAhead(sent(2), 12, -1, 1, lease, expires_s=0.5)
    assert serves(ahead, sent(2), 12, 1)
    assert not serves(ahead, sent(3), 12, 1)  # a seek
    assert not serves(ahead, sent(2, 5), 12, 1)  # another partition
    assert not serves(ahead, sent(2, isolation=1), 12, 1)
    assert not serves(ahead, sent(2), 11, 1)  # another version
    assert not serves(ahead, sent(2), 12, 2)  # the connection was opened again
    ahead.release()
    ahead.release()  # once
    assert pool.available_bytes == 1 << 20


def test_predictions_are_trusted_only_while_the_client_asks_as_predicted() -> None:
    predictions = Predictions()
    two = answer(data(0, batch_at(0) + batch_at(1), 10))
    assert predictions.answered(sent(0), two) is None  # not trusted yet: nothing sent
    predictions.fetched(sent(2))  # as predicted
    assert predictions.trusted
    ahead = predictions.answered(sent(2), answer(data(0, batch_at(2) + batch_at(3), 10)))
    assert ahead is not None and offsets(ahead) == [4]
    predictions.fetched(sent(3))  # behind the prediction (kafka-python)
    assert not predictions.trusted
    assert predictions.answered(sent(3), answer(data(0, batch_at(3) + batch_at(4), 10))) is None
    predictions.fetched(None)  # held at once, or not on its own connection
    assert not predictions.trusted
