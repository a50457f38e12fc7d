# Strategy: the test cluster is N independent Tansu processes sharing S3 storage; each one
# says it is node 111 and the only broker. To a client the set must look like ONE cluster of
# nodes 1..N, each reachable at its relay's address. This module is the sans-I/O half of the
# relay that does it: given a response frame (header + body, no size prefix) and the api key
# and version of its request, it returns the frame the client should see.
#
#   Metadata           brokers := nodes 1..N at their relays; controller := node 1; leader of
#                      partition p := (p mod N) + 1, replicas = isr = [leader], none offline.
#   FindCoordinator    every coordinator (v0-v3 single, v4+ batched) := one fixed node, so
#                      all group and transaction traffic goes to one Tansu process.
#   DescribeCluster    brokers := nodes 1..N; controller := node 1.
#   Produce v10+,      KIP-951 hints (current_leader, node_endpoints) and Fetch's
#   Fetch v11+         preferred_read_replica, when Tansu sets them, are mapped the same way.
#
# Everything else (and any of the above that comes out unchanged) is returned as the very
# same bytes. Only the codec in `wire` is used, so the fixture exercises nothing of proxy/.
#
# XXX: Tansu also advertises DescribeTopicPartitions (API 75, v0), whose response names
# partition leaders; `wire` cannot decode it, so it passes through naming node 111. Clients
# that use it (the Java admin client's describeTopics) would see that node id.
"""Rewrite the responses of N one-node Tansu brokers so they look like one N-node cluster."""

from __future__ import annotations

from dataclasses import dataclass

from wire.apis import ApiKey, response_header_version
from wire.codec import decode_response, encode
from wire.headers import parse_response_header
from wire.messages import (
    DescribeClusterResponse,
    FetchResponse,
    FindCoordinatorResponse,
    MetadataResponse,
    ProduceResponse,
)
from wire.messages.describe_cluster_response import DescribeClusterBroker
from wire.messages.fetch_response import NodeEndpoint as FetchNodeEndpoint
from wire.messages.metadata_response import MetadataResponseBroker
from wire.messages.produce_response import NodeEndpoint as ProduceNodeEndpoint

__all__ = ["REWRITTEN_APIS", "ClusterView", "NodeAddress", "rewrite_response"]

#: Responses this module may change; all others are forwarded without being looked at.
REWRITTEN_APIS = frozenset(
    {
        ApiKey.METADATA,
        ApiKey.FIND_COORDINATOR,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.PRODUCE,
        ApiKey.FETCH,
    }
)

#: First versions whose responses can carry KIP-951 leader hints.
_LEADER_HINTS_SINCE: dict[int, int] = {ApiKey.PRODUCE: 10, ApiKey.FETCH: 11}


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """One node of the fake cluster as clients see it: its id and its relay's address."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster the clients are shown: nodes (ids 1..N in order) and the coordinator.

    Why a fixed coordinator: Kafka has one coordinator per group, and a test of routing
    needs to know which node that is. Naming one node for every group and transaction also
    keeps their in-flight state (a JoinGroup Tansu is holding, say) in one process, although
    Tansu's S3-backed group state was seen to work across processes too.
    """

    nodes: tuple[NodeAddress, ...]
    coordinator_id: int = 1

    def __post_init__(self) -> None:
        ids = [node.node_id for node in self.nodes]
        if ids != list(range(1, len(ids) + 1)):
            raise ValueError(f"node ids must be 1..N in order, got {ids}")
        if not 1 <= self.coordinator_id <= len(ids):
            raise ValueError(f"coordinator {self.coordinator_id} is not one of the nodes")

    def leader_of(self, partition: int) -> int:
        """The node shown as leader of ``partition``: partitions are dealt round-robin."""
        return partition % len(self.nodes) + 1

    def node(self, node_id: int) -> NodeAddress:
        return self.nodes[node_id - 1]


