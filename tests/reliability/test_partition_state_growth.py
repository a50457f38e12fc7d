# Strategy: issue 29's table attack against the real proxy process in front of Apache Kafka. A
# client on a broker port fetches 300,000 made-up topic-partitions (30 sessionless fetches of
# 10,000, max wait 0: the cluster answers UNKNOWN_TOPIC_OR_PARTITION for each, and the proxy,
# which holds fetches with its own identity, learns every answer). On main the partition-state
# table kept every one of them: measured with this test, the process grew by 56 MiB (62 -> 118)
# and kept it after the client left. Asserted, from outside:
#   - while it runs, the table (purgatory_proxy_partition_states) stays within twice the sweep
#     floor (10,000) plus one fetch's partitions, and the process grows by at most 20 MiB
#     (measured with bounds: 11 MiB, what one bounded table and the answers in flight cost;
#     a table of all 300,000 costs about 56);
#   - once it has left, within two sweep periods (10 s each; the wait allows 40 s), the table
#     is back to what something still names (nothing: no consumer here), and the process is
#     still within 20 MiB of where it started. (Not back to it: the allocators keep some of
#     what they had, measured 9 MiB; the point is that it does not grow with the flood.)
# Then a real client produces and consumes through the same proxy.
"""The partition-state table under a flood of made-up partitions (issue 29)."""

from __future__ import annotations

import itertools
import uuid

import trio
from kafka import KafkaConsumer, KafkaProducer

from testbed.processes import Broker, free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.support.fetch_requests import fetch_partitions
from tests.support.load_proc import rss_bytes, scrape
from tests.support.load_wire import KafkaWire, leader_address
from wire.messages import FetchRequest, FetchResponse

MIB = 2**20
FETCHES = 30
TOPICS_PER_FETCH = 1000
PARTITIONS_PER_TOPIC = 10
PER_FETCH = TOPICS_PER_FETCH * PARTITIONS_PER_TOPIC
SWEEP_FLOOR = 10_000
#: Fetch v12: topic names, flexible (Kafka 4 still takes it).
FETCH_VERSION = 12
STATES = "purgatory_proxy_partition_states"
GROWTH_BOUND_BYTES = 20 * MIB


def _made_up(batch: int) -> FetchRequest:
    """A sessionless fetch of PER_FETCH partitions of topics nobody created, answered at once."""
    topics = {
        f"made-up-{batch}-{topic}-{uuid.uuid4().hex[:12]}": range(PARTITIONS_PER_TOPIC)
        for topic in range(TOPICS_PER_FETCH)
    }
    return fetch_partitions(topics, max_wait_ms=0, partition_max_bytes=1)


async def _states(metrics: str) -> float:
    """The table's size now; the series must exist (it did not before the table had bounds)."""
    values = await trio.to_thread.run_sync(scrape, metrics)
    return values[STATES]


async def _flood(proxy: ProxyProcess, broker: tuple[str, int], metrics: str) -> float:
    """The made-up fetches, one after the other; the largest table size seen."""
    wire = await KafkaWire.connect(*broker, "made-up-partitions")
    largest = 0.0
    try:
        for batch in range(FETCHES):
            await wire.send(_made_up(batch), FETCH_VERSION)
            _, response = await wire.receive()
            assert isinstance(response, FetchResponse)
            answered = [p for topic in response.responses for p in topic.partitions]
            assert len(answered) == PER_FETCH and all(p.error_code for p in answered)
            largest = max(largest, await _states(metrics))
    finally:
        await wire.aclose()
    return largest


def _consume_one(bootstrap: str, topic: str) -> list[bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    producer.send(topic, b"still served").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=30_000,
    )  # fmt: skip
    # The first record, not the iterator to its end (that waits out consumer_timeout_ms).
    values = [record.value for record in itertools.islice(consumer, 1)]
    consumer.close()
    return values


async def test_made_up_partitions_are_forgotten_and_their_memory_given_back(
    kafka_broker: Broker,
) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics) as proxy:
        topic = create_topic(proxy.bootstrap, "growth")
        broker = await leader_address(proxy.host, proxy.port, topic)
        # Warm-up: the codec, the channels and one fetch's worth, forgotten again.
        wire = await KafkaWire.connect(*broker, "warm-up")
        await wire.send(_made_up(-1), FETCH_VERSION)
        await wire.receive()
        await wire.aclose()
        with trio.fail_after(40):
            while await _states(metrics):
                await trio.sleep(1)
        baseline = rss_bytes(proxy.pid)

        largest = await _flood(proxy, broker, metrics)
        flooded = rss_bytes(proxy.pid)
        assert largest <= 2 * SWEEP_FLOOR + PER_FETCH

        with trio.fail_after(40):  # two sweep periods, and room for a loaded machine
            while await _states(metrics):
                await trio.sleep(1)
        await trio.sleep(1)
        after = rss_bytes(proxy.pid)
        figures = f"RSS {baseline / MIB:.1f} -> {flooded / MIB:.1f} -> {after / MIB:.1f} MiB"
        assert flooded - baseline <= GROWTH_BOUND_BYTES, figures
        assert after - baseline <= GROWTH_BOUND_BYTES, figures
        values = await trio.to_thread.run_sync(_consume_one, proxy.bootstrap, topic)
        assert values == [b"still served"]
        assert proxy.alive()
