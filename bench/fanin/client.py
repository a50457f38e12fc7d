# Strategy: the smallest Kafka client that behaves like a real one on the wire, written with
# our own codec (wire/). The fan-in benchmark opens thousands of connections from ONE trio
# process; real client libraries (aiokafka, kafka-python) would spend the machine's two cores
# on their own bookkeeping and the benchmark would measure them, not the proxy.
#
#   Connection   one TCP connection, one request in flight at a time (what a consumer's
#                fetch connection is), header versions from the generated API table.
#   Versions     every connection asks ApiVersions first, as clients do, and then uses the
#                highest version both sides support.
#   lookup       one Metadata request: the topic's id and the address of its partition's
#                leader, which is where consumers open their fetch connections (the proxy's
#                per-broker port, or the relay).
#   Producer     acks=1 Produce of one record (a magic v2 batch built by kafka-python's
#                builder, the independent writer bench/wire.py uses too); returns its offset.
"""A minimal protocol-level Kafka client for the fan-in benchmark."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TypeVar

import trio
from kafka.record.default_records import DefaultRecordBatchBuilder

from wire.apis import ApiKey, response_header_version
from wire.codec import REQUEST_CLASSES, Message, decode, decode_api_versions_response, encode
from wire.framing import NEED_DATA, FrameDecoder, frame
from wire.headers import RequestHeader, encode_request_header, parse_response_header
from wire.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from wire.messages.metadata_request import MetadataRequestTopic
from wire.messages.produce_request import PartitionProduceData, TopicProduceData

__all__ = ["Connection", "KafkaError", "ProduceError", "Producer", "TopicRoute", "lookup"]

M = TypeVar("M", bound=Message)

_RECEIVE_BYTES = 65536
_API_VERSIONS_VERSION = 3
#: Metadata v12 names topic ids and brokers; every broker this benchmark meets speaks it.
_METADATA_VERSION = 12
_CLIENT_SOFTWARE = ("purgatory-fanin-bench", "1")


class KafkaError(Exception):
    """The peer answered with an error code the benchmark cannot work around."""


class ProduceError(KafkaError):
    """A Produce was answered with a partition error (the record may still have been written:
    a REQUEST_TIMED_OUT answer does not say the broker lacks it)."""

    def __init__(self, error_code: int) -> None:
        super().__init__(f"produce failed with error {error_code}")
        self.error_code = error_code


class Connection:
    """One client connection: send a request, read its response, in order.

    Task safety: one task at a time (a consumer's fetch loop, or the producer).
    """

    __slots__ = ("_correlation_id", "_decoder", "_stream", "client_id", "versions")

    def __init__(self, stream: trio.SocketStream, client_id: str) -> None:
        self._stream = stream
        self._decoder = FrameDecoder()
        self._correlation_id = 0
        self.client_id = client_id
        #: api key -> highest version both sides speak (filled by :meth:`open`).
        self.versions: dict[int, int] = {}

    @classmethod
    async def open(cls, host: str, port: int, client_id: str) -> Connection:
        """Connect and negotiate versions with ApiVersions, as every Kafka client does."""
        stream = await trio.open_tcp_stream(host, port)
        connection = cls(stream, client_id)
        try:
            await connection._negotiate()
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return connection

    async def _negotiate(self) -> None:
        name, version = _CLIENT_SOFTWARE
        request = ApiVersionsRequest(client_software_name=name, client_software_version=version)
        body = await self.round_trip(ApiKey.API_VERSIONS, _API_VERSIONS_VERSION, request)
        response, _ = decode_api_versions_response(body, _API_VERSIONS_VERSION)
        if response.error_code:
            raise KafkaError(f"ApiVersions failed with error {response.error_code}")
        for entry in response.api_keys:
            ours = REQUEST_CLASSES.get(entry.api_key)
            if ours is None:
                continue
            lo, hi = ours.VERSIONS
            top = min(hi, entry.max_version)
            if top >= max(lo, entry.min_version):
                self.versions[entry.api_key] = top

    async def round_trip(self, api_key: int, version: int, request: Message) -> memoryview:
        """Send ``request`` and return its response body (header stripped)."""
        self._correlation_id += 1
        header = RequestHeader(api_key, version, self._correlation_id, self.client_id)
        await self._stream.send_all(frame(encode_request_header(header), encode(request, version)))
        while True:
            response = self._decoder.next_frame()
            if response is not NEED_DATA:
                break
            data = await self._stream.receive_some(_RECEIVE_BYTES)
            if not data:
                raise trio.BrokenResourceError("the peer closed the connection")
            self._decoder.receive_data(data)
        assert isinstance(response, memoryview)
        got, start = parse_response_header(response, response_header_version(api_key, version))
        if got.correlation_id != self._correlation_id:
            raise KafkaError(
                f"correlation id {got.correlation_id}, expected {self._correlation_id}"
            )
        return response[start:]

    async def call(self, response_class: type[M], request: Message) -> tuple[M, int]:
        """Send ``request`` at the negotiated version; return the decoded response and version."""
        api_key = type(request).API_KEY
        version = self.versions.get(api_key)
        if version is None:
            raise KafkaError(f"the peer does not speak api key {api_key} at a version we do")
        body = await self.round_trip(api_key, version, request)
        return decode(response_class, body, version), version

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self._stream)


@dataclass(frozen=True)
class TopicRoute:
    """Where one partition of a topic lives, as the cluster (or the proxy) describes it."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    leader_host: str
    leader_port: int


async def lookup(host: str, port: int, topic: str, partition: int = 0) -> TopicRoute:
    """Ask ``host:port`` for ``topic``'s metadata: the topic id and the partition's leader."""
    connection = await Connection.open(host, port, "fanin-lookup")
    try:
        request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)])
        version = min(connection.versions.get(ApiKey.METADATA, 0), _METADATA_VERSION)
        body = await connection.round_trip(ApiKey.METADATA, version, request)
        response = decode(MetadataResponse, body, version)
    finally:
        await connection.aclose()
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    (found,) = [t for t in response.topics if t.name == topic]
    if found.error_code:
        raise KafkaError(f"metadata for {topic}: error {found.error_code}")
    (leader,) = [p.leader_id for p in found.partitions if p.partition_index == partition]
    leader_host, leader_port = brokers[leader]
    return TopicRoute(topic, found.topic_id, partition, leader_host, leader_port)


def one_record_batch(value: bytes) -> bytes:
    """A magic v2 batch holding one record (no key, no compression, no producer id)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


class Producer:
    """acks=1 Produce of single records over one connection to the partition's leader."""

    def __init__(self, connection: Connection, route: TopicRoute) -> None:
        self._connection = connection
        self._route = route

    @classmethod
    async def open(cls, route: TopicRoute) -> Producer:
        return cls(
            await Connection.open(route.leader_host, route.leader_port, "fanin-producer"), route
        )

    async def produce(self, value: bytes) -> int:
        """Write one record; return its offset once the leader acknowledged it."""
        route = self._route
        request = ProduceRequest(
            acks=1,
            timeout_ms=10_000,
            topic_data=[
                TopicProduceData(
                    name=route.topic,
                    topic_id=route.topic_id,
                    partition_data=[
                        PartitionProduceData(index=route.partition, records=one_record_batch(value))
                    ],
                )
            ],
        )
        response, _ = await self._connection.call(ProduceResponse, request)
        (partition,) = response.responses[0].partition_responses
        if partition.error_code:
            raise ProduceError(partition.error_code)
        return int(partition.base_offset)

    async def aclose(self) -> None:
        await self._connection.aclose()
