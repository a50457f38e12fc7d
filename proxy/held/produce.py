# Strategy: the produce side of the held path, as Kafka's DelayedProduce. A produce with
# acks=1/all is forwarded at once; its client waits in the produce purgatory for the broker's
# answer, at most what is left of its timeout_ms (proxy/held/deadlines.py), and the wheel owns
# that deadline. Records that land through the proxy are news for the fetches held on their
# partitions: `produced` wakes them without waiting for the watcher.
#
# Holding a produce needs its connection's response pump to be interruptible while it reads the
# broker's answer. A cancel scope per produce cost a tenth of a one-record produce's proxy CPU,
# so one scope serves a connection's produces until one expires: `ProduceHolds.interruptible`
# opens it around the pump's answers, the expiry cancels it (the only scope the held path
# cancels, and its own), and `interrupted` then says what that produce's client gets: the
# broker's answer if it came as the produce expired (the broker's answer is the truth), else
# REQUEST_TIMED_OUT, built in the holder's task, its late answer given up.
"""Held produces: their purgatory, one connection's holds, the fetches their records wake."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple, Protocol

import trio

from proxy.held.client_upstream import ClientUpstream
from proxy.held.deadlines import produce_hold_ms
from proxy.held.partition_state import PartitionStates
from proxy.primitives.purgatory import DelayedOperation, Purgatory
from proxy.routing.rewrite import ProducedPartitions, RequestPlan, produce_timed_out
from proxy.routing.topic_names import TopicNames

__all__ = ["DelayedProduce", "HeldProduces", "ProduceAnswer", "ProduceHolds", "ProduceSlot"]


class DelayedProduce(DelayedOperation):
    """A forwarded produce waiting for its upstream answer, at most its timeout_ms.

    Args:
        delay_ms: what is left of the produce's timeout_ms.
        interrupt: the holder's scope, cancelled on expiry (its wait for the broker ends).
    """

    __slots__ = ("_interrupt", "expired")

    def __init__(self, delay_ms: int, interrupt: trio.CancelScope) -> None:
        super().__init__(delay_ms)
        self._interrupt = interrupt
        self.expired = False

    def answered(self) -> bool:
        """The broker's answer came: complete (True), unless the wheel expired the produce
        first (False)."""
        return self.force_complete()

    def try_complete(self) -> bool:
        return False  # only its answer completes it (``answered``)

    def on_complete(self) -> None:
        pass  # the holder goes on once its read returns

    def on_expiration(self) -> None:
        self.expired = True
        self._interrupt.cancel()


class HeldProduces:
    """The produce purgatory, and what produces tell held fetches.

    Args:
        produces: the produce purgatory.
        fetches: the fetch purgatory (the fetches a produce wakes).
        states: what the proxy knows of partitions (a produce makes it stale).
        names: topic ids to names, for the partitions' keys.
    """

    def __init__(
        self, produces: Purgatory, fetches: Purgatory, states: PartitionStates, names: TopicNames
    ) -> None:
        self._produces = produces
        self._fetches = fetches
        self._states = states
        self._names = names

    def hold(self, delay_ms: int, interrupt: trio.CancelScope) -> DelayedProduce:
        """A produce waiting up to ``delay_ms`` for its answer, in the produce purgatory."""
        operation = DelayedProduce(delay_ms, interrupt)
        self._produces.try_complete_else_watch(operation, ())
        return operation

    def produced(self, produced: ProducedPartitions) -> None:
        """Records landed on ``produced``'s partitions through the proxy: wake the fetches
        waiting on them."""
        states, fetches, key = self._states, self._fetches, self._names.key
        for name, topic_id, indexes in produced.topics:
            for index in indexes:
                partition = key(name, topic_id, index)
                states.invalidate(partition)
                if fetches.watched_ops(partition):
                    fetches.check_and_complete(partition)


class ProduceSlot(Protocol):
    """What the held path reads of a produce its connection owes an answer to."""

    @property
    def plan(self) -> RequestPlan: ...

    @property
    def produced(self) -> ProducedPartitions: ...

    @property
    def sent_s(self) -> float:
        """When it went upstream (trio clock)."""
        ...


class ProduceAnswer(NamedTuple):
    """What a held produce's client gets: the broker's answer, or (``timed_out``) the
    proxy's REQUEST_TIMED_OUT."""

    frame: bytes | bytearray
    timed_out: bool


class ProduceHolds:
    """One client connection's held produces (see the module header).

    Args:
        produces: the produce purgatory's side of the held path.
        upstream: the connection's own upstream connection, where the answers come.

    Resource handling: ``abandon`` takes a produce still held out of the purgatory; the
    connection calls it when it ends.
    """

    __slots__ = ("_held", "_interrupt", "_late", "_produces", "_upstream")

    def __init__(self, produces: HeldProduces, upstream: ClientUpstream) -> None:
        self._produces = produces
        self._upstream = upstream
        self._interrupt = trio.CancelScope()  # replaced by each ``interruptible``
        self._held: tuple[ProduceSlot, DelayedProduce] | None = None
        self._late: bytearray | None = None  # the broker's answer, come as it expired

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Where the connection answers its slots: a held produce's expiry ends the block
        (normally, not by an exception); ``interrupted`` then says what its client gets."""
        with trio.CancelScope() as self._interrupt:
            yield

    async def answer(self, slot: ProduceSlot) -> ProduceAnswer:
        """The broker's answer to ``slot``'s produce, held in the purgatory while it is due.
        Inside ``interruptible``: the produce's expiry leaves that block instead."""
        upstream = self._upstream
        correlation_id = slot.plan.header.correlation_id
        answered = upstream.answer_in_hand(correlation_id)
        # (no clock read for an answer in hand: pipelined answers come in batches)
        waited_ms = 0 if answered else int((trio.current_time() - slot.sent_s) * 1000)
        hold_ms = produce_hold_ms(slot.produced.timeout_ms, waited_ms, answered)
        if hold_ms is None:  # answered already, or it may not wait
            return ProduceAnswer(await upstream.answer(correlation_id), False)
        operation = self._produces.hold(hold_ms, self._interrupt)
        self._held = (slot, operation)
        frame = await upstream.answer(correlation_id)  # Cancelled: it expired
        if not operation.answered():  # it expired as the answer came: leave with it
            self._late = frame
            await trio.lowlevel.checkpoint()  # raises Cancelled: its scope is cancelled
        self._held = None
        return ProduceAnswer(frame, False)

    def interrupted(self) -> tuple[ProduceSlot, ProduceAnswer]:
        """The produce whose expiry ended ``interruptible``'s block, and its answer."""
        held, self._held = self._held, None
        late, self._late = self._late, None
        assert held is not None
        slot = held[0]
        if late is not None:
            return slot, ProduceAnswer(late, False)
        self._upstream.give_up(slot.plan.header.correlation_id)
        return slot, ProduceAnswer(produce_timed_out(slot.plan), True)

    def produced(self, slot: ProduceSlot) -> None:
        """``slot``'s answer is written: wake the fetches held on its partitions."""
        self._produces.produced(slot.produced)

    def abandon(self) -> None:
        """The connection ended: a produce still held leaves the purgatory."""
        held, self._held = self._held, None
        if held is not None:
            held[1].force_complete()
