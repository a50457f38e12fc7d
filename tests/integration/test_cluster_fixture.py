# Strategy: the multi-broker fixture (tests/support/cluster.py) is test infrastructure that
# proxy tests will lean on, so it is tested the way the proxy will use it: kafka-python talks
# to it directly (no proxy), and every check is about what a real client sees and does. The
# fixture runs once for the module (moto + 3 Tansu processes start in about a second).
"""The 3-node test cluster: real Tansu brokers on shared S3, shown as nodes 1..3."""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Iterator

import psutil
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.support.cluster import Cluster, running_cluster

NODES = 3
PARTITIONS = 6
RECORDS = 600
#: Tansu holds JoinGroup about half the session timeout; keep it short (see DESIGN.md).
SESSION_TIMEOUT_MS = 3000
#: Upper bound for loops that wait on the cluster, so a broken fixture fails, not hangs.
GIVE_UP_AFTER_S = 40.0

GROUP_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "OffsetFetch", "LeaveGroup")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster(NODES) as running:
        yield running
        assert running.relay_errors == []


def _relay_addresses(cluster: Cluster) -> dict[int, tuple[str, int]]:
    out = {}
    for node in cluster.nodes:
        host, _, port = node.relay.rpartition(":")
        out[node.node_id] = (host, int(port))
    return out


def _create_topic(cluster: Cluster, name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    finally:
        admin.close()


def test_metadata_names_every_node_at_its_relay(cluster: Cluster) -> None:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
    try:
        consumer.bootstrap(timeout_ms=10_000)
        # kafka-python routes by this table; its own docstring points tests at it.
        brokers = consumer._cluster.brokers()
    finally:
        consumer.close()
    seen = {b.node_id: (b.host, b.port) for b in brokers}
    assert seen == _relay_addresses(cluster)
    tansu_ports = {int(node.tansu.rpartition(":")[2]) for node in cluster.nodes}
    assert not tansu_ports & {port for _, port in seen.values()}


def test_describe_cluster_names_every_node_with_node_1_as_controller(cluster: Cluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    seen = {b["broker_id"]: (b["host"], b["port"]) for b in described["brokers"]}
    assert seen == _relay_addresses(cluster)
    assert described["controller_id"] == 1


def test_partition_leaders_are_dealt_over_the_nodes(cluster: Cluster) -> None:
    _create_topic(cluster, "leaders")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        (topic,) = admin.describe_topics(["leaders"])
    finally:
        admin.close()
    leaders = {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}
    assert leaders == {p: p % NODES + 1 for p in range(PARTITIONS)}
    for partition in topic["partitions"]:
        assert partition["replica_nodes"] == partition["isr_nodes"] == [partition["leader_id"]]


def test_keyed_records_go_to_every_node_and_come_back_once_in_a_group(cluster: Cluster) -> None:
    topic = "round-trip"
    _create_topic(cluster, topic)
    before = {node.node_id: cluster.request_counts(node.node_id) for node in cluster.nodes}

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5)
    try:
        futures = [
            producer.send(topic, key=f"key-{i}".encode(), value=f"value-{i}".encode())
            for i in range(RECORDS)
        ]
        producer.flush(timeout=30)
        produced: Counter[tuple[int, int, bytes, bytes]] = Counter()
        for i, future in enumerate(futures):
            meta = future.get(timeout=30)
            produced[(meta.partition, meta.offset, f"key-{i}".encode(), f"value-{i}".encode())] += 1
    finally:
        producer.close()
    assert {partition for partition, _, _, _ in produced} == set(range(PARTITIONS))

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id="round-trip-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=SESSION_TIMEOUT_MS // 3,
    )
    consumed: Counter[tuple[int, int, bytes, bytes]] = Counter()
    try:
        give_up = time.monotonic() + GIVE_UP_AFTER_S
        while sum(consumed.values()) < RECORDS and time.monotonic() < give_up:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    consumed[(r.partition, r.offset, r.key, r.value)] += 1
        # One more poll: a duplicate delivered after the last new record would show here.
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                consumed[(r.partition, r.offset, r.key, r.value)] += 1
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()

    assert consumed == produced
    assert max(consumed.values()) == 1
    ends = Counter(partition for partition, _, _, _ in produced)
    assert committed == {p: ends[p] for p in range(PARTITIONS)}  # offsets start at 0

    def delta(node_id: int, api: str) -> int:
        return cluster.request_counts(node_id).get(api, 0) - before[node_id].get(api, 0)

    for node in cluster.nodes:
        # Each node leads two of the six partitions, so the producer and the consumer
        # sent that node's share of the traffic to its relay.
        assert delta(node.node_id, "Produce") > 0, node
        assert delta(node.node_id, "Fetch") > 0, node
    # Group coordination is pinned to node 1.
    assert delta(1, "JoinGroup") > 0
    for node_id in range(2, NODES + 1):
        assert all(delta(node_id, api) == 0 for api in GROUP_APIS), node_id
    assert cluster.relay_errors == []


def test_running_cluster_stops_every_process_and_relay() -> None:
    with running_cluster(nodes=2) as small:
        pids = [node.tansu_pid for node in small.nodes] + [small.s3.pid]
        relays = list(_relay_addresses(small).values())
        assert all(psutil.pid_exists(pid) for pid in pids)
    assert not any(psutil.pid_exists(pid) for pid in pids)
    for address in relays:
        with pytest.raises(ConnectionRefusedError), socket.create_connection(address, timeout=2):
            pass
