# Strategy: the reliability scenarios (issue 9) need hundreds of connections that do exactly
# what a test says (a 1 MiB produce as fast as TCP allows, a fetch whose answer is never read,
# half a frame and then silence), which no real client library will do on request. So the load
# generators speak the protocol themselves, through our own sans-I/O codec: wire.codec builds
# and parses the bodies, wire.headers the headers, wire.framing.FrameDecoder splits the
# response stream, and kafka-python's record-batch builder makes the records (an independent
# encoder, so a produce the broker accepts is a real one).
#
# One KafkaWire is one TCP connection. Sending and receiving are separate calls, so a caller
# can pipeline (send many, then read), never read at all, or read from another task; the
# connection remembers, in order, which request each response answers and checks the
# correlation ids (Kafka answers a connection's requests in order).
"""A bare Kafka connection over trio built on our codec, for the load generators."""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

import trio
from kafka.record.default_records import DefaultRecordBatchBuilder

from wire.apis import response_header_version
from wire.codec import Message, decode_response, encode_parts
from wire.framing import NEED_DATA, FrameDecoder, frame
from wire.headers import RequestHeader, encode_request_header, parse_response_header
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from wire.messages.metadata_response import MetadataResponse
from wire.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

__all__ = [
    "FETCH_VERSION",
    "PRODUCE_VERSION",
    "KafkaWire",
    "Sent",
    "fetch_request",
    "leader_address",
    "produce_request",
    "record_batch",
    "request_frame",
]

#: Produce v8: topic names (v13 wants ids), not flexible; every client of the last years sends it.
PRODUCE_VERSION = 8
#: Metadata v8: topic names, not flexible.
METADATA_VERSION = 8
#: Fetch v11: the last version with topic names and no tagged fields (Tansu needs ids at v13+).
FETCH_VERSION = 11
_RECEIVE_BYTES = 256 * 1024


def record_batch(value_bytes: int, *, records: int = 1) -> bytes:
    """A magic-v2 batch of ``records`` uncompressed records of ``value_bytes`` each."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**31 - 1,
    )
    value = b"x" * value_bytes
    for offset in range(records):
        builder.append(offset, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_request(
    topic: str, records: bytes, *, partition: int = 0, acks: int = -1, timeout_ms: int = 30_000
) -> ProduceRequest:
    data = PartitionProduceData(index=partition, records=records)
    return ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[TopicProduceData(name=topic, partition_data=[data])],
    )


def fetch_request(
    topic: str,
    offset: int,
    *,
    partition: int = 0,
    max_bytes: int = 1024 * 1024,
    max_wait_ms: int = 100,
    min_bytes: int = 1,
) -> FetchRequest:
    """A sessionless fetch of one partition (Tansu: ``max_wait_ms`` must be at least 1)."""
    wanted = FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)
    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        topics=[FetchTopic(topic=topic, partitions=[wanted])],
    )


def request_frame(message: Message, version: int, correlation_id: int, client_id: str) -> bytes:
    """A whole request frame: size prefix, header, body."""
    header = RequestHeader(message.API_KEY, version, correlation_id, client_id)
    return frame(encode_request_header(header), *encode_parts(message, version))


@dataclass(frozen=True, slots=True)
class Sent:
    """A request on the wire whose response has not been read yet."""

    correlation_id: int
    api_key: int
    version: int
    request_bytes: int
    sent_s: float


class KafkaWire:
    """One client connection: send requests, read their responses in order.

    Task safety: one task may send while another receives (the flood's sender and
    acknowledger); two concurrent senders or receivers are a bug (trio's stream raises).
    """

    def __init__(self, stream: trio.SocketStream, client_id: str) -> None:
        self.stream = stream
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._decoder = FrameDecoder()
        self.in_flight: deque[Sent] = deque()

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str) -> KafkaWire:
        return cls(await trio.open_tcp_stream(host, port), client_id)

    async def send(self, message: Message, version: int) -> Sent:
        """Write one request; its response is owed (read it with :meth:`receive`)."""
        correlation_id = next(self._ids)
        data = request_frame(message, version, correlation_id, self.client_id)
        sent = Sent(correlation_id, message.API_KEY, version, len(data), trio.current_time())
        self.in_flight.append(sent)
        await self.stream.send_all(data)
        return sent

    async def send_raw(self, data: bytes) -> None:
        """Write bytes that are not (or not yet) a well-formed request."""
        await self.stream.send_all(data)

    async def receive(self) -> tuple[Sent, Message]:
        """The response to the oldest owed request, decoded.

        Raises:
            EOFError: the proxy closed the connection.
            AssertionError: the response answers another request (an ordering bug).
        """
        body = await self._next_frame()
        sent = self.in_flight.popleft()
        header_version = response_header_version(sent.api_key, sent.version)
        header, offset = parse_response_header(body, header_version)
        assert header.correlation_id == sent.correlation_id, (
            f"response to {header.correlation_id}, expected {sent.correlation_id}"
        )
        return sent, decode_response(sent.api_key, sent.version, body[offset:])

    async def _next_frame(self) -> memoryview:
        while True:
            found = self._decoder.next_frame()
            if isinstance(found, memoryview):
                return found
            if found is not NEED_DATA:
                raise EOFError("the proxy closed the connection")
            self._decoder.receive_data(await self.stream.receive_some(_RECEIVE_BYTES))

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


async def leader_address(host: str, port: int, topic: str, partition: int = 0) -> tuple[str, int]:
    """Where the proxy tells clients to send ``topic``/``partition`` (its broker port).

    Connections that start there are what real clients open for produce and fetch, so the
    load takes the same path through the proxy as a client library's.
    """
    wire = await KafkaWire.connect(host, port, "load-metadata")
    try:
        request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)])
        await wire.send(request, METADATA_VERSION)
        _, response = await wire.receive()
    finally:
        await wire.aclose()
    assert isinstance(response, MetadataResponse)
    (found,) = [t for t in response.topics if t.name == topic]
    (leader,) = [p.leader_id for p in found.partitions if p.partition_index == partition]
    (broker,) = [b for b in response.brokers if b.node_id == leader]
    return broker.host, broker.port
