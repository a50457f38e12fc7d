# Strategy: a held fetch's reads of the broker, after its first look and after each wake-up. With
# the proxy's identity they go on the broker's shared re-fetch channels, and identical reads in
# flight share one upstream read (a produce that wakes a thousand held fetches costs the broker
# one fetch); with the client's (passthrough) they go on its own connection (`FetchReads`) and
# are its own. Every answer teaches the proxy's partition knowledge and wakes the fetches it
# concerns; an answer to one identity teaches the others only offsets.
"""A held fetch's upstream reads: shared re-fetches, and what their answers teach."""

from __future__ import annotations

from collections.abc import Container, Hashable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from proxy.errors import UpstreamFailed, UpstreamUnavailable
from proxy.held.fetch.answer import FetchResults, canonical, learn
from proxy.held.fetch.brokers import BrokerResources
from proxy.held.fetch.decision import FetchDecision
from proxy.held.fetch.planning import FetchPlanner
from proxy.held.fetch.ticket import FetchTicket
from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.observability.metrics import Metrics
from proxy.primitives.lease import SharedLease
from proxy.primitives.memory import MemoryPool
from proxy.primitives.purgatory import Purgatory, current_time_ms
from proxy.routing.topic_names import TopicNames
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

__all__ = ["FetchReads", "UpstreamReads", "broker_gone"]


def broker_gone(error: UpstreamUnavailable) -> UpstreamFailed:
    """A read for a client's fetch failed: the broker died, restarts or dropped the proxy.
    The client's connection ends, as its connection to that broker would have: that is what
    makes a client ask for metadata again and find a partition's new leader. (Answered
    "nothing new" instead, a consumer stayed on a killed leader for good.)"""
    return UpstreamFailed(f"upstream unreachable ({error})")


@dataclass(slots=True, eq=False)
class _SharedRead:
    """A re-fetch in flight that identical re-fetches wait for instead of asking again."""

    done: trio.Event = field(default_factory=trio.Event)
    results: FetchResults | None = None
    error: UpstreamUnavailable | None = None
    waiting: int = 0  # re-fetches waiting for it (each gets a part of ``lease``)
    lease: SharedLease | None = None  # the answer's memory, charged once for all of them


class FetchReads(Protocol):
    """A client connection's own upstream fetches (passthrough): its identity, its records."""

    @property
    def known(self) -> Container[tuple[object, int]]:
        """The partitions (as the client names them) the cluster last let it read."""
        ...

    async def fetch(self, request: FetchRequest, version: int) -> FetchResponse:
        """Send ``request`` on the client's upstream connection and return the answer.

        Raises:
            ConnectionClosed: that connection failed (the client's connection ends with it).
        """
        ...


