# Strategy: "answer now, hold, or fetch" was decided in seven places over two pumps; here it is one
# pure function per request kind, called once per request, so the held path has one way in.
# Pure (no trio, no clock): the caller passes what it knows.
"""What the proxy does with a fetch or a produce it holds: one decision each."""

from __future__ import annotations

import enum
from collections.abc import Callable

from proxy.held.fetch_session import ContextKind, FetchContext

__all__ = ["FetchDecision", "decide_fetch", "produce_hold_ms"]


class FetchDecision(enum.Enum):
    """What becomes of a client fetch when it arrives."""

    #: A session error, or no partitions: answered at once, with nothing (Kafka does so).
    ANSWER = "answer"
    #: The proxy knows nothing is new and the client may wait: into the purgatory at once.
    HOLD = "hold"
    #: The broker is asked first (the first look); held after it while Kafka would hold.
    FETCH = "fetch"


def decide_fetch(
    context: FetchContext, max_wait_ms: int, nothing_new: Callable[[FetchContext], bool]
) -> FetchDecision:
    """The decision for a fetch of ``context`` (its session applied) that may wait
    ``max_wait_ms``; ``nothing_new`` says whether the proxy knows its partitions have nothing
    the client has not seen (asked only when it matters: it reads every partition)."""
    if context.kind is ContextKind.ERROR or not context.partitions:
        return FetchDecision.ANSWER
    if max_wait_ms > 0 and nothing_new(context):
        return FetchDecision.HOLD
    return FetchDecision.FETCH


def produce_hold_ms(timeout_ms: int, waited_ms: int, answered: bool) -> int | None:
    """How long a produce (acks=1/all, ``timeout_ms``, sent ``waited_ms`` ago) is held in the
    produce purgatory for its answer; None: answer it now, without holding (its answer is in
    hand already, or it may not wait: a purgatory entry would cost more than the rest)."""
    if timeout_ms <= 0 or answered:
        return None
    return max(0, timeout_ms - waited_ms)
