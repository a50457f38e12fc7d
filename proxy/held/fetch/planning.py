# Strategy: when a Fetch arrives, its session is applied and the one decision is made (answer
# now, hold, or fetch: decision.py) from what the proxy knows of its partitions; its deadline is
# proxy/held/deadlines.py's. Planning is synchronous and never touches the network; it also
# builds the upstream request a ticket's reads send.
"""A client fetch's arrival: its session applied, its decision made, its upstream request."""

from __future__ import annotations

from collections import Counter
from collections.abc import Container

from proxy.held.deadlines import fetch_deadline_ms
from proxy.held.fetch.answer import canonical, upstream_request
from proxy.held.fetch.brokers import BrokerResources
from proxy.held.fetch.decision import decide_fetch
from proxy.held.fetch.session import FetchContext
from proxy.held.fetch.ticket import FetchTicket
from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.primitives.purgatory import Purgatory, current_time_ms
from proxy.routing.topic_names import TopicNames
from wire.messages.fetch_request import FetchRequest

__all__ = ["FetchPlanner"]


class FetchPlanner:
    """Tickets for arriving fetches.

    Args:
        resources: the brokers' fetch sessions.
        states, names: what the proxy knows of partitions.
        response_max_bytes: an upstream fetch's budget (the pool's largest allocation at most).
        immediate_max_wait_ms: how long a first look may let the broker wait.
        fetches: the fetch purgatory (a busy partition others wait on is read for them all).
        busy_window_ms: two moves of a partition's readable end within this long make it
            busy (0: never busy).
    """

    def __init__(
        self,
        resources: BrokerResources,
        states: PartitionStates,
        names: TopicNames,
        response_max_bytes: int,
        immediate_max_wait_ms: int,
        fetches: Purgatory,
        busy_window_ms: int,
    ) -> None:
        self._resources = resources
        self._states = states
        self._names = names
        self._response_max_bytes = response_max_bytes
        self._immediate_max_wait_ms = immediate_max_wait_ms
        self._fetches = fetches
        self._busy_window_ms = busy_window_ms
        # Partitions (canonical keys) under a busy consumer's long-poll now, and how many.
        self._polled: Counter[PartitionKey] = Counter()

    def plan(
        self,
        node_id: int,
        request: FetchRequest,
        version: int,
        known: Container[tuple[object, int]] | None = None,
    ) -> FetchTicket:
        """Apply the request to its session and decide what becomes of it.

        ``known``: the partitions (as the client names them) the proxy may answer from its
        own knowledge; None = all (passthrough: only what the connection has read itself, and
        never a long-poll of the client's: its reads are its own already).
        """
        now_ms = current_time_ms()
        context = self._resources.sessions(node_id).new_context(request, now_ms)
        isolation = request.isolation_level
        decision = decide_fetch(
            context,
            request.max_wait_ms,
            lambda context: self.nothing_new(context, isolation, now_ms, known),
            (lambda context: self._busy(context, now_ms)) if known is None else _never_busy,
        )
        deadline_ms = fetch_deadline_ms(now_ms, request.max_wait_ms)
        return FetchTicket(request, version, node_id, context, deadline_ms, decision)

    def _busy(self, context: FetchContext, now_ms: int) -> bool:
        """Whether records keep coming on ``context``'s partitions (one of them moved twice
        within the busy window) and no other fetch waits on them, held or long-polling (then
        one read answers them all, which a long-poll of this client's would not share)."""
        window_ms, names, states = self._busy_window_ms, self._names, self._states
        if not window_ms:
            return False
        keys = [canonical(key, names) for key in context.partitions]
        polled, fetches = self._polled, self._fetches
        return any(states.busy(key, now_ms, window_ms) for key in keys) and not any(
            key in polled or fetches.waiting_on(key) for key in keys
        )

    def polling(self, ticket: FetchTicket, out: bool) -> None:
        """``ticket``'s long-poll went upstream (``out``), or its answer came or it was
        abandoned: while it is out, other fetches of its partitions wait in the purgatory
        for what it reads."""
        keys = [canonical(key, self._names) for key in ticket.context.partitions]
        if out:
            self._polled.update(keys)
        else:
            self._polled.subtract(keys)
            self._polled += Counter()  # (drops the partitions no long-poll is out for)

    def nothing_new(
        self,
        context: FetchContext,
        isolation: int,
        now_ms: int,
        known: Container[tuple[object, int]] | None = None,
    ) -> bool:
        """Whether the proxy knows none of ``context``'s partitions has anything its client
        has not seen (only ``known`` ones count, when given)."""
        names, states = self._names, self._states
        return all(
            (known is None or key in known)
            and states.nothing_new(canonical(key, names), cached.fetch_offset, isolation, now_ms)
            for key, cached in context.partitions.items()
        )

    def immediate_request(
        self, ticket: FetchTicket, max_wait_ms: int | None = None
    ) -> FetchRequest:
        """The upstream fetch for ``ticket`` (by default the first look's max wait)."""
        if max_wait_ms is None:
            max_wait_ms = self._immediate_max_wait_ms
        return upstream_request(
            ticket.request, ticket.context, self._response_max_bytes, max_wait_ms
        )

    def poll_request(self, ticket: FetchTicket) -> FetchRequest:
        """The upstream fetch of a busy consumer's ``ticket`` (decision POLL): the client's
        own long-poll, its max wait and min bytes."""
        request = ticket.request
        return upstream_request(request, ticket.context, self._response_max_bytes,
                                request.max_wait_ms, request.min_bytes)  # fmt: skip


def _never_busy(context: FetchContext) -> bool:
    return False
