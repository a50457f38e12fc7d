# Strategy: everything held requests share, owned by one service per proxy (issue 6).
#
#   HeldRequests.run()  (in the server's services nursery)
#   ├── fetch purgatory clock      DelayedFetch: client fetches waiting for data
#   ├── produce purgatory clock    DelayedProduce: forwarded produces waiting for their answer
#   ├── partition-state sweeper    forgets partitions nothing names any more (`_sweep`)
#   └── per broker, started on first use:
#       ├── refetch channel's reader   BrokerChannel for re-fetches after a wake-up
#       └── watcher + its channel      UpstreamWatcher (its long-polls need a connection of
#                                      their own: a broker answers a connection in order),
#                                      or in passthrough OffsetWatcher (ListOffsets only)
#
# A client connection (proxy/connection/fetches.py) calls `plan` when a Fetch arrives (session
# bookkeeping, and whether the broker must be asked at all), `hold_now` when the proxy knows
# there is nothing new (the fetch waits from that moment), or `hold_repeat` for an idle
# consumer's repeat recognised by its bytes (held with no ticket; one is made only if news
# comes), and then `answer` produces the client's response: a first look upstream if the plan
# says so, then holding the fetch in the purgatory as long as Kafka would, and a re-fetch after
# each wake-up. `hold_produce` registers a produce waiting for its answer; `produced` is the
# produce side's wake-up of held fetches.
#
# Where the upstream reads go depends on whose identity the cluster sees:
#   - the proxy's (client_auth = "none"): the broker's shared re-fetch channels, identical
#     reads in flight shared; a client connection that only fetches then needs no upstream
#     connection of its own (issue 17: descriptors per idle consumer);
#   - the client's (passthrough): the client connection hands `answer` its own FetchReads, so
#     every record a client receives was fetched with its identity. Nothing is shared, and the
#     watcher asks ListOffsets only (proxy/held/offset_watcher.py): the proxy identity learns
#     offsets, never records. `plan` skips the broker only for partitions that connection has
#     read itself (`known`), so a client the cluster does not authorise learns nothing from
#     what other clients fetched; and a client's own read teaches the shared knowledge only
#     the offsets of partitions it could read (its errors stay its own, `_learn_own`).
#
# Collaborators come in explicitly (config sections, pool, metrics, topic names, where each
# broker is, how to dial it): this module knows nothing of the server that wires it.
"""Held fetches and produces: sessions, partition knowledge, purgatories, watchers."""

from __future__ import annotations

import logging
from collections.abc import Container, Hashable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from proxy.config import Config
from proxy.errors import UpstreamFailed, UpstreamUnavailable
from proxy.held.decision import FetchDecision, decide_fetch
from proxy.held.delayed import DelayedFetch, DelayedProduce
from proxy.held.fetch_answer import (
    FetchResults,
    build_response,
    canonical,
    error_response,
    has_unread_records,
    learn,
    reached_offsets,
    satisfied,
    upstream_request,
)
from proxy.held.fetch_repeat import FetchRepeat
from proxy.held.fetch_session import (
    FINAL_EPOCH,
    ContextKind,
    FetchContext,
    FetchSessionCache,
)
from proxy.held.offset_watcher import OffsetWatcher
from proxy.held.partition_state import PartitionKey, PartitionStates, TopicNames
from proxy.held.ticket import FetchTicket
from proxy.held.watcher import UpstreamWatcher
from proxy.memory import MemoryPool, SharedLease
from proxy.metrics import Metrics
from proxy.purgatory import Purgatory, current_time_ms
from proxy.rewrite import RequestPlan
from proxy.routing import Address
from proxy.upstream.broker_channel import BrokerChannel
from proxy.upstream.dialer import Dialer
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

__all__ = ["BrokerAddresses", "FetchReads", "HeldRequests"]

log = logging.getLogger("purgatory_proxy.held.service")

#: Connections per broker for re-fetches after wake-ups.
_REFETCH_CHANNELS = 4
#: How often the partition-state table is swept while it may hold partitions nothing names
#: (proxy/held/partition_state.py): such an entry lives at most two periods.
_SWEEP_INTERVAL_S = 10.0


def _broker_gone(error: UpstreamUnavailable) -> UpstreamFailed:
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