def rewrite_response(
    api_key: int, api_version: int, response: bytes | bytearray | memoryview, view: ClusterView
) -> bytes | bytearray | memoryview:
    """The response frame the client should see (``response`` itself when unchanged).

    Args:
        api_key, api_version: from the request this frame answers.
        response: the frame without its size prefix: response header, then body.
        view: the cluster to show.

    Raises:
        wire.WireError: the response does not decode (the relay then drops the connection).
    """
    if api_key not in REWRITTEN_APIS:
        return response
    if api_key in _LEADER_HINTS_SINCE and api_version < _LEADER_HINTS_SINCE[api_key]:
        return response
    _, start = parse_response_header(response, response_header_version(api_key, api_version))
    message = decode_response(api_key, api_version, memoryview(response)[start:])
    changed: bool
    if isinstance(message, MetadataResponse):
        changed = _metadata(message, view)
    elif isinstance(message, FindCoordinatorResponse):
        changed = _find_coordinator(message, view)
    elif isinstance(message, DescribeClusterResponse):
        changed = _describe_cluster(message, view)
    elif isinstance(message, ProduceResponse):
        changed = _produce(message, view)
    elif isinstance(message, FetchResponse):
        changed = _fetch(message, view)
    else:  # pragma: no cover - REWRITTEN_APIS and the branches above list the same APIs
        raise AssertionError(f"no rewriter for api key {api_key}")
    if not changed:
        return response
    return bytes(memoryview(response)[:start]) + encode(message, api_version)


def _metadata(message: MetadataResponse, view: ClusterView) -> bool:
    message.brokers = [
        MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port) for n in view.nodes
    ]
    message.controller_id = 1
    for topic in message.topics:
        for partition in topic.partitions:
            if partition.leader_id < 0:
                continue  # no leader (an error): nothing to map
            leader = view.leader_of(partition.partition_index)
            partition.leader_id = leader
            partition.replica_nodes = [leader]
            partition.isr_nodes = [leader]
            partition.offline_replicas = []
    return True


def _find_coordinator(message: FindCoordinatorResponse, view: ClusterView) -> bool:
    coordinator = view.node(view.coordinator_id)
    if message.error_code == 0 and not message.coordinators:
        message.node_id, message.host, message.port = (
            coordinator.node_id,
            coordinator.host,
            coordinator.port,
        )
    for entry in message.coordinators:
        if entry.error_code == 0:
            entry.node_id, entry.host, entry.port = (
                coordinator.node_id,
                coordinator.host,
                coordinator.port,
            )
    return True


def _describe_cluster(message: DescribeClusterResponse, view: ClusterView) -> bool:
    message.brokers = [
        DescribeClusterBroker(broker_id=n.node_id, host=n.host, port=n.port) for n in view.nodes
    ]
    message.controller_id = 1
    return True


def _produce(message: ProduceResponse, view: ClusterView) -> bool:
    changed = False
    for topic in message.responses:
        for partition in topic.partition_responses:
            if partition.current_leader.leader_id >= 0:
                partition.current_leader.leader_id = view.leader_of(partition.index)
                changed = True
    if message.node_endpoints:
        message.node_endpoints = [
            ProduceNodeEndpoint(node_id=n.node_id, host=n.host, port=n.port) for n in view.nodes
        ]
        changed = True
    return changed


def _fetch(message: FetchResponse, view: ClusterView) -> bool:
    changed = False
    for topic in message.responses:
        for partition in topic.partitions:
            leader = view.leader_of(partition.partition_index)
            if partition.current_leader.leader_id >= 0:
                partition.current_leader.leader_id = leader
                changed = True
            if partition.preferred_read_replica >= 0:
                partition.preferred_read_replica = leader
                changed = True
    if message.node_endpoints:
        message.node_endpoints = [
            FetchNodeEndpoint(node_id=n.node_id, host=n.host, port=n.port) for n in view.nodes
        ]
        changed = True
    return changed
