"""The client matrix through the proxy in front of a three-node Apache Kafka.

Same drivers and checks as test_matrix_proxy.py, but upstream is the session's three-node
cluster (replication factor 3, partition leaders spread over the nodes), so every client must
follow the proxy's per-broker ports to three different brokers and to its group's coordinator.
"""

from __future__ import annotations

import pytest
import trio

from testbed.kafka_cluster import KafkaCluster
from testbed.proxy_process import ProxyProcess
from tests.compat import CLIENTS, roundtrip_and_check


@pytest.mark.parametrize("client", CLIENTS)
async def test_roundtrip_through_proxy_to_three_brokers(
    kafka_cluster: KafkaCluster, cluster_proxy: ProxyProcess, client: str
) -> None:
    cluster = kafka_cluster
    before = {node.node_id: cluster.request_counts(node.node_id) for node in cluster.nodes}
    result, problems = await trio.to_thread.run_sync(
        roundtrip_and_check, client, cluster_proxy.bootstrap, cluster.bootstrap()
    )
    assert problems == []
    assert len(result.report.consumed) == 1000
    for node in cluster.nodes:
        produced = cluster.request_counts(node.node_id).get("Produce", 0)
        assert produced > before[node.node_id].get("Produce", 0), node
    assert cluster_proxy.alive()
