"""Partition t-0 for the in-process tests: a scripted broker that has it, and a produce to it
and a fetch of it (the wire codec's messages, as a client would send them)."""

from __future__ import annotations

import functools
import struct

from tests.support.load_wire import record_batch
from tests.support.scripted_broker import ScriptedBroker
from wire.messages import FetchRequest, ProduceRequest
from wire.messages.fetch_request import FetchPartition, FetchTopic
from wire.messages.produce_request import PartitionProduceData, TopicProduceData

__all__ = ["batch_at", "broker_with_topic", "fetch", "produce"]


def broker_with_topic() -> ScriptedBroker:
    """A scripted broker with topic t (one partition)."""
    broker = ScriptedBroker()
    broker.create_topic("t")
    return broker


def produce(acks: int = -1, timeout_ms: int = 1000, records: bytes = b"r" * 10) -> ProduceRequest:
    return ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            TopicProduceData(
                name="t", partition_data=[PartitionProduceData(index=0, records=records)]
            )
        ],
    )


def fetch(offset: int = 0, max_wait_ms: int = 500, min_bytes: int = 1) -> FetchRequest:
    """A sessionless fetch of t-0 from ``offset``."""
    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic="t",
                partitions=[
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )


@functools.cache
def batch_at(offset: int) -> bytes:
    """A one-record magic-v2 batch whose base offset is ``offset`` (the same bytes each call:
    the builder stamps the time)."""
    data = bytearray(record_batch(10))
    struct.pack_into(">q", data, 0, offset)  # outside the CRC
    return bytes(data)
