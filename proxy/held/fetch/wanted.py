# Strategy: both per-broker watchers (the Fetch long-poll of watcher.py and, in passthrough,
# the ListOffsets poll of offset_watcher.py) cover the same thing: the partitions held fetches
# wait on, each until the latest deadline of a fetch waiting on it plus a linger (so a
# consumer's next fetch finds the partition still covered), with the leader epoch those
# fetches named (so the broker fences the watcher's poll when the leadership moves). Keys known
# only by topic id are not watched: both polls go by topic name. A watcher with nothing wanted
# sleeps until something is (`wait_for_more`) instead of polling an empty set.
"""The partitions a per-broker watcher covers, each until a deadline plus a linger."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import trio

from proxy.held.partition_state import PartitionKey

__all__ = ["WantedPartitions"]


class WantedPartitions:
    """Partitions wanted until a time (ms, the purgatory's clock), plus ``linger_ms``, the
    leader epoch the fetches waiting on each named (the highest; -1 when none did), and the
    longest wait among them (what a poll of the partition may wait)."""

    __slots__ = ("_epochs", "_linger_ms", "_more", "_until", "_waits")

    def __init__(self, linger_ms: int) -> None:
        self._linger_ms = linger_ms
        self._until: dict[PartitionKey, int] = {}
        self._epochs: dict[PartitionKey, int] = {}
        self._waits: dict[PartitionKey, int] = {}
        self._more = trio.Event()

    def __iter__(self) -> Iterator[PartitionKey]:
        return iter(self._until)

    def want(
        self,
        keys: list[PartitionKey],
        until_ms: int,
        epochs: Sequence[int] = (),
        wait_ms: int = 0,
    ) -> bool:
        """Cover ``keys`` until ``until_ms`` plus the linger; keys by topic id are ignored.
        ``epochs``: the current leader epoch the fetch named for each key (-1: none);
        ``wait_ms``: how long the fetch may wait. True if a key was not wanted before."""
        until_ms += self._linger_ms
        wanted, waits, added = self._until, self._waits, False
        for key in keys:
            if not isinstance(key[0], str):
                continue
            previous = wanted.get(key)
            if previous is None:
                self._more.set()
                added = True
            if previous is None or previous < until_ms:
                wanted[key] = until_ms
            if wait_ms > waits.get(key, 0):
                waits[key] = wait_ms
        for key, epoch in zip(keys, epochs, strict=False):
            if epoch > self._epochs.get(key, -1) and isinstance(key[0], str):
                self._epochs[key] = epoch
        return added

    def epoch(self, key: PartitionKey) -> int:
        """The highest leader epoch a fetch waiting on ``key`` named (-1: none)."""
        return self._epochs.get(key, -1)

    def wait_ms(self, key: PartitionKey) -> int:
        """The longest wait of a fetch that wanted ``key`` since it was last forgotten."""
        return self._waits.get(key, 0)

    def expire(self, now_ms: int) -> list[PartitionKey]:
        """Forget the keys wanted only until before ``now_ms``; they are returned."""
        gone = [key for key, until in self._until.items() if until < now_ms]
        for key in gone:
            del self._until[key]
            self._epochs.pop(key, None)
            self._waits.pop(key, None)
        return gone

    async def wait_for_more(self) -> None:
        """Wait until a key is wanted that was not before."""
        self._more = trio.Event()
        await self._more.wait()
