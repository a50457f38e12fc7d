"""Port-per-broker routing through the proxy, in front of a three-node Apache Kafka.

The cluster is the session's `kafka_cluster` (tests/conftest.py): replication factor 3, the
leaders of a topic's partitions spread over the nodes, each group coordinated by the leader of
its offsets-topic partition. Kafka's own request log on each node shows which node a request
reached, which is how these tests see where the proxy forwarded a client's traffic.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from testbed.kafka_cluster import KafkaCluster
from testbed.processes import free_port, free_port_run
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.integration._kafka_raw import coordinator_of

PARTITIONS = 6
RECORDS = 300
GROUP_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "OffsetFetch")


@pytest.fixture(scope="module")
def cluster(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    yield kafka_cluster


def _served_ports(proxy: ProxyProcess) -> dict[int, int]:
    lines = re.findall(r"broker (\d+) is served at \S+:(\d+)", proxy.log_text())
    return {int(node): int(port) for node, port in lines}


def test_clients_are_routed_to_each_broker_through_its_own_port(cluster: KafkaCluster) -> None:
    with running_proxy(cluster.bootstrap()) as proxy:
        topic = create_topic(proxy.bootstrap, "routed", partitions=PARTITIONS)
        group = f"{topic}-group"

        consumer = KafkaConsumer(bootstrap_servers=proxy.bootstrap)
        try:
            consumer.bootstrap(timeout_ms=10_000)
            # kafka-python routes by this table (the broker list of its last Metadata).
            brokers = {(b.node_id, b.host, b.port) for b in consumer._cluster.brokers()}
        finally:
            consumer.close()
        served = _served_ports(proxy)
        assert sorted(served) == [1, 2, 3]
        assert brokers == {(n, "127.0.0.1", served[n]) for n in served}

        before = {n.node_id: cluster.request_counts(n.node_id) for n in cluster.nodes}
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", linger_ms=5)
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(RECORDS)]
        producer.flush(timeout=30)
        produced: Counter[tuple[int, int, bytes, bytes]] = Counter()
        for i, future in enumerate(futures):
            meta = future.get(timeout=30)
            produced[(meta.partition, meta.offset, b"k%d" % i, b"v%d" % i)] += 1
        producer.close()

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=proxy.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,  # Apache Kafka's group.min.session.timeout.ms
            heartbeat_interval_ms=1000,
        )
        consumed: Counter[tuple[int, int, bytes, bytes]] = Counter()
        give_up = time.monotonic() + 40
        while sum(consumed.values()) < RECORDS and time.monotonic() < give_up:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    consumed[(r.partition, r.offset, r.key, r.value)] += 1
        consumer.commit()
        consumer.close()
        assert consumed == produced

        def delta(node_id: int, api: str) -> int:
            return cluster.request_counts(node_id).get(api, 0) - before[node_id].get(api, 0)

        for node in cluster.nodes:  # every leader got its partitions' traffic via its port
            assert delta(node.node_id, "Produce") > 0, node
            assert delta(node.node_id, "Fetch") > 0, node
        coordinator = coordinator_of(cluster.bootstrap(), group)
        assert delta(coordinator, "JoinGroup") > 0
        for node in cluster.nodes:
            if node.node_id != coordinator:
                assert all(delta(node.node_id, api) == 0 for api in GROUP_APIS), node
        assert proxy.alive()


def test_consecutive_broker_ports_follow_node_ids(cluster: KafkaCluster) -> None:
    base = free_port_run(3)
    env = {"PURGATORY_PROXY_PROXY__FIRST_BROKER_PORT": str(base)}
    with running_proxy(cluster.bootstrap(), env=env) as proxy:
        proxy.wait_for_log(r"broker 3 is served at")
        assert _served_ports(proxy) == {1: base, 2: base + 1, 3: base + 2}


def test_explicit_broker_ports_from_the_config_file(cluster: KafkaCluster, tmp_path: Path) -> None:
    ports = {node: free_port() for node in (1, 2, 3)}
    config = tmp_path / "proxy.toml"
    config.write_text("[proxy.broker_ports]\n" + "".join(f"{n} = {p}\n" for n, p in ports.items()))
    with running_proxy(cluster.bootstrap(), "--config", str(config)) as proxy:
        proxy.wait_for_log(r"broker 3 is served at")
        assert _served_ports(proxy) == ports
