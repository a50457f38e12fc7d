# Strategy: a client fetch crosses both pumps and the held-requests service; its ticket is what
# they share. It is the one owner of the fetch's response budget (its lease): the others hand
# it memory (`pay`, `share`) and it releases, shrinks or abandons it. Pure (no trio), so the
# connection's state machine can name it; memory and the purgatory appear as types only.
"""One client fetch on its way through the proxy: FetchTicket."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.held.fetch.decision import FetchDecision
from proxy.held.fetch.repeat import FetchRepeat
from proxy.held.fetch.session import FetchContext
from wire.messages.fetch_request import FetchRequest

if TYPE_CHECKING:
    from proxy.held.fetch.delayed import DelayedFetch
    from proxy.primitives.lease import Lease, LeaseShare, SharedLease

__all__ = ["FetchTicket"]


@dataclass(slots=True, eq=False)  # identity: a connection keeps a set of its tickets
class FetchTicket:
    """One client fetch on its way through the proxy.

    Attributes:
        request: the client's request, decoded.
        version: its Fetch version (the upstream fetches use the same one).
        node_id: the broker it was sent to.
        context: its session context (proxy/held/fetch/session.py).
        deadline_ms: arrival + max_wait_ms, on the purgatory's clock.
        decision: what the proxy does with it on arrival (proxy/held/fetch/decision.py).
        held_ms: time spent in the purgatory so far.
        expired: its wait ended by its deadline.
        hold: its wait in the purgatory, entered on arrival (HOLD) and not yet awaited,
            entered at ``hold_started_s`` (trio clock).
    """

    request: FetchRequest
    version: int
    node_id: int
    context: FetchContext
    deadline_ms: int
    decision: FetchDecision
    held_ms: float = 0.0
    expired: bool = False
    hold: DelayedFetch | None = None
    hold_started_s: float = 0.0
    _lease: Lease | LeaseShare | None = None
    _own: Lease | None = None  # the lease, while it is one of its own (not a shared part)

    @classmethod
    def of_repeat(
        cls, node_id: int, repeat: FetchRepeat, hold: DelayedFetch, held_from_s: float
    ) -> FetchTicket:
        """The ticket of a repeat held from its bytes, for its answer to be built after news:
        its hold (entered at ``held_from_s``) is already done."""
        ticket = cls(repeat.request, repeat.version, node_id, repeat.context,
                     hold.expiration_ms, FetchDecision.HOLD)  # fmt: skip
        ticket.hold, ticket.hold_started_s = hold, held_from_s
        return ticket

    # -- its memory: the one owner of the lease ----------------------------------------

    @property
    def lease(self) -> Lease | LeaseShare | None:
        """The pool memory behind the upstream answer its response is built from."""
        return self._lease

    @property
    def own_lease(self) -> Lease | None:
        """The lease, while it is the ticket's alone (what a shared answer's lease is made
        of, ``share``)."""
        return self._own

    def pay(self, lease: Lease) -> None:
        """The budget of its next upstream answer; the previous answer's is released (a
        ticket never holds two leases)."""
        self.release()
        self._lease = self._own = lease

    def share(self, shared: SharedLease) -> None:
        """Its answer is shared (identical reads in flight): its memory is now a part of
        ``shared``, which took over the ticket's own lease if it was the reader's."""
        self._lease, self._own = shared.part(), None

    def shrink(self, size_bytes: int) -> None:
        """Trade the response budget for what the answer really takes, now that it is read:
        a fetch held for seconds keeps a few hundred bytes of the pool, not max_bytes."""
        own = self._own
        if own is not None and not own.released:
            own.shrink_to(max(1, min(size_bytes, own.size_bytes)))

    def release(self) -> None:
        """Its response is written (or replaced): the memory is the pool's again."""
        lease, self._lease, self._own = self._lease, None, None
        if lease is not None and not lease.released:
            lease.release()

    def abandon(self) -> None:
        """Its connection ended: return its memory, take its wait out of the purgatory."""
        self.release()
        hold, self.hold = self.hold, None
        if hold is not None:
            hold.force_complete()