class UpstreamReads:
    """The upstream reads of held fetches (see the module header).

    Args:
        pool: the KIP-72 pool each read's response budget comes from.
        resources: the brokers' re-fetch channels (and the partition-table sweep).
        planner: the upstream request of a ticket.
        states, names, fetches: what the answers teach, and the held fetches they wake.
        metrics: upstream fetches, by kind.
        response_max_bytes: a read's budget.
        answer_grace_s: how long past its max wait a broker may take to answer a read before
            it is taken as hung (connections.upstream_answer_grace_ms: a hang guard, not a
            held operation's deadline).
    """

    def __init__(
        self,
        pool: MemoryPool,
        resources: BrokerResources,
        planner: FetchPlanner,
        states: PartitionStates,
        names: TopicNames,
        fetches: Purgatory,
        metrics: Metrics,
        *,
        response_max_bytes: int,
        answer_grace_s: float,
    ) -> None:
        self._pool = pool
        self._resources = resources
        self._planner = planner
        self._states = states
        self._names = names
        self._fetches = fetches
        self._response_max_bytes = response_max_bytes
        self._answer_grace_s = answer_grace_s
        self._reads: dict[Hashable, _SharedRead] = {}
        self._immediate = metrics.upstream_fetches.labels("immediate")
        self._polls = metrics.upstream_fetches.labels("poll")
        self._refetches = metrics.upstream_fetches.labels("refetch")

    def first_look_answered(self, ticket: FetchTicket, response: FetchResponse) -> FetchResults:
        """A first look the client connection sent on its own connection was answered (a busy
        consumer's: its long-poll)."""
        (self._polls if ticket.decision is FetchDecision.POLL else self._immediate).inc()
        return self.take(ticket, response, own=False)

    async def read(
        self,
        ticket: FetchTicket,
        max_wait_ms: int,
        reads: FetchReads | None,
        *,
        first: bool = False,
    ) -> FetchResults:
        """Fetch the ticket's partitions (again); a broker like Tansu may keep it up to
        ``max_wait_ms`` (min_bytes is 0).

        Fetches woken together by the same news usually ask for the same thing (consumers of
        one partition at its end): with the proxy's identity, identical reads in flight share
        one upstream read, so a produce that wakes a thousand held fetches costs the broker one
        fetch, not a thousand queued on the re-fetch channels. A client's own reads are its
        own. The shared answer is charged to the pool once: the reader's lease becomes a
        SharedLease with a part for each re-fetch that waited, released with the last part.
        """
        ticket.release()  # the previous answer is replaced; never hold two leases
        if reads is not None:
            return await self._read(ticket, max_wait_ms, reads, first)
        request = ticket.request
        key = (
            ticket.node_id,
            ticket.version,
            request.isolation_level,
            min(request.max_bytes, self._response_max_bytes),
            max_wait_ms,
            frozenset((k, c.fetch_offset) for k, c in ticket.context.partitions.items()),
        )
        while True:
            shared = self._reads.get(key)
            if shared is None:
                shared = self._reads[key] = _SharedRead()
                try:
                    shared.results = await self._read(ticket, max_wait_ms, None, first)
                    own = ticket.own_lease
                    if shared.waiting and own is not None:
                        shared.lease = SharedLease(own, 1 + shared.waiting)
                        ticket.share(shared.lease)
                except UpstreamUnavailable as error:
                    shared.error = error
                    raise
                finally:
                    del self._reads[key]
                    shared.done.set()
                return shared.results
            shared.waiting += 1
            try:
                await shared.done.wait()
            except BaseException:
                if shared.lease is not None and shared.done.is_set():
                    shared.lease.let_go()  # counted in, cancelled before taking its part
                shared.waiting -= 1
                raise
            if shared.error is not None:
                raise shared.error
            if shared.results is not None:
                if shared.lease is not None:
                    ticket.share(shared.lease)
                return shared.results
            # The reader's client went away before the answer came: read it ourselves.

    async def _read(
        self, ticket: FetchTicket, max_wait_ms: int, reads: FetchReads | None, first: bool
    ) -> FetchResults:
        """One upstream fetch for ``ticket`` (``first``: its first look), its response budget
        paid from the pool first."""
        lease = await self._pool.allocate(self._response_max_bytes)
        lease.hand_off()  # released once the response is written (ticket.release)
        ticket.pay(lease)
        request = self._planner.immediate_request(ticket, max_wait_ms)
        if reads is not None:
            response = await reads.fetch(request, ticket.version)
        else:
            channel = self._resources.refetch_channel(ticket.node_id)
            # Kafka answers min_bytes 0 within max_wait_ms (at once): silent well past that,
            # it hangs, and the client must look for the partition's leader again.
            with trio.move_on_after(max_wait_ms / 1000 + self._answer_grace_s) as waited:
                answer = await channel.request(request, ticket.version)
            if waited.cancelled_caught:
                raise UpstreamUnavailable(
                    f"{channel.address}: no answer to a fetch past its max wait by "
                    f"{self._answer_grace_s:g} s: taken as hung"
                )
            assert isinstance(answer, FetchResponse)
            response = answer
        (self._immediate if first else self._refetches).inc()
        return self.take(ticket, response, own=reads is not None)

    def take(self, ticket: FetchTicket, response: FetchResponse, *, own: bool) -> FetchResults:
        """An upstream answer for ``ticket`` (``own``: read with the client's identity, on its
        connection): learnt from, and its lease traded for what the answer really holds
        (released if the broker refused the whole fetch)."""
        if response.error_code:
            ticket.release()
            return FetchResults(error_code=response.error_code)
        results = FetchResults.of(response)
        ticket.shrink(results.size_bytes())
        if own:
            self._learn_own(ticket, results)
        else:
            self._learn(ticket, results)
        return results

    def _learn(self, ticket: FetchTicket, results: FetchResults) -> None:
        """Record an upstream answer and wake the fetches it concerns. A partition the answer
        left out counts as answered too (with nothing new): otherwise a stale mark would
        wake this very fetch again at once, for ever."""
        for key in ticket.context.partitions:
            if key not in results.partitions:
                self._states.settle(canonical(key, self._names))
        self._wake(learn(results, self._states, self._names, current_time_ms()))

    def _learn_own(self, ticket: FetchTicket, results: FetchResults) -> None:
        """Record what an answer to one client's identity may tell the others: the offsets of
        the partitions it could read. Its errors stay its own, and a partition left out is not
        settled for everyone: the answer is given as it is (``results.incomplete``) instead
        of being held, which a stale mark would wake again at once."""
        partitions = results.partitions
        results.incomplete = any(key not in partitions for key in ticket.context.partitions)
        self._wake(learn(results, self._states, self._names, current_time_ms(), errors=False))

    def _wake(self, changed: list[PartitionKey]) -> None:
        """Wake the fetches held on partitions whose knowledge changed; sweep the table if the
        answer filled it up."""
        fetches = self._fetches
        for key in changed:
            fetches.check_and_complete(key)
        if self._states.crowded:
            self._resources.sweep()
