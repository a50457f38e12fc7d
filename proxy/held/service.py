# Strategy: one service per proxy owns what held requests share (issue 6), and is the held path's
# one face: a connection plans a fetch (`planner`), may hold it at once (`holding`), and awaits
# its `answer`; it holds a produce (`produce`). The concerns live in modules of their own:
#
#   HeldRequests.run()  (in the server's services nursery)
#   ├── fetch purgatory clock      DelayedFetch: client fetches waiting for data
#   ├── produce purgatory clock    DelayedProduce: forwarded produces waiting for their answer
#   └── BrokerResources.run        per broker, on first use: re-fetch channels and watcher
#                                  (proxy/held/brokers.py), and the partition-table sweep
#
# Whose identity reads (client_auth): the proxy's shares reads on the brokers' channels; the
# client's (passthrough) reads on its own connection and is answered only from what it read
# itself (proxy/held/refetch.py, proxy/held/planning.py).
"""The held-requests service: purgatories, planning, holding, reads, produces."""

from __future__ import annotations

import trio

from proxy.config import Config
from proxy.errors import UpstreamUnavailable
from proxy.held.brokers import BrokerAddresses, BrokerResources
from proxy.held.decision import FetchDecision, decide_after_read
from proxy.held.fetch_answer import FetchResults, build_response, error_response
from proxy.held.fetch_session import ContextKind
from proxy.held.holding import FetchHolding
from proxy.held.partition_state import PartitionStates
from proxy.held.planning import FetchPlanner
from proxy.held.produce import HeldProduces
from proxy.held.refetch import FetchReads, UpstreamReads, broker_gone
from proxy.held.ticket import FetchTicket
from proxy.observability.metrics import Metrics
from proxy.primitives.memory import MemoryPool
from proxy.primitives.purgatory import Purgatory, current_time_ms
from proxy.routing.topic_names import TopicNames
from proxy.upstream.dialer import Dialer
from wire.messages.fetch_response import FetchResponse

__all__ = ["HeldRequests"]


class HeldRequests:
    """Held fetches and produces of one proxy.

    Args:
        config: the [fetch], [purgatory] and [proxy] sections are read, and
            connections.upstream_answer_grace_ms.
        pool: the KIP-72 pool the upstream fetches' response budgets come from.
        metrics: purgatory and upstream-fetch series.
        names: topic id -> name, learnt from Metadata.
        brokers: where each broker is, for re-fetch channels and watchers.
        dialer: how those channels connect.

    Attributes:
        planner: a fetch's arrival (its ticket and decision).
        holding: fetches entering the purgatory.
        reads: a held fetch's upstream reads.
        produce: produces held for their answer, and the fetches they wake.
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
        fetch, purgatory = config.fetch, config.purgatory
        self.response_max_bytes = min(int(fetch.response_max_bytes), pool.max_allocation_bytes)
        self._immediate_max_wait_ms = fetch.immediate_max_wait_ms
        wheel = {"tick_ms": purgatory.tick_ms, "wheel_size": purgatory.wheel_size,
                 "purge_interval": purgatory.purge_interval}  # fmt: skip
        self.fetches = Purgatory(**wheel)
        self.produces = Purgatory(**wheel)
        self.states = states = PartitionStates()
        self.names = names
        self._resources = resources = BrokerResources(
            brokers, dialer, states, names, self.fetches, fetch, metrics,
            passthrough=config.proxy.client_auth == "passthrough",
        )  # fmt: skip
        self.planner = FetchPlanner(resources, states, names, self.response_max_bytes,
                                    self._immediate_max_wait_ms)  # fmt: skip
        self.holding = FetchHolding(self.fetches, resources, self.planner, states, names)
        self.reads = UpstreamReads(
            pool, resources, self.planner, states, names, self.fetches, metrics,
            response_max_bytes=self.response_max_bytes,
            answer_grace_s=config.connections.upstream_answer_grace_ms / 1000,
        )  # fmt: skip
        self.produce = HeldProduces(self.produces, self.fetches, states)
        metrics.attach_purgatory("fetch", self.fetches)
        metrics.attach_purgatory("produce", self.produces)
        metrics.attach_partition_states(states)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the purgatories' clocks and the brokers' resources (channels, watchers, the
        partition-state sweep)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.fetches.run)
            await nursery.start(self.produces.run)
            await nursery.start(self._resources.run)
            task_status.started()

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
        request = ticket.request
        results = FetchResults()
        if first is not None:
            results = self.reads.first_look_answered(ticket, first)
        elif ticket.decision is FetchDecision.FETCH:
            try:
                results = await self.reads.read(
                    ticket, self._immediate_max_wait_ms, reads, first=True
                )
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
                break
            try:
                if decision is FetchDecision.FETCH:  # records reported, not returned: again
                    results = await self.reads.read(ticket, ticket.deadline_ms - now_ms, reads)
                    patient = False
                elif await self.holding.wait(ticket, now_ms):  # news: read, once patient
                    results = await self.reads.read(ticket, self._immediate_max_wait_ms, reads)
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
