"""Issue 30: librdkafka before 2.10 compresses through the proxy in front of Apache Kafka 4.

Kafka 4 serves Produce v3+ but advertises it from v0 (KAFKA-18659): librdkafka before 2.10
turns compression off, with only a debug line, unless Produce v0 is advertised (its issue
4956). Debian's kcat (librdkafka 2.0.2) is such a client. The proxy clamped Produce to the
versions it decodes (v3+), so every batch that client sent through it went uncompressed;
it now keeps the cluster's lower end. The batches are read back straight from the broker
(kio's Fetch, kafka-python's record reader) to see the codec the log really holds.
"""

from __future__ import annotations

import datetime
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.record import MemoryRecords
from kio.static.primitive import i32, i32Timedelta, i64

from testbed.kafka_cluster import running_kafka
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat._kcat import kcat_environment
from tests.support.kio_client import KioConnection, kio_module, kio_request
from wire.apis import ApiKey

#: kafka-python's codec numbers (the batch attributes' low bits).
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
#: Repetitive values, so every codec makes the batch smaller (librdkafka sends a batch
#: uncompressed when compressing does not pay).
VALUES = [b"x" * 2000 + str(n).encode() for n in range(3)]


@dataclass
class Stack:
    kafka: str
    proxy: ProxyProcess


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running_kafka(1) as cluster, running_proxy(cluster.bootstrap()) as proxy:
        yield Stack(cluster.bootstrap(), proxy)


def _stored_codecs(kafka: str, topic: str) -> list[int]:
    """The codec of every batch in partition 0 of ``topic``, read from the broker itself."""
    module = kio_module(ApiKey.FETCH, 12)
    partition = module.FetchPartition(
        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)
    )
    request = kio_request(
        ApiKey.FETCH,
        12,
        max_wait=i32Timedelta.parse(datetime.timedelta(0)),
        min_bytes=i32(0),
        topics=(module.FetchTopic(topic=topic, partitions=(partition,)),),
        forgotten_topics_data=(),
    )
    with KioConnection(kafka) as connection:
        (answer,) = connection.call(request).responses[0].partitions
    batches, codecs = MemoryRecords(bytes(answer.records)), []
    while batches.has_next():
        codecs.append(batches.next_batch().compression_type)
    return codecs


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_debian_kcat_compresses_through_the_proxy_as_directly(stack: Stack, codec: str) -> None:
    kcat, env, settings = kcat_environment("kcat-debian", "debian")
    stored: dict[str, list[int]] = {}
    for route, bootstrap in (("direct", stack.kafka), ("proxy", stack.proxy.bootstrap)):
        topic = f"codec-{codec}-{route}-{uuid.uuid4().hex[:6]}"
        admin = KafkaAdminClient(bootstrap_servers=stack.kafka)
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            admin.close()
        done = subprocess.run(
            [kcat, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-z", codec],
            input=b"\n".join(VALUES) + b"\n",
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        stored[route] = _stored_codecs(stack.kafka, topic)
    assert stored == {"direct": [CODECS[codec]], "proxy": [CODECS[codec]]}, settings
