# Strategy: the multi-broker fixture (tests/support/cluster.py) is test infrastructure that
# proxy tests will lean on, so it is tested the way the proxy will use it: kafka-python talks
# to it directly (no proxy), and every check is about what a real client sees and does. The
# fixture runs once for the module (moto + 3 Tansu processes start in about a second), with
# node 2 as the coordinator so group traffic has to leave the bootstrap node to arrive there.
# The last tests run the relay's rewriting on hand-built responses for the branches
# kafka-python does not reach (old and batched FindCoordinator, KIP-951 leader hints).
"""The 3-node test cluster: real Tansu brokers on shared S3, shown as nodes 1..3."""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Iterator
from typing import TypeVar

import psutil
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from testbed.cluster_rewrite import ClusterView, NodeAddress, rewrite_response
from tests.support.cluster import Cluster, running_cluster
from wire.apis import response_header_version
from wire.codec import Message, decode, encode
from wire.headers import ResponseHeader, encode_response_header, parse_response_header
from wire.messages import ApiVersionsResponse, FindCoordinatorResponse, ProduceResponse
from wire.messages.find_coordinator_response import Coordinator
from wire.messages.produce_response import (
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionProduceResponse,
    TopicProduceResponse,
)

NODES = 3
COORDINATOR = 2
PARTITIONS = 6
RECORDS = 600
#: Tansu holds JoinGroup about half the session timeout; keep it short (see DESIGN.md).
SESSION_TIMEOUT_MS = 3000
#: Upper bound for loops that wait on the cluster, so a broken fixture fails, not hangs.
GIVE_UP_AFTER_S = 40.0

M = TypeVar("M", bound=Message)

GROUP_APIS = ("JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "OffsetFetch", "LeaveGroup")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster(NODES, coordinator=COORDINATOR) as running:
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
    # Group traffic reaches the coordinator, and only the coordinator.
    assert delta(COORDINATOR, "JoinGroup") > 0
    assert delta(COORDINATOR, "OffsetCommit") > 0
    for node_id in set(range(1, NODES + 1)) - {COORDINATOR}:
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


# -- the rewriting on responses kafka-python does not provoke -------------------------------

VIEW = ClusterView(
    tuple(NodeAddress(i, "127.0.0.1", 40_000 + i) for i in range(1, NODES + 1)), coordinator_id=2
)
#: What Tansu says about itself: node 111 at its own address.
TANSU_NODE, TANSU_HOST, TANSU_PORT = 111, "127.0.0.1", 9092


def _response_frame(message: Message, version: int, correlation_id: int = 7) -> bytes:
    header_version = response_header_version(message.API_KEY, version)
    header = encode_response_header(ResponseHeader(correlation_id), header_version)
    return header + encode(message, version)


def _decode_frame(cls: type[M], frame: bytes | bytearray | memoryview, version: int) -> M:
    header_version = response_header_version(cls.API_KEY, version)
    header, start = parse_response_header(frame, header_version)
    assert header.correlation_id == 7
    return decode(cls, memoryview(frame)[start:], version)


@pytest.mark.parametrize("version", [0, 3])
def test_rewrite_names_the_coordinator_in_single_find_coordinator(version: int) -> None:
    frame = _response_frame(
        FindCoordinatorResponse(node_id=TANSU_NODE, host=TANSU_HOST, port=TANSU_PORT), version
    )
    shown = _decode_frame(
        FindCoordinatorResponse, rewrite_response(10, version, frame, VIEW), version
    )
    assert (shown.node_id, shown.host, shown.port) == (2, "127.0.0.1", 40_002)


def test_rewrite_names_the_coordinator_in_batched_find_coordinator_except_on_error() -> None:
    ok = Coordinator(key="group-a", node_id=TANSU_NODE, host=TANSU_HOST, port=TANSU_PORT)
    failed = Coordinator(key="group-b", node_id=-1, host="", port=-1, error_code=15)
    frame = _response_frame(FindCoordinatorResponse(coordinators=[ok, failed]), 4)
    shown = _decode_frame(FindCoordinatorResponse, rewrite_response(10, 4, frame, VIEW), 4)
    assert [(c.key, c.node_id, c.port, c.error_code) for c in shown.coordinators] == [
        ("group-a", 2, 40_002, 0),
        ("group-b", -1, -1, 15),
    ]


def test_rewrite_maps_kip_951_leader_hints_in_produce_responses() -> None:
    partition = PartitionProduceResponse(
        index=4, error_code=6, current_leader=LeaderIdAndEpoch(leader_id=111, leader_epoch=0)
    )
    message = ProduceResponse(
        responses=[TopicProduceResponse(name="t", partition_responses=[partition])],
        node_endpoints=[NodeEndpoint(node_id=TANSU_NODE, host=TANSU_HOST, port=TANSU_PORT)],
    )
    frame = _response_frame(message, 10)
    shown = _decode_frame(ProduceResponse, rewrite_response(0, 10, frame, VIEW), 10)
    leader = shown.responses[0].partition_responses[0].current_leader
    assert (leader.leader_id, leader.leader_epoch) == (2, 0)  # partition 4 -> node 4 % 3 + 1
    assert [(n.node_id, n.port) for n in shown.node_endpoints] == [
        (1, 40_001),
        (2, 40_002),
        (3, 40_003),
    ]


@pytest.mark.parametrize(
    ("message", "api_key", "version"),
    [
        (ApiVersionsResponse(), 18, 3),
        (ProduceResponse(responses=[TopicProduceResponse(name="t")]), 0, 11),
        (ProduceResponse(responses=[TopicProduceResponse(name="t")]), 0, 9),
    ],
)
def test_rewrite_returns_the_same_bytes_when_nothing_names_a_broker(
    message: Message, api_key: int, version: int
) -> None:
    frame = _response_frame(message, version)
    assert rewrite_response(api_key, version, frame, VIEW) is frame
