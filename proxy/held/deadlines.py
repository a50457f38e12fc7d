# Strategy: the one place a held operation's deadline is computed. The purgatory's wheel expires
# each held operation at the deadline given here, and nothing else times it: a fetch waits at
# most its max_wait_ms from its arrival, a produce at most what is left of its timeout_ms once
# its answer is due. Pure (no trio, no clock): the caller passes the times it read.
"""When a held fetch or produce must be answered."""

from __future__ import annotations

__all__ = ["fetch_deadline_ms", "produce_hold_ms"]


def fetch_deadline_ms(arrival_ms: int, max_wait_ms: int) -> int:
    """When a fetch that arrived at ``arrival_ms`` (purgatory clock) is answered at the
    latest: its max wait later (a negative max wait, as Kafka reads it, is none)."""
    return arrival_ms + max(max_wait_ms, 0)


def produce_hold_ms(timeout_ms: int, waited_ms: int, answered: bool) -> int | None:
    """How long a produce (acks=1/all, ``timeout_ms``, sent ``waited_ms`` ago) is held in the
    produce purgatory for its answer; None: answer it now, without holding (its answer is in
    hand already, or it may not wait: a purgatory entry would cost more than the rest)."""
    if timeout_ms <= 0 or answered:
        return None
    return max(0, timeout_ms - waited_ms)
