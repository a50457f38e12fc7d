# Strategy: the held path's one face to a client connection. Everything a held request goes
# through between the plan that says "held" and the answer's bytes is the held path's; the
# connection's pumps only owe a slot, ask for its answer by the slot's kind, write it and say
# it is written:
#
#   request pump    fetch: hold_repeat or take, then start    (what to send, whether to wake)
#   response pump   fetch: answer, then finish                (the frame as parts); idle
#                   between requests (a read-ahead's lifetime)
#                   produce: answer inside interruptible; interrupted after an expiry;
#                   produced once written
#   the connection  abandon, when it ends
"""One client connection's held requests: the face the connection's pumps use."""

from __future__ import annotations

from contextlib import AbstractContextManager

import trio

from proxy.held.client_upstream import ClientUpstream
from proxy.held.fetch.client import ClientFetch, ClientFetches, FetchAnswer, FetchStart
from proxy.held.fetch.path import FetchPath
from proxy.held.produce import HeldProduces, ProduceAnswer, ProduceHolds, ProduceSlot
from proxy.observability.metrics import Metrics
from proxy.primitives.memory import MemoryPool
from proxy.routing.rewrite import BrokerDirectory, RequestPlan

__all__ = [
    "ClientFetch",
    "ConnectionHolds",
    "FetchAnswer",
    "FetchStart",
    "ProduceAnswer",
    "ProduceSlot",
]


class ConnectionHolds:
    """The held fetches and produces of one client connection.

    Args:
        fetches: the proxy's held fetch path; ``produces`` its produce purgatory's side.
        node_id: the broker whose port the connection is on; None (the bootstrap port): no
            fetch is held there (a bootstrap connection may reach any broker, and fetch
            sessions belong to one).
        upstream: the connection's own upstream connection.
        wake: the lot the response pump parks on while it waits for a slot.
        pool, brokers, metrics, passthrough: what a connection's fetches use (client.py).

    Resource handling: ``abandon`` returns the memory of every held request of the connection
    and takes them out of the purgatories; the connection calls it when it ends.
    """

    __slots__ = ("_fetches", "_produces")

    def __init__(
        self,
        fetches: FetchPath,
        produces: HeldProduces,
        node_id: int | None,
        upstream: ClientUpstream,
        wake: trio.lowlevel.ParkingLot,
        *,
        pool: MemoryPool,
        brokers: BrokerDirectory,
        metrics: Metrics,
        passthrough: bool,
    ) -> None:
        self._fetches: ClientFetches | None = None
        if node_id is not None:
            self._fetches = ClientFetches(fetches, node_id, pool, brokers, upstream, wake,
                                          passthrough=passthrough, metrics=metrics)  # fmt: skip
        self._produces = ProduceHolds(produces, upstream)

    # -- fetches (broker ports only) -----------------------------------------------------

    @property
    def holds_fetches(self) -> bool:
        """Whether this connection's fetches are the proxy's to answer."""
        return self._fetches is not None

    def hold_repeat(self, body: memoryview) -> ClientFetch | None:
        """An idle consumer's repeated fetch, held from its bytes (None: not one; cheap when
        no repeat is learnt)."""
        fetches = self._fetches
        return None if fetches is None else fetches.hold_repeat(body)

    def take(self, plan: RequestPlan, body: memoryview) -> ClientFetch | None:
        """A Fetch the proxy answers itself, planned (None: forward it as it is)."""
        fetches = self._fetches
        return None if fetches is None else fetches.take(plan, body)

    async def start(self, fetch: ClientFetch) -> FetchStart:
        """Start ``fetch`` once its turn comes: what the request pump sends and owes."""
        assert self._fetches is not None
        return await self._fetches.start(fetch)

    async def answer(self, fetch: ClientFetch) -> FetchAnswer:
        """``fetch``'s answer, held while Kafka would hold it."""
        assert self._fetches is not None
        return await self._fetches.answer(fetch)

    def finish(self, fetch: ClientFetch) -> None:
        """``fetch``'s answer is written."""
        assert self._fetches is not None
        self._fetches.finish(fetch)

    async def idle(self, owed: trio.lowlevel.ParkingLot) -> None:
        """Wait on ``owed`` until the response pump is owed a slot; a read-ahead out that the
        client leaves unclaimed meanwhile is given up at its time."""
        if self._fetches is None:
            await owed.park()
        else:
            await self._fetches.idle(owed)

    # -- produces ------------------------------------------------------------------------

    def interruptible(self) -> AbstractContextManager[None]:
        """Where the response pump answers: a held produce's expiry ends the block."""
        return self._produces.interruptible()

    async def answer_produce(self, slot: ProduceSlot) -> ProduceAnswer:
        """The broker's answer to ``slot``'s produce (held while it is due)."""
        return await self._produces.answer(slot)

    def interrupted(self) -> tuple[ProduceSlot, ProduceAnswer]:
        """The produce whose expiry ended ``interruptible``'s block, and its answer."""
        return self._produces.interrupted()

    def produced(self, slot: ProduceSlot) -> None:
        """``slot``'s answer is written: wake the fetches held on its partitions."""
        self._produces.produced(slot)

    # -- the end ---------------------------------------------------------------------------

    def abandon(self) -> None:
        """The connection ended: nothing of it stays held or keeps pool memory."""
        if self._fetches is not None:
            self._fetches.abandon()
        self._produces.abandon()
