# Strategy: Kafka's replication test aims its faults at a role, not a node: "the leader of
# partition 0", "the controller"; the transactions test at the transaction coordinator. Which
# node holds a role changes with every fault, so each is asked of the cluster right before the
# fault, straight from a live node (never through the proxy, which is under test):
#
#   leaders             a topic's partitions' leaders and in-sync replicas (one Metadata v12)
#   active_controller   the KRaft quorum's leader (DescribeQuorum, which a broker forwards to
#                       the controllers; kio encodes it, wire/ does not look inside it)
#   coordinator         the transaction (or group) coordinator of a key (FindCoordinator v4)
#   under_replicated    partitions whose ISR is short of their replicas, over every topic:
#                       Kafka's `await_no_under_replicated_partitions` between bounces
#   elect_preferred     a preferred-leader election (Admin API), so that every fault starts
#                       from the same, balanced leadership on every route's topic
#
# A node that does not answer (killed, frozen) is skipped for the next address.
"""Who leads what in an Apache Kafka cluster, asked of the cluster itself."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.kio_client import KioConnection, kio_module, kio_request
from tests.support.wire_socket import Closed, WireSocket
from wire.messages.find_coordinator_request import FindCoordinatorRequest
from wire.messages.find_coordinator_response import FindCoordinatorResponse
from wire.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from wire.messages.metadata_response import MetadataResponse

__all__ = [
    "Leadership",
    "active_controller",
    "coordinator",
    "elect_preferred",
    "leaders",
    "under_replicated",
    "wait_until",
]

_TIMEOUT_S = 3.0
_METADATA_VERSION = 12
_FIND_COORDINATOR_VERSION = 4
_DESCRIBE_QUORUM = 55
_TRANSACTION = 1  # FindCoordinator key_type
T = TypeVar("T")


@dataclass(frozen=True)
class Leadership:
    """One partition: its leader (-1: none), in-sync replicas and replicas."""

    leader: int
    isr: frozenset[int]
    replicas: tuple[int, ...]


def _first_answer(bootstrap: str, ask: Callable[[str], T]) -> T:
    problems = []
    for address in bootstrap.split(","):
        try:
            return ask(address)
        except (OSError, Closed, AssertionError) as error:
            problems.append(f"{address}: {error!r}")
    raise AssertionError(f"no node of {bootstrap} answered: {problems}")


def _metadata(address: str, topics: Sequence[str] | None) -> MetadataResponse:
    wanted = None if topics is None else [MetadataRequestTopic(name=t) for t in topics]
    with WireSocket(address, timeout_s=_TIMEOUT_S) as conn:
        answer, _ = conn.call(
            MetadataRequest(topics=wanted, allow_auto_topic_creation=False),
            _METADATA_VERSION,
            timeout_s=_TIMEOUT_S,
        )
    assert isinstance(answer, MetadataResponse)
    return answer


def leaders(bootstrap: str, topic: str) -> dict[int, Leadership]:
    """``topic``'s partitions by index, as the first node of ``bootstrap`` that answers says."""
    answer = _first_answer(bootstrap, lambda a: _metadata(a, [topic]))
    (found,) = answer.topics
    assert found.error_code == 0, f"{topic}: error {found.error_code}"
    return {
        p.partition_index: Leadership(p.leader_id, frozenset(p.isr_nodes), tuple(p.replica_nodes))
        for p in found.partitions
    }


def under_replicated(bootstrap: str) -> list[str]:
    """Every partition of every topic (internal ones too) whose ISR lacks a replica."""
    answer = _first_answer(bootstrap, lambda a: _metadata(a, None))
    return [
        f"{t.name}-{p.partition_index} isr {sorted(p.isr_nodes)}"
        for t in answer.topics
        for p in t.partitions
        if set(p.isr_nodes) != set(p.replica_nodes) or p.leader_id < 0
    ]


def active_controller(bootstrap: str) -> int:
    """The node id of the KRaft quorum's leader (the active controller)."""

    def ask(address: str) -> int:
        schema = kio_module(_DESCRIBE_QUORUM, 2)
        wanted = schema.TopicData(
            topic_name="__cluster_metadata", partitions=(schema.PartitionData(partition_index=0),)
        )
        with KioConnection(address, timeout_s=_TIMEOUT_S) as conn:
            answer = conn.call(kio_request(_DESCRIBE_QUORUM, 2, topics=(wanted,)))
        assert answer.error_code == 0, f"DescribeQuorum error {answer.error_code}"
        partition = answer.topics[0].partitions[0]
        assert partition.error_code == 0 and partition.leader_id >= 0, partition
        return int(partition.leader_id)

    return _first_answer(bootstrap, ask)


def coordinator(bootstrap: str, key: str, key_type: int = _TRANSACTION) -> int:
    """The node that coordinates ``key`` (a transactional id by default; 0: a group)."""

    def ask(address: str) -> int:
        request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
        with WireSocket(address, timeout_s=_TIMEOUT_S) as conn:
            answer, _ = conn.call(request, _FIND_COORDINATOR_VERSION, timeout_s=_TIMEOUT_S)
        assert isinstance(answer, FindCoordinatorResponse)
        (found,) = answer.coordinators
        assert found.error_code == 0, f"FindCoordinator {key}: error {found.error_code}"
        return found.node_id

    return _first_answer(bootstrap, ask)


def elect_preferred(bootstrap: str, topic: str, partitions: int) -> None:
    """Ask for a preferred-leader election of ``topic``'s partitions (one already led by its
    preferred replica is answered ELECTION_NOT_NEEDED, which is fine)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    future = admin.elect_leaders(ElectionType.PREFERRED, wanted)
    future.result(timeout=30)  # per-partition errors are in the result, not raised


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Hang guard: poll ``condition`` every 0.2 s; its seconds waited, or AssertionError."""
    started = time.monotonic()
    while True:
        try:
            if condition():
                return time.monotonic() - started
        except AssertionError:  # no node answered yet (all restarting)
            pass
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.2)
