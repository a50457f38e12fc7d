"""The slot decision is the state machine's (Connection.receive): what a request that is not
a held fetch becomes, from its plan alone. No trio, no streams."""

from __future__ import annotations

import uuid

from proxy.connection.state import (
    Arrival,
    Connection,
    Forwarded,
    HeldProduce,
    Local,
    Unanswered,
)
from proxy.routing.rewrite import LocalAnswer, ProducedPartitions, RequestPlan
from wire.headers import RequestHeader

ARRIVAL = Arrival(1.0, 2.0, 0.0, 20, 1.5)
#: A request header's fixed start: api key 18 (ApiVersions), version 3, correlation id 7.
API_VERSIONS_BODY = memoryview(bytes([0, 18, 0, 3, 0, 0, 0, 7, 0xFF, 0xFF]))
PRODUCED = ProducedPartitions(1000, (("t", uuid.UUID(int=0), (0,)),))


def receive(plan: RequestPlan | LocalAnswer, *, hold_produce: bool = True) -> object:
    return Connection(8).receive(plan, API_VERSIONS_BODY, ARRIVAL, hold_produce=hold_produce)


def test_a_local_answer_is_a_local_slot_named_by_its_api() -> None:
    slot = receive(LocalAnswer(7, b"answer"))
    assert slot == Local(7, (18, 3), b"answer", ARRIVAL)


def test_acks0_is_owed_nothing_and_other_requests_are_forwarded() -> None:
    acks0 = RequestPlan(RequestHeader(0, 9, 1), False, False, produced=PRODUCED)
    metadata = RequestPlan(RequestHeader(3, 12, 2), True, True)
    assert receive(acks0) == Unanswered(acks0, ARRIVAL)
    assert receive(metadata) == Forwarded(metadata, ARRIVAL)


def test_a_produce_is_held_only_when_produces_are_held() -> None:
    produce = RequestPlan(RequestHeader(0, 9, 3), True, False, produced=PRODUCED)
    assert receive(produce) == HeldProduce(produce, PRODUCED, ARRIVAL)
    assert receive(produce, hold_produce=False) == Forwarded(produce, ARRIVAL)


def test_receiving_owes_nothing_by_itself() -> None:
    conn = Connection(1)
    conn.receive(RequestPlan(RequestHeader(3, 12, 2), True, True), API_VERSIONS_BODY, ARRIVAL,
                 hold_produce=True)  # fmt: skip
    assert conn.has_room and conn.in_processing == 0 and conn.upstream_idle
