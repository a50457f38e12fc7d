# Strategy: one long-poll per broker stands in for every fetch held on its partitions
# (DESIGN "The purgatory": waiting never occupies an upstream socket per client). It fetches
# every wanted partition at its known high watermark (v12, min_bytes 1, each with the leader
# epoch its fetches named, so a moved leadership fences the poll); each answer updates
# PartitionStates and wakes the fetches on what changed. A partition counts as covered from a
# poll's send until its answer is read.
#
# A poll waits as long as the longest max wait of the fetches it covers (at least
# watcher_max_wait_ms): idle consumers with a 5 s max wait cost the broker one poll per 5 s. A
# partition wanted while such a poll is out would not be covered until it returns, so a poll
# over everything wanted goes at once on a second connection (a broker answers one
# connection's requests in order: a second poll on the first would wait behind it). At most
# two are out; a partition stays covered until the last poll over it returns.
"""The per-broker upstream watcher: one long-poll over the union of held fetches' partitions."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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


@dataclass(slots=True, eq=False)
class _Poll:
    """A poll out on one of the watcher's channels, over ``keys``."""

    keys: frozenset[PartitionKey]
    ended: bool = False


class UpstreamWatcher:
    """Long-polls one broker for the partitions that held fetches wait on.

    Args:
        node_id: the broker.
        channels: its connections for the watcher (the second only for a poll that cannot
            wait for the first: see the module header; it connects on first use).
        states, names, purgatory: what the answers teach, and the held fetches they wake.
        max_wait_ms: the least a poll waits (watcher_max_wait_ms).
        metrics: polls are counted as upstream_fetches{kind="watcher"}.
    """

    def __init__(
        self,
        node_id: int,
        channels: tuple[BrokerChannel, BrokerChannel],
        states: PartitionStates,
        names: TopicNames,
        purgatory: Purgatory,
        max_wait_ms: int,
        metrics: Metrics,
    ) -> None:
        self.node_id = node_id
        self._channels = channels
        self._states = states
        self._names = names
        self._purgatory = purgatory
        self._max_wait_ms = max_wait_ms
        self._polls = metrics.upstream_fetches.labels("watcher")
        self._wanted = WantedPartitions(linger_ms=max_wait_ms)
        self._out: dict[int, _Poll] = {}  # by channel: the poll out on it
        self._turn = trio.Event()  # set when a poll ends or a partition is newly wanted

    @property
    def wanted(self) -> Iterable[PartitionKey]:
        """The partitions covered now (until their want and linger run out)."""
        return self._wanted

    def want(
        self, keys: list[PartitionKey], until_ms: int, epochs: Sequence[int] = (), wait_ms: int = 0
    ) -> None:
        """Cover ``keys`` until ``until_ms`` (plus one least wait of linger), polling each with
        the leader epoch its fetches named (``epochs``, by position), for as long as the
        longest ``wait_ms`` of them (see the module header)."""
        if self._wanted.want(keys, until_ms, epochs, wait_ms):
            self._turn.set()

    async def run(self) -> None:
        async with trio.open_nursery() as polls:
            while True:
                request, keys, wait_ms = self._next_poll(current_time_ms())
                if request is None:
                    await self._wanted.wait_for_more()
                    continue
                channel = self._free_channel()
                assert channel is not None  # (a poll is sent only when one is free)
                poll = self._out[channel] = _Poll(frozenset(keys))
                polls.start_soon(self._poll, channel, request, keys, wait_ms, poll)
                await self._next_turn(poll)

    async def _next_turn(self, poll: _Poll) -> None:
        """Wait until ``poll`` ends, or until a partition is wanted that no poll out covers
        while the other channel is free (a poll over everything wanted then goes on it)."""
        while not poll.ended:
            if self._free_channel() is not None and self._uncovered():
                return
            self._turn = trio.Event()
            await self._turn.wait()

    def _free_channel(self) -> int | None:
        return next((index for index in range(len(self._channels)) if index not in self._out),
                    None)  # fmt: skip

    def _uncovered(self) -> bool:
        """Whether a wanted partition whose end is known is in no poll out."""
        out = [poll.keys for poll in self._out.values()]
        states = self._states
        for key in self._wanted:
            state = states.get(key)
            known = state is not None and state.high_watermark >= 0
            if known and not any(key in keys for keys in out):
                return True
        return False

    async def _poll(
        self,
        channel: int,
        request: FetchRequest,
        keys: list[PartitionKey],
        wait_ms: int,
        poll: _Poll,
    ) -> None:
        """Send one poll on ``channel`` and learn from its answer."""
        try:
            sent_ms = current_time_ms()
            # Covered while the poll is out (see the module header).
            self._states.cover(keys, sent_ms + _HUNG_POLLS * wait_ms)
            self._polls.inc()
            try:
                response = await self._channels[channel].request(request, WATCH_VERSION)
            except UpstreamUnavailable as error:
                log.debug("watcher for broker %d: %s", self.node_id, error)
                self._lost(keys)
                await trio.sleep(_RETRY_S)
                return
            assert isinstance(response, FetchResponse)
            # Read: no longer covered by this poll; a poll still out, or the next, covers what
            # is still wanted.
            self._uncover_after(poll)
            now_ms = current_time_ms()
            changed = learn(FetchResults.of(response), self._states, self._names, now_ms)
            for key in changed:
                self._purgatory.check_and_complete(key)
            if response.error_code:
                self._states.uncover(keys)
                await trio.sleep(_RETRY_S)
            elif not changed and now_ms - sent_ms < wait_ms * _EARLY_FRACTION:
                await trio.sleep(_PAUSE_S)
        finally:
            poll.ended = True
            del self._out[channel]
            self._turn.set()

    def _uncover_after(self, poll: _Poll) -> None:
        """``poll`` was answered: its partitions that no other poll out covers are covered
        only until now."""
        others = [other.keys for other in self._out.values() if other is not poll]
        alone = [key for key in poll.keys if not any(key in keys for keys in others)]
        self._states.cover(alone, current_time_ms())

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

    def _next_poll(self, now_ms: int) -> tuple[FetchRequest | None, list[PartitionKey], int]:
        """The poll to send now, over every partition still wanted whose end is known, and how
        long it waits."""
        wanted = self._wanted
        wanted.expire(now_ms)
        topics: dict[str, FetchTopic] = {}
        keys = []
        wait_ms = self._max_wait_ms
        for key in wanted:
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
                    current_leader_epoch=wanted.epoch(key),
                    fetch_offset=state.high_watermark,
                    partition_max_bytes=1,
                )
            )
            keys.append(key)
            wait_ms = max(wait_ms, wanted.wait_ms(key))
        if not keys:
            return None, keys, wait_ms
        request = FetchRequest(
            max_wait_ms=wait_ms,
            min_bytes=1,
            max_bytes=1,
            session_id=0,
            session_epoch=-1,
            topics=list(topics.values()),
        )
        return request, keys, wait_ms
