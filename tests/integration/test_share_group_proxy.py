"""Issue 30: a share group (KIP-932) through the proxy in front of a two-node Apache Kafka 4.4.

A share consumer made of raw requests (kio bodies, tests/support/kio_client.py) joins a share
group, share-fetches what a producer wrote through the proxy and acknowledges it; then asks
the broker that does not lead the partition, which answers NOT_LEADER_OR_FOLLOWER with the
leader's endpoint (KIP-932 node endpoints): through the proxy that endpoint must be the
proxy's port for the leader, never the broker's own address. FindCoordinator answers of every
key type (group, transaction, share state) must name the proxy too.
"""

from __future__ import annotations

import base64
import datetime
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.record import MemoryRecords
from kio.static.primitive import i8, i32, i32Timedelta, i64

from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.kafka_install import KAFKA_LINES
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import wait_for_leaders
from tests.support.kio_client import KioConnection, kio_module, kio_request
from wire.apis import ApiKey

NONE, NOT_LEADER_OR_FOLLOWER, COORDINATOR_NOT_AVAILABLE = 0, 6, 15
ACCEPT = 1
LEADER = 1  # the node the test topic's one partition lives on
GROUP = "share-through-proxy"
#: Generous bounds for a 2-core machine shared with other tests.
WAIT_S = 60.0


@dataclass
class Stack:
    cluster: KafkaCluster
    proxy: ProxyProcess
    topic: str
    topic_id: uuid.UUID
    advertised: dict[int, str]  # node id -> the address the proxy gives clients


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # Share groups are a Kafka 4 feature: the newest line, whatever $KAFKA_VERSION says.
    with (
        running_kafka(2, version=KAFKA_LINES[0]) as cluster,
        running_proxy(cluster.bootstrap()) as proxy,
    ):
        topic = f"shared-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30_000)
        try:  # partition 0 on the leader only, so the other node is never its leader
            admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [LEADER]})])
            wait_for_leaders(admin, topic, 1)
        finally:
            admin.close()
        brokers, topic_id = _metadata(proxy.bootstrap, topic)
        yield Stack(cluster, proxy, topic, topic_id, brokers)


