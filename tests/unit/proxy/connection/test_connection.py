"""The sans-I/O Connection (proxy/connection/state.py): owed order, upstream matching, close
reasons. No trio, no streams: requests in, decisions out."""

from __future__ import annotations

import pytest

from proxy.connection.state import (
    MAX_OPTIONAL,
    NEED_REQUEST,
    REQUESTS_DONE,
    Arrival,
    Connection,
    Forwarded,
    Local,
    Unanswered,
)
from proxy.errors import ClientClosed, ConnectionClosed, IdleTimeout, UpstreamFailed
from proxy.routing.rewrite import RequestPlan
from wire.headers import RequestHeader

ARRIVAL = Arrival(0.0, 0.0, 0.0, 20, 0.0)


def forwarded(correlation_id: int) -> Forwarded:
    return Forwarded(RequestPlan(RequestHeader(3, 12, correlation_id), True, True), ARRIVAL)


def acks0(correlation_id: int) -> Unanswered:
    return Unanswered(RequestPlan(RequestHeader(0, 9, correlation_id), False, False), ARRIVAL)


def test_owed_slots_come_out_in_request_order_then_done() -> None:
    conn = Connection(max_in_flight=8)
    assert conn.next_owed() is NEED_REQUEST
    first, local, second = forwarded(1), Local(2, (18, 5), b"frame", ARRIVAL), forwarded(3)
    for slot in (first, local, acks0(4), second):
        conn.owe(slot)
    assert [conn.next_owed() for _ in range(3)] == [first, local, second]
    assert conn.next_owed() is NEED_REQUEST
    conn.end_requests()
    assert conn.next_owed() is REQUESTS_DONE


def test_has_room_counts_owed_responses_only() -> None:
    conn = Connection(max_in_flight=2)
    conn.owe(forwarded(1))
    conn.owe(acks0(2))  # owed nothing
    assert conn.has_room
    conn.owe(forwarded(3))
    assert not conn.has_room
    conn.next_owed()
    assert conn.has_room


def test_answers_to_acks0_produces_are_skipped_whether_or_not_they_come() -> None:
    conn = Connection(max_in_flight=8)
    for slot in (acks0(1), acks0(2), forwarded(3), acks0(4), forwarded(5)):
        conn.owe(slot)
    assert conn.upstream_answer(1) is False  # Tansu answers acks=0
    assert conn.upstream_answer(3) is True  # 2 got no answer (Kafka): passed over
    assert conn.upstream_answer(5) is True  # 4 got none either


def test_a_given_up_produce_answer_is_skipped_when_it_comes_late() -> None:
    conn = Connection(max_in_flight=8)
    conn.owe(forwarded(7))
    conn.owe(forwarded(8))
    conn.give_up(7)
    assert conn.upstream_answer(7) is False
    assert conn.upstream_answer(8) is True


def test_an_answer_out_of_step_fails_the_upstream() -> None:
    conn = Connection(max_in_flight=8)
    conn.owe(forwarded(1))
    with pytest.raises(UpstreamFailed, match="answered correlation id 2, expected 1"):
        conn.upstream_answer(2)
    with pytest.raises(UpstreamFailed, match="unasked"):
        Connection(max_in_flight=8).upstream_answer(1)


def test_the_first_close_reason_is_the_one_reported() -> None:
    conn = Connection(max_in_flight=8)
    conn.note_closed(IdleTimeout("idle for 600 s"))
    conn.note_closed(ClientClosed("later"))
    assert isinstance(conn.closed_by, IdleTimeout)
    assert conn.closed_by.kind == "idle_timeout"
    with pytest.raises(TypeError):
        ConnectionClosed("abstract")


def test_unanswered_acks0_entries_are_bounded_for_a_broker_that_never_answers_them() -> None:
    """Kafka never answers acks=0: a client that only sends acks=0 must not grow the ledger."""
    conn = Connection(max_in_flight=8)
    for correlation_id in range(MAX_OPTIONAL * 3):
        conn.owe(acks0(correlation_id))
    assert repr(conn) == f"<Connection owed=0 upstream={MAX_OPTIONAL}>"
    # A broker that does answer them answers in order: the newest are still recognised.
    assert conn.upstream_answer(MAX_OPTIONAL * 3 - 2) is False
    conn.owe(forwarded(MAX_OPTIONAL * 3))
    assert conn.upstream_answer(MAX_OPTIONAL * 3) is True
