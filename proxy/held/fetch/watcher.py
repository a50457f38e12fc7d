# Strategy: one long-poll per broker stands in for every fetch held on its partitions
# (DESIGN "The purgatory": waiting never occupies an upstream socket per client). It fetches
# every wanted partition at its known high watermark (v12, min_bytes 1, watcher_max_wait_ms,
# each with the leader epoch its fetches named, so a moved leadership fences the poll); each
# answer updates PartitionStates and wakes the fetches on what changed. A partition counts as
# covered from a poll's send until its answer is read.
"""The per-broker upstream watcher: one long-poll over the union of held fetches' partitions."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import trio

from proxy.errors import UpstreamUnavailable
from proxy.held.fetch.answer import FetchResults, learn
from proxy.held.fetch.wanted import WantedPartitions
from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.observability.metrics import Metrics
from proxy.primitives.purgatory import Purgatory, current_time_ms
from proxy.routing.topic_names import TopicNames
from proxy.upstream.broker_channel import BrokerChannel
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.fetch_response import FetchResponse

__all__ = ["WATCH_VERSION", "UpstreamWatcher"]

log = logging.getLogger("purgatory_proxy.watcher")

#: Fetch version of the watcher's polls (topic names; the last one before topic ids).
WATCH_VERSION = 12
#: A poll answered this much sooner than its max wait with nothing new is a broker that does
#: not long-poll; the watcher then pauses instead of spinning.
_EARLY_FRACTION = 0.5
_PAUSE_S = 0.05
_RETRY_S = 0.5
#: Max waits after which a poll still unanswered no longer covers its partitions (a broker or
#: connection that hangs): their fetches ask the broker again.
_HUNG_POLLS = 10


class UpstreamWatcher:
    """Long-polls one broker for the partitions that held fetches wait on."""

    def __init__(
        self,
        node_id: int,
        channel: BrokerChannel,
        states: PartitionStates,
        names: TopicNames,
        purgatory: Purgatory,
        max_wait_ms: int,
        metrics: Metrics,
    ) -> None:
        self.node_id = node_id
        self._channel = channel
        self._states = states
        self._names = names
        self._purgatory = purgatory
        self._max_wait_ms = max_wait_ms
        self._polls = metrics.upstream_fetches.labels("watcher")
        self._wanted = WantedPartitions(linger_ms=max_wait_ms)

    @property
    def wanted(self) -> Iterable[PartitionKey]:
        """The partitions covered now (until their want and linger run out)."""
        return self._wanted

    def want(self, keys: list[PartitionKey], until_ms: int, epochs: Sequence[int] = ()) -> None:
        """Cover ``keys`` until ``until_ms`` (plus one max wait of linger), polling each with
        the leader epoch its fetches named (``epochs``, by position; see the module header)."""
        self._wanted.want(keys, until_ms, epochs)

    async def run(self) -> None:
        while True:
            request, keys = self._next_poll(current_time_ms())
            if request is None:
                await self._wanted.wait_for_more()
                continue
            sent_ms = current_time_ms()
            # Covered while the poll is out (see the module header).
            self._states.cover(keys, sent_ms + _HUNG_POLLS * self._max_wait_ms)
            self._polls.inc()
            try:
                response = await self._channel.request(request, WATCH_VERSION)
            except UpstreamUnavailable as error:
                log.debug("watcher for broker %d: %s", self.node_id, error)
                self._lost(keys)
                await trio.sleep(_RETRY_S)
                continue
            assert isinstance(response, FetchResponse)
            # Read: no longer covered by this poll; the next one covers what is still wanted.
            self._states.cover(keys, current_time_ms())
            changed = learn(FetchResults.of(response), self._states, self._names, current_time_ms())
            for key in changed:
                self._purgatory.check_and_complete(key)
            if response.error_code:
                self._states.uncover(keys)
                await trio.sleep(_RETRY_S)
            elif not changed and current_time_ms() - sent_ms < self._max_wait_ms * _EARLY_FRACTION:
                await trio.sleep(_PAUSE_S)

    def _lost(self, keys: list[PartitionKey]) -> None:
        """The poll over ``keys`` failed: the broker died or dropped the connection. What
        the proxy knows of them is no longer current, and the fetches waiting on them are
        woken to read the broker themselves: a dead broker then closes their clients'
        connections at once (refetch.broker_gone), as the broker's own connections closed."""
        states, purgatory = self._states, self._purgatory
        states.uncover(keys)
        for key in keys:
            states.invalidate(key)
            purgatory.check_and_complete(key)

    def _next_poll(self, now_ms: int) -> tuple[FetchRequest | None, list[PartitionKey]]:
        """The poll to send now, over every partition still wanted whose end is known."""
        self._wanted.expire(now_ms)
        topics: dict[str, FetchTopic] = {}
        keys = []
        for key in self._wanted:
            state = self._states.get(key)
            if state is None or state.high_watermark < 0:
                continue
            name = key[0]
            assert isinstance(name, str)
            topic = topics.get(name)
            if topic is None:
                topic = topics[name] = FetchTopic(topic=name)
            topic.partitions.append(
                FetchPartition(
                    partition=key[1],
                    current_leader_epoch=self._wanted.epoch(key),
                    fetch_offset=state.high_watermark,
                    partition_max_bytes=1,
                )
            )
            keys.append(key)
        if not keys:
            return None, keys
        request = FetchRequest(
            max_wait_ms=self._max_wait_ms,
            min_bytes=1,
            max_bytes=1,
            session_id=0,
            session_epoch=-1,
            topics=list(topics.values()),
        )
        return request, keys