class BrokerAddresses(Protocol):
    """Where each upstream broker is (proxy/routing.Routing provides it)."""

    def upstream_of(self, node_id: int) -> Address | None: ...


class HeldRequests:
    """Held fetches and produces of one proxy.

    Args:
        config: the [fetch] and [purgatory] sections are read.
        pool: the KIP-72 pool the upstream fetches' response budgets come from.
        metrics: purgatory and upstream-fetch series.
        names: topic id -> name, learnt from Metadata.
        brokers: where each broker is, for re-fetch channels and watchers.
        dialer: how those channels connect.
    """

    def __init__(
        self,
        config: Config,
        pool: MemoryPool,
        metrics: Metrics,
        names: TopicNames,
        brokers: BrokerAddresses,
        dialer: Dialer,
    ) -> None:
        self._brokers = brokers
        self._dialer = dialer
        self._pool = pool
        self._metrics = metrics
        self.response_max_bytes = min(
            int(config.fetch.response_max_bytes), pool.max_allocation_bytes
        )
        self._session_cache_size = config.fetch.session_cache_size
        self._watcher_max_wait_ms = config.fetch.watcher_max_wait_ms
        self._offset_watch_interval_ms = config.fetch.offset_watch_interval_ms
        self._passthrough = config.proxy.client_auth == "passthrough"
        self._immediate_max_wait_ms = config.fetch.immediate_max_wait_ms
        self._answer_grace_s = config.connections.upstream_answer_grace_ms / 1000
        purgatory = config.purgatory
        self.fetches = Purgatory(
            tick_ms=purgatory.tick_ms,
            wheel_size=purgatory.wheel_size,
            purge_interval=purgatory.purge_interval,
        )
        self.produces = Purgatory(
            tick_ms=purgatory.tick_ms,
            wheel_size=purgatory.wheel_size,
            purge_interval=purgatory.purge_interval,
        )
        self.states = PartitionStates()
        self.names = names
        self._sessions: dict[int, FetchSessionCache] = {}
        self._refetch_channels: dict[int, list[BrokerChannel]] = {}
        self._watchers: dict[int, UpstreamWatcher | OffsetWatcher] = {}
        self._reads: dict[Hashable, _SharedRead] = {}
        self._nursery: trio.Nursery | None = None
        self._immediate = self._metrics.upstream_fetches.labels("immediate")
        self._refetches = self._metrics.upstream_fetches.labels("refetch")
        self._metrics.attach_purgatory("fetch", self.fetches)
        self._metrics.attach_purgatory("produce", self.produces)
        self._metrics.attach_partition_states(self.states)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the purgatories' clocks, the partition-state sweeper and, as brokers are used,
        their channels and watchers."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.fetches.run)
            await nursery.start(self.produces.run)
            nursery.start_soon(self._sweep_regularly)
            self._nursery = nursery
            task_status.started()

    # -- the fetch path ----------------------------------------------------------------

    def plan(
        self,
        node_id: int,
        request: FetchRequest,
        version: int,
        known: Container[tuple[object, int]] | None = None,
    ) -> FetchTicket:
        """Apply the request to its session and decide whether the broker must be asked.

        ``known``: the partitions (as the client names them) the proxy may answer from its
        own knowledge; None = all (see the module header).
        """
        now_ms = current_time_ms()
        cache = self._sessions.get(node_id)
        if cache is None:
            cache = self._sessions[node_id] = FetchSessionCache(self._session_cache_size)
        context = cache.new_context(request, now_ms)
        decision = decide_fetch(
            context,
            request.max_wait_ms,
            lambda context: self._nothing_new(context, request.isolation_level, now_ms, known),
        )
        deadline_ms = now_ms + max(request.max_wait_ms, 0)
        return FetchTicket(request, version, node_id, context, deadline_ms, decision)

    def hold_repeat(
        self, node_id: int, repeat: FetchRepeat, epoch: int, wake: trio.lowlevel.ParkingLot
    ) -> DelayedFetch | None:
        """Hold an idle consumer's repeated fetch, recognised by its bytes
        (proxy/held/fetch_repeat.py), at once: no decoding, no ticket. Only if its session is
        where the repeat says (sessionless: the epoch is still -1) and the proxy knows it has
        nothing new; None to plan it the ordinary way (which also answers a session error).
        Completion unparks ``wake`` (as ``hold_now``). Only with the proxy's identity:
        passthrough plans what its connection has read.

        Its answer needs a ticket only if something happened (``FetchTicket.of_repeat``): an
        expiry with nothing to tell is the session's empty answer
        (proxy/held/fetch_answer.py, ``nothing_to_tell``).
        """
        session, cache = repeat.session, self._sessions.get(node_id)
        if session is None:
            if epoch != FINAL_EPOCH:
                return None
        elif cache is None or not session.partitions or not cache.is_current(session, epoch):
            return None
        request, context = repeat.request, repeat.context
        isolation, now_ms = request.isolation_level, current_time_ms()
        decision = decide_fetch(
            context,
            request.max_wait_ms,
            lambda context: self._nothing_new(context, isolation, now_ms),
        )
        if decision is not FetchDecision.HOLD:
            return None
        deadline_ms = now_ms + request.max_wait_ms
        operation = self._hold_until(node_id, context, isolation, now_ms, deadline_ms, wake)
        if operation is None:
            return None  # (cannot be: nothing new, and nothing awaited since the check)
        if session is not None and cache is not None:
            cache.renew(session, now_ms)
        return operation

    def _nothing_new(
        self,
        context: FetchContext,
        isolation: int,
        now_ms: int,
        known: Container[tuple[object, int]] | None = None,
    ) -> bool:
        names, states = self.names, self.states
        return all(
            (known is None or key in known)
            and states.nothing_new(canonical(key, names), cached.fetch_offset, isolation, now_ms)
            for key, cached in context.partitions.items()
        )

    def hold_now(self, ticket: FetchTicket, wake: trio.lowlevel.ParkingLot) -> bool:
        """Enter the purgatory at once with a fetch the proxy knows has nothing new (True:
        it waits; False: news came in the meantime, ``answer`` re-fetches as usual).

        The client connection calls this from its request pump, and completion unparks
        ``wake`` (its response pump's lot): an idle consumer's fetch then costs its response
        pump one wake-up, when the fetch is done, instead of one to start the hold and one to
        end it. ``answer`` awaits the hold (``ticket.hold``).
        """
        operation = self._new_hold(ticket, current_time_ms(), wake)
        if operation is None:
            return False
        ticket.hold, ticket.hold_started_s = operation, trio.current_time()
        return True

    def _new_hold(
        self, ticket: FetchTicket, now_ms: int, wake: trio.lowlevel.ParkingLot | None = None
    ) -> DelayedFetch | None:
        """A wait in the purgatory for ``ticket`` until news or its deadline, registered
        (None: it completed at once)."""
        return self._hold_until(ticket.node_id, ticket.context, ticket.request.isolation_level,
                                now_ms, ticket.deadline_ms, wake)  # fmt: skip

    def _hold_until(
        self,
        node_id: int,
        context: FetchContext,
        isolation: int,
        now_ms: int,
        deadline_ms: int,
        wake: trio.lowlevel.ParkingLot | None,
    ) -> DelayedFetch | None:
        """A wait in the purgatory for ``context``'s partitions until news or ``deadline_ms``,
        registered, and the broker's watcher asked to cover them (None: it completed at
        once)."""
        states = self.states
        operation = DelayedFetch(
            deadline_ms - now_ms,
            states,
            reached_offsets(context, states, self.names, isolation),
            isolation,
            wake,
        )
        keys = operation.keys
        if self.fetches.try_complete_else_watch(operation, keys, now_ms):
            return None
        epochs = [cached.current_leader_epoch for cached in context.partitions.values()]
        self._watcher(node_id).want(keys, deadline_ms, epochs)  # (keys are in that order)
        return operation

    def immediate_request(
        self, ticket: FetchTicket, max_wait_ms: int | None = None
    ) -> FetchRequest:
        """The upstream fetch for ``ticket`` (by default the first look's max wait)."""
        if max_wait_ms is None:
            max_wait_ms = self._immediate_max_wait_ms
        return upstream_request(
            ticket.request, ticket.context, self.response_max_bytes, max_wait_ms
        )

    async def answer(
        self,
        ticket: FetchTicket,
        reads: FetchReads | None = None,
        first: FetchResponse | None = None,
    ) -> FetchResponse:
        """The client's response: a first look upstream if the ticket says FETCH, then the
        fetch held in the purgatory while Kafka would, re-fetched after each wake-up.

        ``reads``: the client connection's own fetches (passthrough); None = the broker's
        shared re-fetch channels (the proxy's identity). ``first``: the first look's answer,
        when the client connection already sent it on its own connection.

        The memory behind the records in the response is ``ticket.lease``; the caller releases
        it (``ticket.release()``) once the response is written.

        Raises:
            ConnectionClosed: from ``reads``, when the client's own connection fails;
                UpstreamFailed when the broker cannot be read (see ``_broker_gone``).
        """
        context = ticket.context
        if context.kind is ContextKind.ERROR:
            return error_response(context.error_code)
        request = ticket.request
        results = FetchResults()
        if first is not None:
            self._immediate.inc()
            results = self._take(ticket, first, own=False)
        elif ticket.decision is FetchDecision.FETCH:
            try:
                results = await self._refetch(
                    ticket, self._immediate_max_wait_ms, reads, first=True
                )
            except UpstreamUnavailable as error:
                raise _broker_gone(error) from None
        if results.error_code:  # the broker refused the whole fetch: pass it on
            return error_response(results.error_code)
        now_ms = current_time_ms()
        patient = True
        while ticket.hold is not None or (  # (already held: see hold_now)
            now_ms < ticket.deadline_ms
            and context.partitions
            and not satisfied(results, request.min_bytes)
        ):
            # A broker that reads its storage within max_wait (Tansu on s3) may report records
            # it did not have time to return: ask again, as long as the client would wait,
            # rather than wait for news of data that is already there (once per wake-up).
            unread = patient and has_unread_records(context, results, request.isolation_level)
            patient = False
            try:
                if unread:
                    results = await self._refetch(ticket, ticket.deadline_ms - now_ms, reads)
                elif await self._hold(ticket, now_ms):
                    results = await self._refetch(ticket, self._immediate_max_wait_ms, reads)
                    patient = True
                else:
                    ticket.expired = True
                    break
            except UpstreamUnavailable as error:
                raise _broker_gone(error) from None
            now_ms = current_time_ms()
        # Passthrough: the cluster's answer on this connection as it is, or (nothing asked)
        # what this connection has itself read; never a partition filled in from others.
        fill = None if reads is None else (() if results.answered else reads.known)
        return build_response(context, results, self.states, self.names, current_time_ms(), fill)

    async def _hold(self, ticket: FetchTicket, now_ms: int) -> bool:
        """Wait in the purgatory until a partition has news (True) or the deadline (False)."""
        operation, ticket.hold = ticket.hold, None
        if operation is not None:  # entered from the request pump (hold_now)
            started_s = ticket.hold_started_s
        else:
            started_s = trio.current_time()
            operation = self._new_hold(ticket, now_ms)
            if operation is None:
                return True
        try:
            await operation.wait()
        finally:
            # A connection that dies while its fetch waits leaves nothing in the purgatory.
            if not operation.is_completed:
                operation.force_complete()
            ticket.held_ms += (trio.current_time() - started_s) * 1000
        return not operation.expired

    async def _refetch(
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
            min(request.max_bytes, self.response_max_bytes),
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
        lease = await self._pool.allocate(self.response_max_bytes)
        lease.hand_off()  # released once the response is written (ticket.release)
        ticket.pay(lease)
        request = self.immediate_request(ticket, max_wait_ms)
        if reads is not None:
            response = await reads.fetch(request, ticket.version)
        else:
            channel = self._refetch_channel(ticket.node_id)
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
        return self._take(ticket, response, own=reads is not None)

    def _take(self, ticket: FetchTicket, response: FetchResponse, *, own: bool) -> FetchResults:
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
                self.states.settle(canonical(key, self.names))
        self._wake(learn(results, self.states, self.names))

    def _learn_own(self, ticket: FetchTicket, results: FetchResults) -> None:
        """Record what an answer to one client's identity may tell the others: the offsets of
        the partitions it could read. Its errors stay its own, and a partition left out is not
        settled for everyone: the answer is given as it is (``results.incomplete``) instead
        of being held, which a stale mark would wake again at once."""
        partitions = results.partitions
        results.incomplete = any(key not in partitions for key in ticket.context.partitions)
        self._wake(learn(results, self.states, self.names, errors=False))

    def _wake(self, changed: list[PartitionKey]) -> None:
        """Wake the fetches held on partitions whose knowledge changed; sweep the table if the
        answer filled it up."""
        for key in changed:
            self.fetches.check_and_complete(key)
        if self.states.crowded:
            self._sweep()

    # -- the partition-state table -------------------------------------------------------

    async def _sweep_regularly(self) -> None:
        while True:
            await trio.sleep(_SWEEP_INTERVAL_S)
            if self.states.sweep_due:
                self._sweep()

    def _sweep(self) -> None:
        """Forget what the proxy knows of partitions no held fetch, fetch session or watcher
        names (proxy/held/partition_state.py). O(table + sessions' partitions), amortised
        over the entries added since the last sweep."""
        names = self.names
        named: set[Hashable] = set(self.fetches.watched_keys())
        for cache in self._sessions.values():
            for session in cache:
                named.update(canonical(key, names) for key in session.partitions)
        for watcher in self._watchers.values():
            named.update(watcher.wanted)
        evicted = self.states.evict(named)
        if evicted:
            log.debug("forgot %d partitions nothing names; %d known", evicted, len(self.states))

    # -- the produce side ----------------------------------------------------------------

    def hold_produce(
        self, delay_ms: int, plan: RequestPlan, interrupt: trio.CancelScope
    ) -> DelayedProduce:
        """A produce waiting up to ``delay_ms`` for its answer, held in the produce purgatory:
        the holder completes it with the answer (``answered``); the wheel expires it, which
        cancels ``interrupt`` (the holder's wait) and makes the REQUEST_TIMED_OUT answer."""
        operation = DelayedProduce(delay_ms, plan, interrupt)
        self.produces.try_complete_else_watch(operation, ())
        return operation

    def produced(self, keys: list[PartitionKey]) -> None:
        """Records landed on ``keys`` through the proxy: wake the fetches waiting on them."""
        states, fetches = self.states, self.fetches
        for key in keys:
            states.invalidate(key)
            if fetches.watched_ops(key):
                fetches.check_and_complete(key)

    # -- per-broker resources ----------------------------------------------------------

    def _channel(self, node_id: int) -> BrokerChannel:
        address = self._brokers.upstream_of(node_id)
        if address is None or self._nursery is None:
            raise RuntimeError(f"no upstream address known for broker {node_id}")
        return BrokerChannel(address, self._nursery, dialer=self._dialer)

    def _refetch_channel(self, node_id: int) -> BrokerChannel:
        """One of the broker's re-fetch channels, in turn: a broker answers a connection in
        order, so a re-fetch that the broker keeps (up to immediate_max_wait_ms) delays only
        the re-fetches queued behind it on the same channel."""
        channels = self._refetch_channels.get(node_id)
        if channels is None:
            channels = self._refetch_channels[node_id] = [
                self._channel(node_id) for _ in range(_REFETCH_CHANNELS)
            ]
        channels.append(channels.pop(0))
        return channels[0]

    def _watcher(self, node_id: int) -> UpstreamWatcher | OffsetWatcher:
        """The broker's watcher: a Fetch long-poll, or in passthrough ListOffsets only (the
        proxy identity learns offsets, never records)."""
        watcher = self._watchers.get(node_id)
        if watcher is None:
            if self._passthrough:
                watcher = OffsetWatcher(
                    node_id,
                    self._channel(node_id),
                    self.states,
                    self.names,
                    self.fetches,
                    self._offset_watch_interval_ms,
                    self._metrics,
                )
            else:
                watcher = UpstreamWatcher(
                    node_id,
                    self._channel(node_id),
                    self.states,
                    self.names,
                    self.fetches,
                    self._watcher_max_wait_ms,
                    self._metrics,
                )
            self._watchers[node_id] = watcher
            assert self._nursery is not None
            self._nursery.start_soon(watcher.run)
        return watcher
