# Strategy: when a Fetch arrives, its session is applied and the one decision is made (answer
# now, hold, or fetch: decision.py) from what the proxy knows of its partitions; its deadline is
# proxy/held/deadlines.py's. Planning is synchronous and never touches the network; it also
# builds the upstream request a ticket's reads send.
"""A client fetch's arrival: its session applied, its decision made, its upstream request."""

from __future__ import annotations

from collections.abc import Container

from proxy.held.deadlines import fetch_deadline_ms
from proxy.held.fetch.answer import canonical, upstream_request
from proxy.held.fetch.brokers import BrokerResources
from proxy.held.fetch.decision import decide_fetch
from proxy.held.fetch.session import FetchContext
from proxy.held.fetch.ticket import FetchTicket
from proxy.held.partition_state import PartitionStates
from proxy.primitives.purgatory import current_time_ms
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
    """

    def __init__(
        self,
        resources: BrokerResources,
        states: PartitionStates,
        names: TopicNames,
        response_max_bytes: int,
        immediate_max_wait_ms: int,
    ) -> None:
        self._resources = resources
        self._states = states
        self._names = names
        self._response_max_bytes = response_max_bytes
        self._immediate_max_wait_ms = immediate_max_wait_ms

    def plan(
        self,
        node_id: int,
        request: FetchRequest,
        version: int,
        known: Container[tuple[object, int]] | None = None,
    ) -> FetchTicket:
        """Apply the request to its session and decide what becomes of it.

        ``known``: the partitions (as the client names them) the proxy may answer from its
        own knowledge; None = all (passthrough: only what the connection has read itself).
        """
        now_ms = current_time_ms()
        context = self._resources.sessions(node_id).new_context(request, now_ms)
        isolation = request.isolation_level
        decision = decide_fetch(
            context,
            request.max_wait_ms,
            lambda context: self.nothing_new(context, isolation, now_ms, known),
        )
        deadline_ms = fetch_deadline_ms(now_ms, request.max_wait_ms)
        return FetchTicket(request, version, node_id, context, deadline_ms, decision)

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
