# Strategy: one service per proxy owns what held requests share, and hands each client
# connection its face (`connect`: proxy/held/holds.py). What runs, in the server's services
# nursery:
#
#   HeldRequests.run()
#   ├── fetch purgatory clock      DelayedFetch: client fetches waiting for data
#   ├── produce purgatory clock    DelayedProduce: forwarded produces waiting for their answer
#   └── FetchPath.run              per broker, on first use: re-fetch channels and watcher
#                                  (proxy/held/fetch/brokers.py), and the partition-table sweep
#
# Whose identity reads (client_auth): the proxy's shares reads on the brokers' channels; the
# client's (passthrough) reads on its own connection and is answered only from what it read
# itself (proxy/held/fetch/refetch.py, proxy/held/fetch/planning.py).
"""The held-requests service: purgatories, the fetch path, produces, connections' faces."""

from __future__ import annotations

import trio

from proxy.config import Config
from proxy.held.client_upstream import ClientUpstream
from proxy.held.fetch.brokers import BrokerAddresses
from proxy.held.fetch.path import FetchPath
from proxy.held.holds import ConnectionHolds
from proxy.held.partition_state import PartitionStates
from proxy.held.produce import HeldProduces
from proxy.observability.metrics import Metrics
from proxy.primitives.memory import MemoryPool
from proxy.primitives.purgatory import Purgatory
from proxy.routing.rewrite import BrokerDirectory
from proxy.routing.topic_names import TopicNames
from proxy.upstream.dialer import Dialer

__all__ = ["HeldRequests"]


class HeldRequests:
    """Held fetches and produces of one proxy.

    Args:
        config: the [fetch], [purgatory] and [proxy] sections are read, and
            connections.upstream_answer_grace_ms.
        pool: the KIP-72 pool the upstream fetches' response budgets come from.
        metrics: purgatory and upstream-fetch series.
        names: topic id -> name, learnt from Metadata.
        brokers: where each broker is, for re-fetch channels and watchers.
        dialer: how those channels connect.

    Attributes:
        fetches, produces: the two purgatories.
        states: what the proxy knows of partitions.
    """

    def __init__(
        self,
        config: Config,
        pool: MemoryPool,
        metrics: Metrics,
        names: TopicNames,
        brokers: BrokerAddresses,
        dialer: Dialer,
    ) -> None:
        purgatory = config.purgatory
        wheel = {"tick_ms": purgatory.tick_ms, "wheel_size": purgatory.wheel_size,
                 "purge_interval": purgatory.purge_interval}  # fmt: skip
        self.fetches = Purgatory(**wheel)
        self.produces = Purgatory(**wheel)
        self.states = states = PartitionStates()
        self._pool = pool
        self._metrics = metrics
        self._passthrough = config.proxy.client_auth == "passthrough"
        self._fetch_path = FetchPath(config, pool, metrics, self.fetches, states, names, brokers,
                                     dialer)  # fmt: skip
        self._produce_side = HeldProduces(self.produces, self.fetches, states, names)
        metrics.attach_purgatory("fetch", self.fetches)
        metrics.attach_purgatory("produce", self.produces)
        metrics.attach_partition_states(states)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the purgatories' clocks and the brokers' resources (channels, watchers, the
        partition-state sweep)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.fetches.run)
            await nursery.start(self.produces.run)
            await nursery.start(self._fetch_path.run)
            task_status.started()

    def connect(
        self,
        node_id: int | None,
        upstream: ClientUpstream,
        wake: trio.lowlevel.ParkingLot,
        brokers: BrokerDirectory,
    ) -> ConnectionHolds:
        """The face of a client connection on ``node_id``'s port (None: bootstrap) whose own
        upstream connection is ``upstream`` and whose response pump parks on ``wake``."""
        return ConnectionHolds(self._fetch_path, self._produce_side, node_id, upstream, wake,
                               pool=self._pool, brokers=brokers, metrics=self._metrics,
                               passthrough=self._passthrough)  # fmt: skip
