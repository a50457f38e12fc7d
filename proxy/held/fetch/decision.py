# Strategy: what becomes of a client fetch is one pure decision: on arrival (answer now, hold, or
# fetch) and after each read of the broker. The holders only carry it out. Pure (no trio, no
# clock): the caller passes what it knows; when it is due is proxy/held/deadlines.py's.
"""What the proxy does with a fetch it answers itself: one decision."""

from __future__ import annotations

import enum
from collections.abc import Callable

from proxy.held.fetch.answer import FetchResults, has_unread_records, satisfied
from proxy.held.fetch.session import ContextKind, FetchContext
from wire.messages.fetch_request import FetchRequest

__all__ = ["FetchDecision", "decide_after_read", "decide_fetch"]


class FetchDecision(enum.Enum):
    """What becomes of a client fetch: on arrival (``decide_fetch``) and after each read of
    the broker (``decide_after_read``)."""

    #: Answered now, with what there is (on arrival: a session error, or no partitions).
    ANSWER = "answer"
    #: Into the purgatory until news or the deadline (on arrival: nothing new is known).
    HOLD = "hold"
    #: The broker is asked (on arrival: the first look; after a read: at once, again).
    FETCH = "fetch"
    #: On arrival only: the broker is asked to hold it, as the client's own long-poll (its
    #: max wait and min bytes): a busy consumer's answer in one round trip.
    POLL = "poll"


def _never(context: FetchContext) -> bool:
    return False


def decide_fetch(
    context: FetchContext,
    max_wait_ms: int,
    nothing_new: Callable[[FetchContext], bool],
    busy: Callable[[FetchContext], bool] = _never,
) -> FetchDecision:
    """The decision for a fetch of ``context`` (its session applied) that may wait
    ``max_wait_ms``; ``busy`` says whether records keep coming on its partitions and no other
    fetch waits on them (then the broker holds it: one round trip per answer, where a hold
    and a re-fetch take two); ``nothing_new`` whether the proxy knows its partitions have
    nothing the client has not seen. Each is asked only when it matters (they read every
    partition)."""
    if context.kind is ContextKind.ERROR or not context.partitions:
        return FetchDecision.ANSWER
    if max_wait_ms > 0 and busy(context):
        return FetchDecision.POLL
    if max_wait_ms > 0 and nothing_new(context):
        return FetchDecision.HOLD
    return FetchDecision.FETCH


def decide_after_read(
    request: FetchRequest,
    context: FetchContext,
    results: FetchResults,
    now_ms: int,
    deadline_ms: int,
    *,
    held: bool,
    patient: bool,
) -> FetchDecision:
    """The decision for a fetch after a read of the broker (``results``; empty when nothing
    was read), as long as Kafka would hold it: ANSWER once the deadline passed or the answer
    satisfies the client (min_bytes, or an error); FETCH again at once when the broker
    reported records it did not return (a broker that reads its storage within max_wait),
    once per wake-up (``patient``); else HOLD. ``held``: it is in the purgatory already
    (entered on arrival), which it leaves only by news or its deadline."""
    if not held and (
        now_ms >= deadline_ms or not context.partitions or satisfied(results, request.min_bytes)
    ):
        return FetchDecision.ANSWER
    if patient and has_unread_records(context, results, request.isolation_level):
        return FetchDecision.FETCH
    return FetchDecision.HOLD
