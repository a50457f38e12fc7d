"""The client matrix through the proxy in front of a 3-node cluster.

Same drivers and checks as test_matrix_proxy.py, but upstream is tests/support/cluster.py
(three Tansu processes on shared storage presented as nodes 1..3, partition leaders dealt
over them, node 2 coordinating groups), so every client must follow the proxy's per-broker
ports to three different brokers and to a coordinator that is not the bootstrap node.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat import CLIENTS, roundtrip_and_check
from tests.support.cluster import Cluster, running_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster(3, coordinator=2) as running:
        yield running


@pytest.fixture(scope="module")
def cluster_proxy(cluster: Cluster) -> Iterator[ProxyProcess]:
    with running_proxy(cluster.bootstrap) as proxy:
        yield proxy


@pytest.mark.parametrize("client", CLIENTS)
async def test_roundtrip_through_proxy_to_three_brokers(
    cluster: Cluster, cluster_proxy: ProxyProcess, client: str
) -> None:
    before = {node.node_id: cluster.request_counts(node.node_id) for node in cluster.nodes}
    result, problems = await trio.to_thread.run_sync(
        roundtrip_and_check, client, cluster_proxy.bootstrap, cluster.bootstrap
    )
    assert problems == []
    assert len(result.report.consumed) == 1000
    for node in cluster.nodes:
        produced = cluster.request_counts(node.node_id).get("Produce", 0)
        assert produced > before[node.node_id].get("Produce", 0), node
    assert cluster_proxy.alive()
