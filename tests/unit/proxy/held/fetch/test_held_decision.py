"""The one decision on a fetch (answer now, hold, or fetch: on arrival and after each read) and
on a produce's hold, as pure functions (proxy/held/fetch/decision.py)."""

from __future__ import annotations

from proxy.held.deadlines import produce_hold_ms
from proxy.held.fetch.answer import FetchResults
from proxy.held.fetch.decision import FetchDecision, decide_after_read, decide_fetch
from proxy.held.fetch.session import FetchSessionCache
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.fetch_response import PartitionData


def fetch(
    max_wait_ms: int, partitions: int = 1, session_id: int = 0, epoch: int = -1
) -> FetchRequest:
    offsets = [FetchPartition(partition=p, fetch_offset=5) for p in range(partitions)]
    topics = [FetchTopic(topic="t", partitions=offsets)] if partitions else []
    return FetchRequest(
        max_wait_ms=max_wait_ms, session_id=session_id, session_epoch=epoch, topics=topics
    )


def decide(request: FetchRequest, nothing_new: bool) -> tuple[FetchDecision, int]:
    asked = []

    def knows_nothing_new(context: object) -> bool:
        asked.append(context)
        return nothing_new

    context = FetchSessionCache().new_context(request, now_ms=0)
    return decide_fetch(context, request.max_wait_ms, knows_nothing_new), len(asked)


def test_a_fetch_with_nothing_new_that_may_wait_is_held() -> None:
    assert decide(fetch(500), nothing_new=True) == (FetchDecision.HOLD, 1)


def test_a_fetch_with_possible_news_or_no_patience_asks_the_broker() -> None:
    assert decide(fetch(500), nothing_new=False) == (FetchDecision.FETCH, 1)
    assert decide(fetch(0), nothing_new=True) == (FetchDecision.FETCH, 0)


def test_a_session_error_or_no_partitions_is_answered_at_once_without_looking() -> None:
    unknown_session = fetch(500, session_id=12345, epoch=3)  # FETCH_SESSION_ID_NOT_FOUND
    assert decide(unknown_session, nothing_new=True) == (FetchDecision.ANSWER, 0)
    assert decide(fetch(500, partitions=0), nothing_new=True) == (FetchDecision.ANSWER, 0)


def test_a_busy_consumers_fetch_that_may_wait_is_its_own_long_poll() -> None:
    context = FetchSessionCache().new_context(fetch(500), now_ms=0)
    busy, quiet = (lambda context: True), (lambda context: False)
    assert decide_fetch(context, 500, quiet, busy) is FetchDecision.POLL
    assert decide_fetch(context, 500, busy, busy) is FetchDecision.POLL  # news or not
    assert decide_fetch(context, 0, busy, busy) is FetchDecision.FETCH  # it may not wait
    assert decide_fetch(context, 500, busy, quiet) is FetchDecision.HOLD


def test_a_produce_is_held_for_what_is_left_of_its_timeout_unless_answered() -> None:
    assert produce_hold_ms(1000, 200, answered=False) == 800
    assert produce_hold_ms(1000, 1500, answered=False) == 0  # expires at the next tick
    assert produce_hold_ms(1000, 0, answered=True) is None
    assert produce_hold_ms(0, 0, answered=False) is None


def after_read(
    results: FetchResults, now_ms: int = 0, *, held: bool = False, patient: bool = True
) -> FetchDecision:
    request = fetch(500)
    request.min_bytes = 1
    context = FetchSessionCache().new_context(request, now_ms=0)
    return decide_after_read(request, context, results, now_ms, 500, held=held, patient=patient)


def answered(records: bytes | None, high_watermark: int = 5) -> FetchResults:
    data = PartitionData(partition_index=0, high_watermark=high_watermark, records=records)
    return FetchResults(partitions={("t", 0): data}, answered=True)


def test_after_a_read_a_satisfied_or_late_fetch_is_answered() -> None:
    assert after_read(answered(b"records")) is FetchDecision.ANSWER
    assert after_read(answered(None), now_ms=500) is FetchDecision.ANSWER


def test_after_a_read_with_nothing_the_fetch_is_held_until_news() -> None:
    assert after_read(answered(None)) is FetchDecision.HOLD
    assert after_read(FetchResults(), held=True) is FetchDecision.HOLD  # held on arrival


def test_records_reported_but_not_returned_are_asked_again_once_per_wake_up() -> None:
    unread = answered(None, high_watermark=9)  # the client is at 5: 5..8 not returned
    assert after_read(unread) is FetchDecision.FETCH
    assert after_read(unread, patient=False) is FetchDecision.HOLD
