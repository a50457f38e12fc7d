# Strategy: the order in which the KIP-72 pool (proxy/primitives/memory.py) gives freed memory to
# the callers parked in it: random while memory is tight, so no fixed order starves whoever is
# always last (Kafka's Selector.determineHandlingOrder shuffles its keys then), in rounds by
# connection (a Turn), so no connection is served twice while another waits for its turn, and
# arrival order when memory is not tight. The order is a small protocol (WakeOrder) so the
# fairness benchmark can compare it with FIFO and a fixed order. No I/O and no time: the pool
# calls push, discard and pop between its own state changes.
"""Wake orders of the memory pool: who gets memory next, and the rounds that keep it fair."""

from __future__ import annotations

import random
from collections import deque
from typing import Protocol, final

import trio

__all__ = ["ArrivalOrder", "RandomWhenTight", "Turn", "Waiter", "WakeOrder"]


@final
class Turn:
    """One connection's place in the pool's rounds (RandomWhenTight): the round in which it
    was last given memory. A connection passes the same Turn to every allocation of its
    requests."""

    __slots__ = ("served_in",)

    def __init__(self) -> None:
        self.served_in = -1


@final
class Waiter:
    """A task parked in ``MemoryPool.allocate``; what a WakeOrder queues and picks."""

    __slots__ = ("_in_round", "_queued", "_slot", "size_bytes", "task", "turn")

    def __init__(self, task: trio.lowlevel.Task, size_bytes: int, turn: Turn | None) -> None:
        self.task = task
        self.size_bytes = size_bytes
        self.turn = turn
        self._queued = False  # owned by the WakeOrder holding it
        self._slot = -1  # index in RandomWhenTight's arrays
        self._in_round = False  # in RandomWhenTight's current round


class WakeOrder(Protocol):
    """Which parked caller gets the memory a release frees. Pluggable for benchmarks.

    ``pop`` is only called when the queue is non-empty; ``tight`` says whether memory is
    tight at that moment. ``discard`` removes a cancelled waiter (it may already be gone).
    ``round`` is the round being served (RandomWhenTight; an order without rounds keeps 0):
    the pool records it in the Turn of whoever it gives memory.
    """

    @property
    def round(self) -> int: ...

    def __len__(self) -> int: ...

    def push(self, waiter: Waiter) -> None: ...

    def discard(self, waiter: Waiter) -> None: ...

    def pop(self, tight: bool) -> Waiter: ...


@final
class ArrivalOrder:
    """FIFO, always. Cancelled waiters are skipped lazily, so every operation is O(1)."""

    __slots__ = ("_fifo", "_live")

    def __init__(self) -> None:
        self._fifo: deque[Waiter] = deque()
        self._live = 0

    @property
    def round(self) -> int:
        return 0

    def __len__(self) -> int:
        return self._live

    def push(self, waiter: Waiter) -> None:
        waiter._queued = True
        self._fifo.append(waiter)
        self._live += 1

    def discard(self, waiter: Waiter) -> None:
        if waiter._queued:
            waiter._queued = False
            self._live -= 1
            if len(self._fifo) > 2 * self._live + 32:
                self._fifo = deque(w for w in self._fifo if w._queued)

    def pop(self, tight: bool) -> Waiter:
        fifo = self._fifo
        waiter = fifo.popleft()
        while not waiter._queued:
            waiter = fifo.popleft()
        waiter._queued = False
        self._live -= 1
        return waiter


@final
class RandomWhenTight:
    """KIP-72's order: random while memory is tight, arrival order otherwise.

    Random in rounds: while tight, a waiter whose connection (its Turn) was already given
    memory in the round being served waits for the next round; every other waiter is in this
    one, and a round is served in random order. So no connection is served twice in a round
    while another waits for its turn in it: Kafka's selector reads each ready channel once per
    poll, in a shuffled order, and keeps one request per channel in processing; a plain random
    pick let a connection that was just served win again while another waited for its first
    turn (with pipelining clients, connections were measured left with nothing for
    seconds). A waiter without a Turn joins the round being served.

    Three views of one set: the round's array and the later arrivals' array, each for O(1)
    random pick with swap-remove, and a FIFO deque in which removed waiters linger until
    skipped (or compacted away once they outnumber the live ones), so push, discard and pop
    are all amortized O(1) even with thousands of muted connections.
    """

    __slots__ = ("_fifo", "_later", "_number", "_rng", "_round")

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._round: list[Waiter] = []
        self._later: list[Waiter] = []
        self._fifo: deque[Waiter] = deque()
        self._number = 0

    @property
    def round(self) -> int:
        return self._number

    def __len__(self) -> int:
        return len(self._round) + len(self._later)

    def push(self, waiter: Waiter) -> None:
        waiter._queued = True
        turn = waiter.turn
        waiter._in_round = turn is None or turn.served_in < self._number
        slots = self._round if waiter._in_round else self._later
        waiter._slot = len(slots)
        slots.append(waiter)
        self._fifo.append(waiter)

    def _unslot(self, waiter: Waiter) -> None:
        slots = self._round if waiter._in_round else self._later
        last = slots.pop()
        if last is not waiter:
            slots[waiter._slot] = last
            last._slot = waiter._slot
        waiter._queued = False
        if len(self._fifo) > 2 * len(self) + 32:
            self._fifo = deque(w for w in self._fifo if w._queued)

    def discard(self, waiter: Waiter) -> None:
        if waiter._queued:
            self._unslot(waiter)

    def pop(self, tight: bool) -> Waiter:
        if tight:
            if not self._round:  # a new round: everyone parked by now
                self._round, self._later = self._later, self._round
                self._number += 1
                for waiter in self._round:
                    waiter._in_round = True
            waiter = self._round[self._rng.randrange(len(self._round))]
        else:
            fifo = self._fifo
            waiter = fifo.popleft()
            while not waiter._queued:
                waiter = fifo.popleft()
        self._unslot(waiter)
        return waiter
