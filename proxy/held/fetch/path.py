# Strategy: the fetch side of the held path, shared by every connection of the proxy: a fetch is
# planned on arrival (planning.py), may enter the purgatory at once (holding.py), and is answered
# by `FetchPath.answer`, which only carries out the decisions (decision.py): a first look, then
# holds and re-reads (refetch.py) until the answer satisfies the client or its deadline passes.
# One connection's side of it is client.py.
"""The held fetch path of one proxy: planning, holding, reads and the answer loop."""

from __future__ import annotations

import trio

from proxy.config import Config
from proxy.errors import UpstreamUnavailable
from proxy.held.fetch.answer import FetchResults, build_response, error_response, satisfied
from proxy.held.fetch.brokers import BrokerAddresses, BrokerResources
from proxy.held.fetch.decision import FetchDecision, decide_after_read
from proxy.held.fetch.holding import FetchHolding
from proxy.held.fetch.planning import FetchPlanner
from proxy.held.fetch.refetch import FetchReads, UpstreamReads, broker_gone
from proxy.held.fetch.session import ContextKind
from proxy.held.fetch.ticket import FetchTicket
from proxy.held.partition_state import PartitionStates
from proxy.observability.metrics import Metrics
from proxy.primitives.memory import MemoryPool
from proxy.primitives.purgatory import Purgatory, current_time_ms
from proxy.routing.topic_names import TopicNames
from proxy.upstream.dialer import Dialer
from wire.messages.fetch_response import FetchResponse

__all__ = ["FetchPath"]


class FetchPath:
    """Held fetches of one proxy.

    Args:
        config: the [fetch] and [proxy] sections, connections.upstream_answer_grace_ms.
        pool: the KIP-72 pool the upstream fetches' response budgets come from.
        metrics: upstream-fetch and watcher series.
        fetches: the fetch purgatory.
        states, names: what the proxy knows of partitions, and topic names.
        brokers: where each broker is, for re-fetch channels and watchers.
        dialer: how those channels connect.

    Attributes:
        planner: a fetch's arrival (its ticket and decision).
        holding: fetches entering the purgatory.
        response_max_bytes: an upstream fetch's response budget.
    """

    def __init__(
        self,
        config: Config,
        pool: MemoryPool,
        metrics: Metrics,
        fetches: Purgatory,
        states: PartitionStates,
        names: TopicNames,
        brokers: BrokerAddresses,
        dialer: Dialer,
    ) -> None:
        fetch = config.fetch
        self.response_max_bytes = min(int(fetch.response_max_bytes), pool.max_allocation_bytes)
        self._immediate_max_wait_ms = fetch.immediate_max_wait_ms
        self.states = states
        self.names = names
        self._resources = resources = BrokerResources(
            brokers, dialer, states, names, fetches, fetch, metrics,
            passthrough=config.proxy.client_auth == "passthrough",
        )  # fmt: skip
        self.planner = FetchPlanner(resources, states, names, self.response_max_bytes,
                                    self._immediate_max_wait_ms, fetches,
                                    fetch.busy_window_ms)  # fmt: skip
        self.holding = FetchHolding(fetches, resources, self.planner, states, names)
        self._reads = UpstreamReads(
            pool, resources, self.planner, states, names, fetches, metrics,
            response_max_bytes=self.response_max_bytes,
            answer_grace_s=config.connections.upstream_answer_grace_ms / 1000,
        )  # fmt: skip

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the brokers' resources (channels, watchers, the partition-state sweep)."""
        await self._resources.run(task_status=task_status)

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
                UpstreamFailed when the broker cannot be read (see refetch.broker_gone).
        """
        context = ticket.context
        if context.kind is ContextKind.ERROR:
            return error_response(context.error_code)
        request, reading = ticket.request, self._reads
        results = FetchResults()
        if first is not None:
            results = reading.first_look_answered(ticket, first)
        elif ticket.decision is FetchDecision.FETCH:
            try:
                results = await reading.read(ticket, self._immediate_max_wait_ms, reads, first=True)
            except UpstreamUnavailable as error:
                raise broker_gone(error) from None
        if results.error_code:  # the broker refused the whole fetch: pass it on
            return error_response(results.error_code)
        now_ms = current_time_ms()
        patient = True
        while True:
            decision = decide_after_read(request, context, results, now_ms, ticket.deadline_ms,
                                         held=ticket.hold is not None, patient=patient)  # fmt: skip
            if decision is FetchDecision.ANSWER:
                # A busy consumer's long-poll that ran out at the broker expired there.
                ticket.expired = ticket.decision is FetchDecision.POLL and not satisfied(
                    results, request.min_bytes
                )
                break
            try:
                if decision is FetchDecision.FETCH:  # records reported, not returned: again
                    results = await reading.read(ticket, ticket.deadline_ms - now_ms, reads)
                    patient = False
                elif await self.holding.wait(ticket, now_ms):  # news: read, once patient
                    results = await reading.read(ticket, self._immediate_max_wait_ms, reads)
                    patient = True
                else:
                    ticket.expired = True
                    break
            except UpstreamUnavailable as error:
                raise broker_gone(error) from None
            now_ms = current_time_ms()
        # Passthrough: the cluster's answer on this connection as it is, or (nothing asked)
        # what this connection has itself read; never a partition filled in from others.
        fill = None if reads is None else (() if results.answered else reads.known)
        return build_response(context, results, self.states, self.names, current_time_ms(), fill)
