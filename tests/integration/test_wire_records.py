"""wire against the real broker: batches produced by real clients, fetched back raw.

aiokafka and confluent-kafka (librdkafka) produce to the broker of the `kafka_broker`
fixture, with every compression codec the client can do here. The test then fetches the
partition over a plain socket, speaking the protocol with `wire` alone (framing, headers,
ApiVersions, Metadata, Fetch at the oldest, last name-based and newest common versions),
and checks what the batch reader says against what was produced: record counts, CRCs,
compression bits, contiguous offsets, producer ids of the idempotent producer.

Tansu (the test broker) ignores partition_max_bytes and never sends a partial trailing
batch, so the truncated-tail check cuts the real fetched bytes itself.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiokafka.codec
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import wire
from testbed.processes import Broker
from wire import codec
from wire.messages import ApiVersionsRequest, FetchRequest, MetadataRequest
from wire.messages import fetch_request as freq
from wire.messages import metadata_request as mreq
from wire.records import Compression, RecordBatchHeader, scan_batches, verify_crcs

RECORDS = 150
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# librdkafka in the confluent-kafka wheel has every codec; aiokafka needs optional
# Python packages for all but gzip, so it runs with what is installed.
AIOKAFKA_CODECS = [c for c in CODECS if c == "none" or getattr(aiokafka.codec, f"has_{c}")()]


class RawClient:
    """A blocking Kafka client made of wire and a socket (test use only)."""

    def __init__(self, broker: Broker) -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=15)
        self.frames = wire.FrameDecoder()
        self.correlation_ids = itertools.count(1)
        versions = self.call(
            ApiVersionsRequest(client_software_name="wire-test", client_software_version="1"), 3
        )
        assert versions.error_code == 0
        self.max_versions = {k.api_key: k.max_version for k in versions.api_keys}

    def common_max(self, api_key: int) -> int:
        return min(self.max_versions[api_key], wire.api_spec(api_key).max_version)

    def call(self, msg: wire.Message, version: int) -> Any:
        api_key = type(msg).API_KEY
        correlation_id = next(self.correlation_ids)
        header = wire.RequestHeader(
            api_key=api_key, api_version=version, correlation_id=correlation_id, client_id="wire"
        )
        self.sock.sendall(
            wire.frame(wire.encode_request_header(header), *codec.encode_parts(msg, version))
        )
        while not isinstance(frame := self.frames.next_frame(), memoryview):
            data = self.sock.recv(1 << 16)
            assert data, "broker closed the connection"
            self.frames.receive_data(data)
        response_header, offset = wire.parse_response_header(
            frame, wire.response_header_version(api_key, version)
        )
        assert response_header.correlation_id == correlation_id
        return codec.decode_response(api_key, version, frame[offset:])

    def close(self) -> None:
        self.sock.close()


@dataclass
class Fetched:
    batches: list[RecordBatchHeader]
    blobs: list[memoryview]


def fetch_all(client: RawClient, topic: str, version: int, expected: int) -> Fetched:
    """Fetch partition 0 from offset 0 until `expected` records have arrived."""
    metadata = client.call(
        MetadataRequest(topics=[mreq.MetadataRequestTopic(name=topic)]), client.common_max(3)
    )
    topic_id = metadata.topics[0].topic_id
    fetched = Fetched([], [])
    offset = 0
    for _ in range(100):
        by_id = version >= 13
        request = FetchRequest(
            max_wait_ms=200,
            min_bytes=1,
            max_bytes=1 << 22,
            topics=[
                freq.FetchTopic(
                    topic="" if by_id else topic,
                    topic_id=topic_id if by_id else uuid.UUID(int=0),
                    partitions=[
                        freq.FetchPartition(
                            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                        )
                    ],
                )
            ],
        )
        response = client.call(request, version)
        partition = response.responses[0].partitions[0]
        assert partition.error_code == 0, partition
        if partition.records is not None and len(partition.records):
            scan = scan_batches(partition.records)
            fetched.blobs.append(partition.records)
            fetched.batches += scan.batches
            if scan.batches:
                offset = scan.batches[-1].next_offset
        if sum(b.record_count for b in fetched.batches) >= expected:
            return fetched
    raise AssertionError(f"only {sum(b.record_count for b in fetched.batches)} records came back")


@pytest.fixture(scope="module")
def admin(kafka_broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_broker.bootstrap})


@pytest.fixture
def raw(kafka_broker: Broker) -> Iterator[RawClient]:
    client = RawClient(kafka_broker)
    yield client
    client.close()


def create_topic(admin: AdminClient, name: str) -> None:
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)


def produce_confluent(bootstrap: str, topic: str, compression: str, idempotent: bool) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": compression,
            "linger.ms": 20,
            "batch.num.messages": 40,  # several batches per topic
            "enable.idempotence": idempotent,
            "log_level": 4,  # warnings and worse: not the disconnect notice at teardown
        }
    )
    for i in range(RECORDS):
        producer.produce(topic, key=b"k%d" % (i % 7), value=b"value-%d-" % i * 8)
    assert producer.flush(30) == 0


async def produce_aiokafka(bootstrap: str, topic: str, compression: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        linger_ms=20,
        max_batch_size=2048,  # several batches per topic
    )
    await producer.start()
    try:
        sent = [await producer.send(topic, value=b"value-%d-" % i * 8) for i in range(RECORDS)]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def check_batches(fetched: Fetched, compression: str) -> None:
    batches = fetched.batches
    assert sum(b.record_count for b in batches) == RECORDS
    assert batches[0].base_offset == 0
    assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(batches))
    assert {b.magic for b in batches} == {2}
    assert {b.compression for b in batches} == {Compression[compression.upper()]}
    assert not any(b.is_transactional or b.is_control for b in batches)
    assert all(b.base_timestamp <= b.max_timestamp for b in batches)
    assert all(b.last_offset_delta == b.record_count - 1 for b in batches)
    assert sum(verify_crcs(blob) for blob in fetched.blobs) == len(batches)


def fetch_versions(raw: RawClient) -> list[int]:
    """Oldest Fetch we decode, the last one naming topics, and the newest both sides speak."""
    return sorted({wire.api_spec(1).min_version, 12, raw.common_max(1)})


@pytest.mark.parametrize("compression", CODECS)
def test_confluent_kafka_batches(
    kafka_broker: Broker, admin: AdminClient, raw: RawClient, compression: str
) -> None:
    topic = f"wire-confluent-{compression}"
    create_topic(admin, topic)
    produce_confluent(kafka_broker.bootstrap, topic, compression, idempotent=False)
    for version in fetch_versions(raw):
        fetched = fetch_all(raw, topic, version, RECORDS)
        check_batches(fetched, compression)
        assert len(fetched.batches) > 1
        assert {b.producer_id for b in fetched.batches} == {-1}


@pytest.mark.parametrize("compression", AIOKAFKA_CODECS)
def test_aiokafka_batches(
    kafka_broker: Broker, admin: AdminClient, raw: RawClient, compression: str
) -> None:
    topic = f"wire-aiokafka-{compression}"
    create_topic(admin, topic)
    asyncio.run(produce_aiokafka(kafka_broker.bootstrap, topic, compression))
    for version in fetch_versions(raw):
        fetched = fetch_all(raw, topic, version, RECORDS)
        check_batches(fetched, compression)
        assert len(fetched.batches) > 1


def test_codec_coverage_of_this_run() -> None:
    # confluent-kafka covers every codec; aiokafka at least none and gzip.
    assert {"none", "gzip"} <= set(AIOKAFKA_CODECS)


def test_idempotent_producer_fields(
    kafka_broker: Broker, admin: AdminClient, raw: RawClient
) -> None:
    topic = "wire-confluent-idempotent"
    create_topic(admin, topic)
    produce_confluent(kafka_broker.bootstrap, topic, "lz4", idempotent=True)
    batches = fetch_all(raw, topic, raw.common_max(1), RECORDS).batches
    assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1
    assert batches[0].producer_id >= 0 and batches[0].producer_epoch >= 0
    # Sequences count records: each batch starts where the previous one ended.
    assert [b.base_sequence for b in batches] == [
        sum(x.record_count for x in batches[:i]) for i in range(len(batches))
    ]


def test_truncated_tail_of_real_fetched_bytes(
    kafka_broker: Broker, admin: AdminClient, raw: RawClient
) -> None:
    topic = "wire-truncation"
    create_topic(admin, topic)
    produce_confluent(kafka_broker.bootstrap, topic, "none", idempotent=False)
    fetched = fetch_all(raw, topic, 12, RECORDS)
    blob = bytes(fetched.blobs[0])
    first = scan_batches(blob).batches[0]
    for cut in (first.end + 1, first.end + 30, len(blob) - 1):
        scan = scan_batches(blob[:cut])
        assert scan.truncated_bytes > 0 and not scan.complete
        assert scan.valid_bytes + scan.truncated_bytes == cut
        assert verify_crcs(blob[:cut]) == len(scan.batches)
