"""Issue 30: librdkafka before 2.10 compresses through the proxy in front of Apache Kafka.

Kafka 4 serves Produce v3+ but advertises it from v0 (KAFKA-18659): librdkafka before 2.10
turns compression off, with only a debug line, unless Produce v0 is advertised (its issue
4956). Debian's kcat (librdkafka 2.0.2) is such a client. The proxy clamped Produce to the
versions it decodes (v3+), so every batch that client sent through it went uncompressed;
it now keeps the cluster's lower end (Kafka 3.9 serves v0 and advertises it too). The batches
are read back straight from the broker (kio's Fetch, kafka-python's record reader) to see the
codec the log really holds.
"""

from __future__ import annotations

import datetime
import subprocess

import pytest
from kafka.record import MemoryRecords
from kio.static.primitive import i32, i32Timedelta, i64

from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess
from testbed.topics import create_topic
from tests.compat._kcat import kcat_environment
from tests.support.kio_client import KioConnection, kio_module, kio_request
from wire.apis import ApiKey

#: kafka-python's codec numbers (the batch attributes' low bits).
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
#: Repetitive values, so every codec makes the batch smaller (librdkafka sends a batch
#: uncompressed when compressing does not pay).
VALUES = [b"x" * 2000 + str(n).encode() for n in range(3)]


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
def test_debian_kcat_compresses_through_the_proxy_as_directly(
    kafka_broker: Broker, proxy: ProxyProcess, codec: str
) -> None:
    kcat, env, settings = kcat_environment("kcat-debian", "debian")
    stored: dict[str, set[int]] = {}
    for route, bootstrap in (("direct", kafka_broker.bootstrap), ("proxy", proxy.bootstrap)):
        topic = create_topic(kafka_broker.bootstrap, f"codec-{codec}-{route}")
        done = subprocess.run(
            [kcat, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-z", codec],
            input=b"\n".join(VALUES) + b"\n",
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        # One batch as a rule, more if the client's linger ran out between lines (a busy CPU).
        stored[route] = set(_stored_codecs(kafka_broker.bootstrap, topic))
    assert stored == {"direct": {CODECS[codec]}, "proxy": {CODECS[codec]}}, settings