def _metadata(bootstrap: str, topic: str) -> tuple[dict[int, str], uuid.UUID]:
    module = kio_module(ApiKey.METADATA, 12)
    request = kio_request(
        ApiKey.METADATA,
        12,
        topics=(module.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    deadline = time.monotonic() + WAIT_S
    while True:
        with KioConnection(bootstrap) as connection:
            answer = connection.call(request)
        (found,) = answer.topics
        if (
            found.error_code == NONE
            and found.partitions
            and found.partitions[0].leader_id == LEADER
        ):
            break
        assert time.monotonic() < deadline, f"no leader for {topic}: {answer}"
        time.sleep(0.2)
    brokers = {int(b.node_id): f"{b.host}:{b.port}" for b in answer.brokers}
    return brokers, found.topic_id


def _coordinator(address: str, key_type: int, key: str) -> Any:
    """FindCoordinator v6 for one key, retried while the coordinator is being elected."""
    request = kio_request(
        ApiKey.FIND_COORDINATOR, 6, key_type=i8(key_type), coordinator_keys=(key,)
    )
    deadline = time.monotonic() + WAIT_S
    while True:
        with KioConnection(address) as connection:
            (coordinator,) = connection.call(request).coordinators
        if coordinator.error_code != COORDINATOR_NOT_AVAILABLE:
            assert coordinator.error_code == NONE, coordinator
            return coordinator
        assert time.monotonic() < deadline, coordinator
        time.sleep(0.3)


def _kafka_uuid(value: uuid.UUID) -> str:
    """A topic id as Kafka writes it in share-state keys (Uuid.toString: base64url)."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


class ShareMember:
    """One share-group member speaking raw KIP-932 requests through the proxy.

    A broker keeps a member's share session only while the connection that opened it lives
    (Kafka 4.4), so the member keeps one connection per broker address, like the Java client.
    """

    def __init__(self, stack: Stack, coordinator: str) -> None:
        self.stack = stack
        self.coordinator = coordinator
        self.member_id = _kafka_uuid(uuid.uuid4())
        self.epochs: dict[str, int] = {}  # per broker address: the share session epoch
        self._connections: dict[str, KioConnection] = {}

    def __enter__(self) -> ShareMember:
        return self

    def __exit__(self, *exc: object) -> None:
        for connection in self._connections.values():
            connection.close()

    def _call(self, address: str, request: Any) -> Any:
        if address not in self._connections:
            self._connections[address] = KioConnection(address)
        return self._connections[address].call(request)

    def join(self) -> None:
        """Heartbeat until the coordinator assigns the test partition."""
        epoch, deadline = 0, time.monotonic() + WAIT_S
        with KioConnection(self.coordinator) as connection:
            while True:
                answer = connection.call(
                    kio_request(
                        ApiKey.SHARE_GROUP_HEARTBEAT,
                        1,
                        group_id=GROUP,
                        member_id=self.member_id,
                        member_epoch=i32(epoch),
                        subscribed_topic_names=(self.stack.topic,) if epoch == 0 else None,
                    )
                )
                assert answer.error_code == NONE, answer
                epoch = int(answer.member_epoch)
                if answer.assignment is not None and answer.assignment.topic_partitions:
                    return
                assert time.monotonic() < deadline, answer
                time.sleep(0.3)

    def _next_epoch(self, address: str) -> int:
        epoch = self.epochs.get(address, -1) + 1
        self.epochs[address] = epoch
        return epoch

    def fetch(self, address: str, max_wait_ms: int) -> Any:
        module = kio_module(ApiKey.SHARE_FETCH, 2)
        partition = module.FetchPartition(partition_index=i32(0), acknowledgement_batches=())
        request = kio_request(
            ApiKey.SHARE_FETCH,
            2,
            group_id=GROUP,
            member_id=self.member_id,
            share_session_epoch=i32(self._next_epoch(address)),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
            min_bytes=i32(1),
            max_bytes=i32(1 << 20),
            max_records=i32(100),
            batch_size=i32(100),
            topics=(module.FetchTopic(topic_id=self.stack.topic_id, partitions=(partition,)),),
            forgotten_topics_data=(),
        )
        return self._call(address, request)

    def acknowledge(self, address: str, first: int, last: int) -> Any:
        module = kio_module(ApiKey.SHARE_ACKNOWLEDGE, 2)
        batch = module.AcknowledgementBatch(
            first_offset=i64(first), last_offset=i64(last), acknowledge_types=(i8(ACCEPT),)
        )
        partition = module.AcknowledgePartition(
            partition_index=i32(0), acknowledgement_batches=(batch,)
        )
        request = kio_request(
            ApiKey.SHARE_ACKNOWLEDGE,
            2,
            group_id=GROUP,
            member_id=self.member_id,
            share_session_epoch=i32(self._next_epoch(address)),
            is_renew_ack=False,
            topics=(
                module.AcknowledgeTopic(topic_id=self.stack.topic_id, partitions=(partition,)),
            ),
        )
        with KioConnection(address) as connection:
            return connection.call(request)


def _values(records: bytes) -> list[bytes]:
    values, batches = [], MemoryRecords(records)
    while batches.has_next():
        values += [record.value for record in batches.next_batch()]
    return values


def test_coordinators_of_every_key_type_are_the_proxys_ports(stack: Stack) -> None:
    keys = {
        0: GROUP,  # consumer, share and classic groups
        1: f"txn-{uuid.uuid4().hex[:8]}",  # transactions
        2: f"{GROUP}:{_kafka_uuid(stack.topic_id)}:0",  # share-partition state (KIP-932)
    }
    for key_type, key in keys.items():
        coordinator = _coordinator(stack.proxy.bootstrap, key_type, key)
        assert coordinator.key == key
        assert f"{coordinator.host}:{coordinator.port}" == stack.advertised[coordinator.node_id]
    brokers = {node.address() for node in stack.cluster.nodes}
    assert not brokers & set(stack.advertised.values())


def test_a_share_group_round_trip_names_only_the_proxy(stack: Stack) -> None:
    group = _coordinator(stack.proxy.bootstrap, 0, GROUP)
    with ShareMember(stack, f"{group.host}:{group.port}") as member:
        member.join()
        leader = stack.advertised[LEADER]
        member.fetch(leader, max_wait_ms=100)  # opens the share session, starts the partition

        producer = KafkaProducer(bootstrap_servers=stack.proxy.bootstrap, acks="all")
        sent = [f"shared-{n}".encode() for n in range(3)]
        for value in sent:
            producer.send(stack.topic, value, partition=0)
        producer.flush(timeout=30)
        producer.close()

        received: list[bytes] = []
        acquired: list[tuple[int, int]] = []
        deadline = time.monotonic() + WAIT_S
        while len(received) < len(sent):
            answer = member.fetch(leader, max_wait_ms=2000)
            assert answer.error_code == NONE, answer
            assert answer.node_endpoints == ()  # the leader answered: no hints
            (partition,) = answer.responses[0].partitions
            assert partition.error_code == NONE, partition
            received += _values(partition.records)
            acquired += [
                (int(a.first_offset), int(a.last_offset)) for a in partition.acquired_records
            ]
            assert time.monotonic() < deadline, f"received {received} of {sent}"
        assert received == sent

        first, last = acquired[0][0], acquired[-1][1]
        acknowledged = member.acknowledge(leader, first, last)
    assert acknowledged.error_code == NONE, acknowledged
    assert [p.error_code for p in acknowledged.responses[0].partitions] == [NONE]


def test_a_share_fetch_to_the_wrong_broker_points_at_the_proxy(stack: Stack) -> None:
    group = _coordinator(stack.proxy.bootstrap, 0, GROUP)
    other = next(node_id for node_id in stack.advertised if node_id != LEADER)
    with ShareMember(stack, f"{group.host}:{group.port}") as member:
        member.join()
        through = member.fetch(stack.advertised[other], max_wait_ms=100)
        # The same request straight to that broker names the leader's own address: the proxy
        # is what changes it.
        direct = member.fetch(stack.cluster.node(other).address(), max_wait_ms=100)
    (partition,) = through.responses[0].partitions
    assert partition.error_code == NOT_LEADER_OR_FOLLOWER
    assert partition.current_leader.leader_id == LEADER
    assert [(e.node_id, f"{e.host}:{e.port}") for e in through.node_endpoints] == [
        (LEADER, stack.advertised[LEADER])
    ]
    assert [(e.node_id, f"{e.host}:{e.port}") for e in direct.node_endpoints] == [
        (LEADER, stack.cluster.node(LEADER).address())
    ]
