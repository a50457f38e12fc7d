# Strategy: the one way a fetch enters the fetch purgatory (`_enter`): a DelayedFetch on its
# partitions until news or its deadline, and the broker's watcher asked to cover them. From
# the request pump at once (`hold_now`; `hold_repeat` for an idle consumer's repeat known by
# its bytes), or from the answer's loop after a read (`wait`). The wheel owns the deadline;
# the holder only waits for completion.
"""Holding fetches in the purgatory."""

from __future__ import annotations

import trio

from proxy.held.deadlines import fetch_deadline_ms
from proxy.held.fetch.answer import reached_offsets
from proxy.held.fetch.brokers import BrokerResources
from proxy.held.fetch.decision import FetchDecision, decide_fetch
from proxy.held.fetch.delayed import DelayedFetch
from proxy.held.fetch.planning import FetchPlanner
from proxy.held.fetch.repeat import FetchRepeat
from proxy.held.fetch.session import FINAL_EPOCH, FetchContext
from proxy.held.fetch.ticket import FetchTicket
from proxy.held.partition_state import PartitionStates
from proxy.primitives.purgatory import Purgatory, current_time_ms
from proxy.routing.topic_names import TopicNames

__all__ = ["FetchHolding"]


class FetchHolding:
    """Fetches waiting in the fetch purgatory.

    Args:
        fetches: the fetch purgatory.
        resources: the brokers' sessions and watchers.
        planner: whether a repeat has anything new.
        states, names: what the proxy knows of partitions.
    """

    def __init__(
        self,
        fetches: Purgatory,
        resources: BrokerResources,
        planner: FetchPlanner,
        states: PartitionStates,
        names: TopicNames,
    ) -> None:
        self._fetches = fetches
        self._resources = resources
        self._planner = planner
        self._states = states
        self._names = names

    def hold_repeat(
        self, node_id: int, repeat: FetchRepeat, epoch: int, wake: trio.lowlevel.ParkingLot
    ) -> DelayedFetch | None:
        """Hold an idle consumer's repeated fetch, recognised by its bytes
        (proxy/held/fetch/repeat.py), at once: no decoding, no ticket. Only if its session is
        where the repeat says (sessionless: the epoch is still -1) and the decision is HOLD;
        None to plan it the ordinary way (which also answers a session error). Completion
        unparks ``wake`` (as ``hold_now``). Only with the proxy's identity: passthrough plans
        what its connection has read.

        Its answer needs a ticket only if something happened (``FetchTicket.of_repeat``): an
        expiry with nothing to tell is the session's empty answer
        (proxy/held/fetch/answer.py, ``nothing_to_tell``).
        """
        session, cache = repeat.session, self._resources.known_sessions(node_id)
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
            lambda context: self._planner.nothing_new(context, isolation, now_ms),
        )
        if decision is not FetchDecision.HOLD:
            return None
        deadline_ms = fetch_deadline_ms(now_ms, request.max_wait_ms)
        operation = self._enter(node_id, context, isolation, now_ms, deadline_ms, wake)
        if operation is None:
            return None  # (cannot be: nothing new, and nothing awaited since the check)
        if session is not None and cache is not None:
            cache.renew(session, now_ms)
        return operation

    def hold_now(self, ticket: FetchTicket, wake: trio.lowlevel.ParkingLot) -> bool:
        """Enter the purgatory at once with a fetch whose decision is HOLD (True: it waits;
        False: news came in the meantime, the answer re-fetches as usual).

        The client connection calls this from its request pump, and completion unparks
        ``wake`` (its response pump's lot): an idle consumer's fetch then costs its response
        pump one wake-up, when the fetch is done, instead of one to start the hold and one to
        end it. The answer awaits the hold (``ticket.hold``, in ``wait``).
        """
        operation = self._enter_ticket(ticket, current_time_ms(), wake)
        if operation is None:
            return False
        ticket.hold, ticket.hold_started_s = operation, trio.current_time()
        return True

    async def wait(self, ticket: FetchTicket, now_ms: int) -> bool:
        """Wait in the purgatory until a partition has news (True) or the deadline (False)."""
        operation, ticket.hold = ticket.hold, None
        if operation is not None:  # entered from the request pump (hold_now)
            started_s = ticket.hold_started_s
        else:
            started_s = trio.current_time()
            operation = self._enter_ticket(ticket, now_ms)
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

    def _enter_ticket(
        self, ticket: FetchTicket, now_ms: int, wake: trio.lowlevel.ParkingLot | None = None
    ) -> DelayedFetch | None:
        return self._enter(ticket.node_id, ticket.context, ticket.request.isolation_level,
                           now_ms, ticket.deadline_ms, wake)  # fmt: skip

    def _enter(
        self,
        node_id: int,
        context: FetchContext,
        isolation: int,
        now_ms: int,
        deadline_ms: int,
        wake: trio.lowlevel.ParkingLot | None,
    ) -> DelayedFetch | None:
        """The one way in: a wait in the purgatory for ``context``'s partitions until news or
        ``deadline_ms``, registered, and the broker's watcher asked to cover them (None: it
        completed at once)."""
        states = self._states
        operation = DelayedFetch(
            deadline_ms - now_ms,
            states,
            reached_offsets(context, states, self._names, isolation),
            isolation,
            wake,
        )
        keys = operation.keys
        if self._fetches.try_complete_else_watch(operation, keys, now_ms):
            return None
        epochs = [cached.current_leader_epoch for cached in context.partitions.values()]
        watcher = self._resources.watcher(node_id)
        watcher.want(keys, deadline_ms, epochs, deadline_ms - now_ms)  # (epochs in keys' order)
        return operation
