# Strategy: what the proxy knows of each partition's log end (high watermark, last stable offset,
# log start, from every upstream answer), so a held fetch can tell "nothing new" without asking the
# broker, trusted only while a watcher covers the partition; a produce through the proxy makes it
# stale. When the readable end last moved tells a busy partition (news twice within a short window)
# from an idle one woken now and then. Keys are (topic name, partition); v13+ topic ids are named by
# proxy/routing/topic_names.py. The table is bounded: entries nothing names are swept.
"""Known log ends of partitions."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from proxy.routing.topic_names import PartitionKey

__all__ = [
    "DEFAULT_SWEEP_FLOOR",
    "READ_COMMITTED",
    "PartitionKey",
    "PartitionState",
    "PartitionStates",
    "readable_end",
]

READ_COMMITTED = 1


def readable_end(high_watermark: int, last_stable_offset: int, isolation_level: int) -> int:
    """Where a consumer's readable data ends: read_committed stops at the last stable offset."""
    if isolation_level == READ_COMMITTED and last_stable_offset >= 0:
        return last_stable_offset
    return high_watermark


@dataclass(slots=True)
class PartitionState:
    """The last answer the broker gave about one partition."""

    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    error_code: int = 0
    #: A produce landed since the last answer: the log end is unknown.
    stale: bool = True
    #: The watcher's long-poll covers this partition until then (proxy clock, ms).
    watched_until_ms: int = -1
    #: The sweep generation of the last answer (PartitionStates.evict keeps the current one).
    generation: int = 0
    #: When an answer last showed the readable end moved, and the time before (proxy clock, ms;
    #: -1: not since the proxy first learnt it).
    news_ms: int = -1
    earlier_news_ms: int = -1

    def available(self, isolation_level: int) -> int:
        """The offset a consumer with this isolation level may read up to (exclusive)."""
        return readable_end(self.high_watermark, self.last_stable_offset, isolation_level)


#: Entries below which the table is never swept for its size (a few MiB at most).
DEFAULT_SWEEP_FLOOR = 10_000


class PartitionStates:
    """What the proxy knows of the partitions it has fetched from, by :data:`PartitionKey`,
    for those something still names: a held fetch, a fetch session, a watcher's wanted set.

    Args:
        sweep_floor: the size below which ``crowded`` is never true.
    """

    def __init__(self, sweep_floor: int = DEFAULT_SWEEP_FLOOR) -> None:
        self._states: dict[PartitionKey, PartitionState] = {}
        self._sweep_floor = sweep_floor
        self._sweep_at = sweep_floor
        self._generation = 0
        self._added = 0  # entries created since the last sweep
        self._kept_young = 0  # entries the last sweep kept only because they were new
        #: Entries evicted so far.
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._states)

    @property
    def crowded(self) -> bool:
        """Whether the table has grown enough since the last sweep to sweep again: it holds
        ``sweep_floor`` entries, or twice what the last sweep kept named besides what it kept
        for being new (so sweeps cost O(1) per entry added). A state learnt since the last
        sweep is always kept: an entry nobody names lives at most two sweeps."""
        return len(self._states) >= self._sweep_at

    @property
    def sweep_due(self) -> bool:
        """Whether a sweep may find something to evict: entries were added since the last
        one, or it kept some only because they were new."""
        return bool(self._added or self._kept_young)

    def evict(self, named: Container[object]) -> int:
        """Forget every partition not in ``named`` and not learnt since the last sweep; how
        many were forgotten. The survivors are the old generation from now on."""
        generation, kept, young = self._generation, {}, 0
        for key, state in self._states.items():
            if key in named:
                kept[key] = state
            elif state.generation == generation:
                kept[key] = state
                young += 1
        evicted = len(self._states) - len(kept)
        self._states = kept
        self._generation = generation + 1
        # Room for what is named to double, besides the new entries the next sweep forgets.
        self._sweep_at = max(self._sweep_floor, 2 * (len(kept) - young)) + young
        self._added, self._kept_young = 0, young
        self.evicted += evicted
        return evicted

    def get(self, key: PartitionKey) -> PartitionState | None:
        return self._states.get(key)

    def learn(
        self,
        key: PartitionKey,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        error_code: int,
        now_ms: int = -1,
    ) -> bool:
        """Record a broker's answer (read at ``now_ms``); True if it tells a waiting fetch
        something new (the log end moved, an error appeared, or the partition had been
        stale)."""
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = PartitionState()
            self._added += 1
        elif high_watermark > state.high_watermark >= 0 or (
            last_stable_offset > state.last_stable_offset >= 0
        ):
            state.earlier_news_ms, state.news_ms = state.news_ms, now_ms
        state.generation = self._generation
        changed = (
            state.stale
            or error_code != state.error_code
            or high_watermark != state.high_watermark
            or last_stable_offset != state.last_stable_offset
            or log_start_offset != state.log_start_offset
        )
        state.high_watermark = high_watermark
        state.last_stable_offset = last_stable_offset
        state.log_start_offset = log_start_offset
        state.error_code = error_code
        state.stale = False
        return changed

    def invalidate(self, key: PartitionKey) -> None:
        """A produce landed on ``key``: its log end is no longer known."""
        state = self._states.get(key)
        if state is not None:
            state.stale = True

    def cover(self, keys: list[PartitionKey], until_ms: int) -> None:
        """What the proxy knows of ``keys`` is current until ``until_ms`` (a watcher's poll
        is out for them, or was just read)."""
        for key in keys:
            state = self._states.get(key)
            if state is not None:
                state.watched_until_ms = until_ms

    def uncover(self, keys: list[PartitionKey]) -> None:
        """A watcher's poll failed or left ``keys`` out: what the proxy knows of them may be
        old, so fetches must ask the broker (no longer fresh)."""
        self.cover(keys, -1)

    def settle(self, key: PartitionKey) -> None:
        """The broker was asked about ``key`` and said nothing: no longer stale."""
        state = self._states.get(key)
        if state is not None:
            state.stale = False

    def busy(self, key: PartitionKey, now_ms: int, window_ms: int) -> bool:
        """Whether the readable end of ``key`` moved twice within ``window_ms`` before
        ``now_ms``: records keep coming (not one now and then)."""
        state = self._states.get(key)
        return (
            state is not None
            and state.earlier_news_ms >= 0
            and (now_ms - state.earlier_news_ms <= window_ms)
        )

    def nothing_new(
        self, key: PartitionKey, fetch_offset: int, isolation: int, now_ms: int
    ) -> bool:
        """True only when a fetch at ``fetch_offset`` is known to find no records right now:
        the watcher covers the partition, no produce made it stale, no error, and the offset
        sits exactly at the readable end (an offset past it is out of range: the broker must
        say so)."""
        state = self._states.get(key)
        return (
            state is not None
            and not state.stale
            and state.error_code == 0
            and state.watched_until_ms >= now_ms
            and fetch_offset == state.available(isolation)
            and fetch_offset >= state.log_start_offset
        )
