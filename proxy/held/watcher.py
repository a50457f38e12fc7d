# Strategy: one long-poll per broker stands in for every fetch held for that broker's partitions
# (DESIGN "The purgatory": waiting never occupies an upstream socket per client).
#
# Held fetches declare the partitions they wait on (`want`, until their deadline plus a linger,
# so a consumer's next fetch finds the partition still covered). The watcher fetches all of them
# at their known high watermark, sessionless, with min_bytes 1 and max_wait watcher_max_wait_ms:
# the broker answers when any of them grows, or at the deadline. Each answer goes into the
# PartitionStates; a partition whose state changed gets `check_and_complete`, which wakes the
# fetches waiting on it. While a poll covering a partition is out, its state counts as fresh
# (`watched_until_ms`), which is what lets a fetch at the known end skip the broker entirely.
#
# Coverage lasts from a poll's send until its answer has been read and the next poll sent (no
# await between the two), not for a fixed time: the broker answers a poll as soon as a
# partition grows, so while one is out any news is learnt as soon as the proxy reads it, and a
# fetch held meanwhile is woken then, however busy the proxy's loop is. (Measured at 10,000
# idle consumers: with the loop saturated the answers were read 0.5-1.4 s after their send, and
# a fixed 2 x max wait let ~15 % of the fetches lose their cover and be planned and read
# upstream the slow way, adding load to a loop that had none to spare.) A poll out for
# `_HUNG_POLLS` max waits is taken as lost; a failed one uncovers at once.
#
# The watcher fetches by topic name at one fixed version (v12: names, flexible, last stable
# offset and log start offset); partitions known only by topic id are not watched (their held
# fetches still wake on produces through the proxy and on their deadline).
#
# Each partition is polled with the leader epoch the fetches waiting on it named. Since Fetch
# v11 (KIP-392) a follower serves a consumer's fetch that names no epoch, so a poll without one
# would never notice that the broker lost the partition's leadership, and a fetch held on it
# would be answered "nothing new" at its max wait (Kafka answers it FENCED_LEADER_EPOCH at once,
# with the new leader). With the epoch, the broker fences the poll; the error wakes the held
# fetches, whose re-fetch with their own epoch gets the broker's answer to pass on.
#
# A poll only covers the partitions wanted when it was sent: a partition wanted later is added
# to the next poll, at most one max wait later. The broker answers one connection's requests in
# order, so the watcher has a BrokerChannel of its own.
"""The per-broker upstream watcher: one long-poll over the union of held fetches' partitions."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import trio

from proxy.errors import UpstreamUnavailable
from proxy.held.fetch_answer import FetchResults, learn
from proxy.held.partition_state import PartitionKey, PartitionStates, TopicNames
from proxy.held.wanted import WantedPartitions
from proxy.metrics import Metrics
from proxy.purgatory import Purgatory, current_time_ms
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
            changed = learn(FetchResults.of(response), self._states, self._names)
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
        connections at once (service.py), as the broker's own connections closed."""
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
