# Strategy: the produce side of the held path. A produce with acks=1/all waits in the produce
# purgatory for its upstream answer, at most its timeout_ms (Kafka's DelayedProduce): the wheel
# owns that deadline. And records that land through the proxy are news for the fetches held on
# their partitions: `produced` wakes them without waiting for the watcher.
"""Held produces, and the wake-up their records give held fetches."""

from __future__ import annotations

import trio

from proxy.held.delayed import DelayedProduce
from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.primitives.purgatory import Purgatory
from proxy.routing.rewrite import RequestPlan

__all__ = ["HeldProduces"]


class HeldProduces:
    """Produces held for their answer, and what they tell held fetches.

    Args:
        produces: the produce purgatory.
        fetches: the fetch purgatory (the fetches a produce wakes).
        states: what the proxy knows of partitions (a produce makes it stale).
    """

    def __init__(self, produces: Purgatory, fetches: Purgatory, states: PartitionStates) -> None:
        self._produces = produces
        self._fetches = fetches
        self._states = states

    def hold(self, delay_ms: int, plan: RequestPlan, interrupt: trio.CancelScope) -> DelayedProduce:
        """A produce waiting up to ``delay_ms`` for its answer, held in the produce purgatory:
        the holder completes it with the answer (``answered``); the wheel expires it, which
        cancels ``interrupt`` (the holder's wait) and makes the REQUEST_TIMED_OUT answer."""
        operation = DelayedProduce(delay_ms, plan, interrupt)
        self._produces.try_complete_else_watch(operation, ())
        return operation

    def produced(self, keys: list[PartitionKey]) -> None:
        """Records landed on ``keys`` through the proxy: wake the fetches waiting on them."""
        states, fetches = self._states, self._fetches
        for key in keys:
            states.invalidate(key)
            if fetches.watched_ops(key):
                fetches.check_and_complete(key)
