# Strategy: what the held path keeps per upstream broker is started on first use and lives as long
# as the proxy: the broker's fetch sessions (clients' sessions are the proxy's), its re-fetch
# channels, and its watcher. The partition-state sweep lives here too: what it keeps is what
# these (and the held fetches) still name.
"""Per-broker resources of the held path: sessions, re-fetch channels, watchers."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Protocol

import trio

from proxy.address import Address
from proxy.config import FetchSection
from proxy.held.fetch.answer import canonical
from proxy.held.fetch.offset_watcher import OffsetWatcher
from proxy.held.fetch.session import FetchSessionCache
from proxy.held.fetch.watcher import UpstreamWatcher
from proxy.held.partition_state import PartitionStates
from proxy.observability.metrics import Metrics
from proxy.primitives.purgatory import Purgatory
from proxy.routing.topic_names import TopicNames
from proxy.upstream.broker_channel import BrokerChannel
from proxy.upstream.dialer import Dialer

__all__ = ["BrokerAddresses", "BrokerResources"]

log = logging.getLogger("purgatory_proxy.held.service")

#: Connections per broker for re-fetches after wake-ups.
_REFETCH_CHANNELS = 4
#: How often the partition-state table is swept while it may hold partitions nothing names
#: (proxy/held/partition_state.py): such an entry lives at most two periods.
_SWEEP_INTERVAL_S = 10.0


class BrokerAddresses(Protocol):
    """Where each upstream broker is (proxy/routing/table.Routing provides it)."""

    def upstream_of(self, node_id: int) -> Address | None: ...


class BrokerResources:
    """The held path's resources per broker, started on first use in the service's nursery.

    Args:
        brokers: where each broker is.
        dialer: how the channels connect (the proxy's identity).
        states, names, fetches: the knowledge the watchers keep and the held fetches they wake.
        settings: the [fetch] section.
        passthrough: clients read with their own identity: watchers ask ListOffsets only.
        metrics: watcher series.
    """

    def __init__(
        self,
        brokers: BrokerAddresses,
        dialer: Dialer,
        states: PartitionStates,
        names: TopicNames,
        fetches: Purgatory,
        settings: FetchSection,
        metrics: Metrics,
        *,
        passthrough: bool,
    ) -> None:
        self._brokers = brokers
        self._dialer = dialer
        self._states = states
        self._names = names
        self._fetches = fetches
        self._settings = settings
        self._metrics = metrics
        self._passthrough = passthrough
        self._sessions: dict[int, FetchSessionCache] = {}
        self._refetch_channels: dict[int, list[BrokerChannel]] = {}
        self._watchers: dict[int, UpstreamWatcher | OffsetWatcher] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the channels and watchers started from now on, and sweep the partition table."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(_SWEEP_INTERVAL_S)
                if self._states.sweep_due:
                    self.sweep()

    def sessions(self, node_id: int) -> FetchSessionCache:
        """The broker's fetch sessions (made on first use)."""
        cache = self._sessions.get(node_id)
        if cache is None:
            cache = self._sessions[node_id] = FetchSessionCache(self._settings.session_cache_size)
        return cache

    def known_sessions(self, node_id: int) -> FetchSessionCache | None:
        """The broker's fetch sessions, if any fetch made them."""
        return self._sessions.get(node_id)

    def refetch_channel(self, node_id: int) -> BrokerChannel:
        """One of the broker's re-fetch channels, in turn: a broker answers a connection in
        order, so a re-fetch that the broker keeps (up to immediate_max_wait_ms) delays only
        the re-fetches queued behind it on the same channel."""
        channels = self._refetch_channels.get(node_id)
        if channels is None:
            channels = self._refetch_channels[node_id] = [
                self._channel(node_id) for _ in range(_REFETCH_CHANNELS)
            ]
        channels.append(channels.pop(0))
        return channels[0]

    def watcher(self, node_id: int) -> UpstreamWatcher | OffsetWatcher:
        """The broker's watcher: a Fetch long-poll, or in passthrough ListOffsets only (the
        proxy identity learns offsets, never records)."""
        watcher = self._watchers.get(node_id)
        if watcher is None:
            settings = self._settings
            shared = (self._states, self._names, self._fetches)
            if self._passthrough:
                interval_ms = settings.offset_watch_interval_ms
                watcher = OffsetWatcher(node_id, self._channel(node_id), *shared, interval_ms,
                                        self._metrics)  # fmt: skip
            else:
                channels = (self._channel(node_id), self._channel(node_id))
                max_wait_ms = settings.watcher_max_wait_ms
                watcher = UpstreamWatcher(node_id, channels, *shared, max_wait_ms, self._metrics)
            self._watchers[node_id] = watcher
            assert self._nursery is not None
            self._nursery.start_soon(watcher.run)
        return watcher

    def _channel(self, node_id: int) -> BrokerChannel:
        address = self._brokers.upstream_of(node_id)
        if address is None or self._nursery is None:
            raise RuntimeError(f"no upstream address known for broker {node_id}")
        return BrokerChannel(address, self._nursery, dialer=self._dialer)

    def sweep(self) -> None:
        """Forget what the proxy knows of partitions no held fetch, fetch session or watcher
        names (proxy/held/partition_state.py). O(table + sessions' partitions), amortised
        over the entries added since the last sweep."""
        names = self._names
        named: set[Hashable] = set(self._fetches.watched_keys())
        for cache in self._sessions.values():
            for session in cache:
                named.update(canonical(key, names) for key in session.partitions)
        for watcher in self._watchers.values():
            named.update(watcher.wanted)
        evicted = self._states.evict(named)
        if evicted:
            log.debug("forgot %d partitions nothing names; %d known", evicted, len(self._states))
