# Strategy: in passthrough the proxy's identity may learn offsets, never records, so this
# watcher polls ListOffsets (latest) for every wanted partition of its broker, once per
# [fetch] offset_watch_interval_ms, and is only a change detector: an answer that differs
# from its last one, or passes the high watermark a Fetch taught, marks the partition stale
# and wakes its held fetches, which re-fetch with their own identity. Its answers are never
# written into PartitionStates (Tansu's latest offset is not the high watermark), and a
# partition counts as covered only until the poll's send time + the interval.
"""The per-broker offset watcher: wakes held fetches from ListOffsets answers, never records."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import trio

from proxy.errors import UpstreamUnavailable
from proxy.held.fetch.wanted import WantedPartitions
from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.observability.metrics import Metrics
from proxy.primitives.purgatory import Purgatory, current_time_ms
from proxy.routing.topic_names import TopicNames
from proxy.upstream.broker_channel import BrokerChannel
from wire.errors import WireError
from wire.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from wire.messages.list_offsets_response import ListOffsetsResponse

__all__ = ["LATEST", "LIST_OFFSETS_VERSION", "OffsetWatcher"]

log = logging.getLogger("purgatory_proxy.offset_watcher")

#: ListOffsets version of the polls: v6, the first flexible one (Kafka 2.8+; the Fetch
#: watcher's v12 needs 2.7+), answered by Tansu 0.6 (v0-v9). Later versions only add
#: timestamp lookups a latest-offset query does not use (max timestamp, tiered storage,
#: a remote-storage timeout).
LIST_OFFSETS_VERSION = 6
#: ListOffsets timestamp meaning "the end of the log" (the high watermark on Kafka).
LATEST = -1
#: A consumer's replica id (a broker id would make Kafka answer the log end offset instead).
_CONSUMER = -1
_RETRY_S = 0.5

#: This watcher's previous answer for a partition: (error code, offset).
_Answer = tuple[int, int]


class OffsetWatcher:
    """Polls one broker's latest offsets for the partitions held fetches wait on, and wakes
    those fetches when an answer is news (see the module's strategy).

    Args:
        node_id: the broker.
        channel: a channel of the watcher's own to that broker.
        states: the proxy's knowledge of partitions (read; marked stale and fresh).
        names: topic id -> name (unused by the polls, which go by name; kept so the
            constructor matches UpstreamWatcher's).
        purgatory: the fetch purgatory, whose operations on news keys are checked.
        interval_ms: time between the sends of two polls, and how long an answer with no
            news keeps a partition fresh.
        metrics: ListOffsets polls are counted as upstream_fetches_total{kind="offsets"}.
    """

    def __init__(
        self,
        node_id: int,
        channel: BrokerChannel,
        states: PartitionStates,
        names: TopicNames,
        purgatory: Purgatory,
        interval_ms: int,
        metrics: Metrics,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, not {interval_ms}")
        self.node_id = node_id
        self._channel = channel
        self._states = states
        self._names = names
        self._purgatory = purgatory
        self._interval_ms = interval_ms
        self._polls = metrics.upstream_fetches.labels("offsets")
        self._wanted = WantedPartitions(linger_ms=interval_ms)
        self._answers: dict[PartitionKey, _Answer] = {}

    @property
    def wanted(self) -> Iterable[PartitionKey]:
        """The partitions covered now (until their want and linger run out)."""
        return self._wanted

    def want(
        self, keys: list[PartitionKey], until_ms: int, epochs: Sequence[int] = (), wait_ms: int = 0
    ) -> None:
        """Cover ``keys`` until ``until_ms`` (plus one interval of linger, so a consumer's next
        fetch finds the partition still watched). Keys by topic id are ignored; so are
        ``epochs`` (ListOffsets is not fenced here) and ``wait_ms`` (polls go every interval)."""
        self._wanted.want(keys, until_ms)

    async def run(self) -> None:
        """Poll every interval_ms while anything is wanted; sleep while nothing is."""
        interval_s = self._interval_ms / 1000
        while True:
            request, keys = self._next_poll(current_time_ms())
            if request is None:
                await self._wanted.wait_for_more()
                continue
            sent_s, sent_ms = trio.current_time(), current_time_ms()
            self._polls.inc()
            try:
                response = await self._channel.request(request, LIST_OFFSETS_VERSION)
            except (UpstreamUnavailable, WireError) as error:
                self._states.uncover(keys)
                log.debug("offset watcher for broker %d: %s", self.node_id, error)
                await trio.sleep(max(_RETRY_S, interval_s))
                continue
            assert isinstance(response, ListOffsetsResponse)
            self._learn(response, keys, sent_ms)
            await trio.sleep_until(sent_s + interval_s)

    def _next_poll(self, now_ms: int) -> tuple[ListOffsetsRequest | None, list[PartitionKey]]:
        """The poll to send now, over every partition still wanted; expired wants (and their
        previous answers) are forgotten."""
        for key in self._wanted.expire(now_ms):
            self._answers.pop(key, None)
        topics: dict[str, ListOffsetsTopic] = {}
        keys = list(self._wanted)
        for name, index in keys:
            assert isinstance(name, str)
            topic = topics.get(name)
            if topic is None:
                topic = topics[name] = ListOffsetsTopic(name=name)
            topic.partitions.append(ListOffsetsPartition(partition_index=index, timestamp=LATEST))
        if not keys:
            return None, keys
        request = ListOffsetsRequest(
            replica_id=_CONSUMER, isolation_level=0, topics=list(topics.values())
        )
        return request, keys

    def _learn(self, response: ListOffsetsResponse, keys: list[PartitionKey], sent_ms: int) -> None:
        """Wake the fetches of every partition whose answer is news; mark the others fresh
        until ``sent_ms`` + interval. A partition the broker left out is uncovered."""
        answered: dict[PartitionKey, _Answer] = {}
        for topic in response.topics:
            for partition in topic.partitions:
                answered[topic.name, partition.partition_index] = (
                    partition.error_code,
                    partition.offset,
                )
        fresh_until = sent_ms + self._interval_ms
        states = self._states
        for key in keys:
            answer = answered.get(key)
            if answer is None:
                states.uncover([key])
                continue
            previous = self._answers.get(key)
            self._answers[key] = answer
            error_code, offset = answer
            state = states.get(key)
            if error_code:
                news = previous is not None and previous != answer
            else:
                news = (previous is not None and previous != answer) or (
                    state is not None
                    and not state.stale
                    and state.high_watermark >= 0
                    and offset > state.high_watermark
                )
            if news:
                states.invalidate(key)
                self._purgatory.check_and_complete(key)
            elif state is not None:
                state.watched_until_ms = -1 if error_code or state.stale else fresh_until
