"""A held produce's deadline is the produce purgatory's: the wheel expires the DelayedProduce,
its expiry makes the REQUEST_TIMED_OUT answer and interrupts the holder's wait; the broker's
answer completes it. Virtual time throughout."""

from __future__ import annotations

import uuid

import trio
import trio.testing

from proxy.held.delayed import DelayedProduce
from proxy.primitives.purgatory import Purgatory
from proxy.routing.rewrite import ProducedPartitions, RequestPlan
from wire.apis import ApiKey
from wire.codec import decode
from wire.headers import RequestHeader, parse_response_header
from wire.messages.produce_response import ProduceResponse

REQUEST_TIMED_OUT = 7
CORRELATION_ID = 41


def produce_plan() -> RequestPlan:
    produced = ProducedPartitions(1000, (("t", uuid.UUID(int=0), (0, 1)),))
    header = RequestHeader(int(ApiKey.PRODUCE), 9, CORRELATION_ID, "producer")
    return RequestPlan(header, True, False, produced=produced)


async def test_the_wheel_expires_the_produce_and_its_expiry_makes_the_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    purgatory = Purgatory()
    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        with trio.CancelScope() as wait:
            operation = DelayedProduce(1000, produce_plan(), wait)
            purgatory.try_complete_else_watch(operation, ())
            await trio.sleep_forever()  # the holder's wait for the broker's answer
        nursery.cancel_scope.cancel()
    assert wait.cancelled_caught
    assert 1.0 <= trio.current_time() < 1.01  # at its timeout, within the wheel's ticks
    assert operation.expired and operation.is_completed
    assert purgatory.statistics().expired == 1 and purgatory.pending == 0
    answer = operation.answer
    assert answer is not None
    body = memoryview(answer)[4:]
    header, start = parse_response_header(body, 1)
    assert header.correlation_id == CORRELATION_ID
    response = decode(ProduceResponse, body[start:], 9)
    codes = [p.error_code for t in response.responses for p in t.partition_responses]
    assert codes == [REQUEST_TIMED_OUT, REQUEST_TIMED_OUT]


async def test_the_answer_completes_the_produce_once_and_the_wheel_does_nothing_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    purgatory = Purgatory()
    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        wait = trio.CancelScope()
        operation = DelayedProduce(1000, produce_plan(), wait)
        purgatory.try_complete_else_watch(operation, ())
        await trio.sleep(0.5)
        frame = bytearray(b"broker's answer")
        assert operation.answered(frame)
        assert not operation.answered(bytearray(b"again"))
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    assert operation.answer is frame and not operation.expired
    assert not wait.cancel_called
    assert purgatory.statistics().expired == 0 and purgatory.pending == 0


async def test_an_answer_after_the_expiry_does_not_replace_the_timeout() -> None:
    purgatory = Purgatory()
    wait = trio.CancelScope()
    operation = DelayedProduce(1000, produce_plan(), wait)
    purgatory.try_complete_else_watch(operation, ())
    operation.run()  # what the wheel does at the deadline
    timed_out = operation.answer
    assert not operation.answered(bytearray(b"late"))
    assert operation.answer is timed_out and wait.cancel_called
    assert purgatory.statistics().expired == 1
