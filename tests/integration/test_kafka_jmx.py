"""Kafka's own request meters over JMX (testbed/kafka_jmx.py): what the peer benchmark counts.

bench.peers reads a broker's upstream Fetch rate from these meters instead of a relay or the
request log, so they must count exactly the requests clients sent, and split the clients'
fetches (FetchConsumer) from the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from testbed.kafka_cluster import KafkaCluster, KafkaNode, running_kafka
from testbed.kafka_jmx import request_meters
from testbed.topics import create_topic

RECORDS = 7


@pytest.fixture(scope="module")
def jmx_kafka() -> Iterator[KafkaCluster]:
    with running_kafka(1, jmx=True) as cluster:
        yield cluster


def test_the_meters_count_each_produce_and_the_clients_fetches(jmx_kafka: KafkaCluster) -> None:
    topic = create_topic(jmx_kafka.bootstrap())
    with request_meters(jmx_kafka.nodes[0]) as meters:
        before = meters.counts()
        producer = KafkaProducer(bootstrap_servers=jmx_kafka.bootstrap(), acks="all")
        try:
            for index in range(RECORDS):
                producer.send(topic, f"record {index}".encode()).get(timeout=30)  # one request each
        finally:
            producer.close()
        produced = meters.counts()
        consumer = KafkaConsumer(bootstrap_servers=jmx_kafka.bootstrap(), fetch_max_wait_ms=100)
        try:
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek_to_beginning()
            read = 0
            while read < RECORDS:
                read += sum(len(batch) for batch in consumer.poll(timeout_ms=1000).values())
        finally:
            consumer.close()
        after = meters.counts()

    assert produced["Produce"] - before.get("Produce", 0) == RECORDS
    fetched = after["FetchConsumer"] - produced.get("FetchConsumer", 0)
    assert fetched > 0
    # One node: no follower fetches, so every Fetch the broker completed was a client's.
    assert after.get("FetchFollower", 0) == 0
    assert after["Fetch"] - produced.get("Fetch", 0) == fetched


def test_a_node_without_jmx_is_refused_with_the_fix(tmp_path: Path) -> None:
    node = KafkaNode(1, {"PLAINTEXT": 9}, tmp_path)
    with pytest.raises(RuntimeError, match="jmx=True"), request_meters(node):
        pass
