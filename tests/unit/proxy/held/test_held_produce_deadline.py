"""A held produce's deadline is the produce purgatory's: the wheel expires the DelayedProduce,
whose expiry ends the holder's interruptible block (a scope the held path opened itself); the
holder then builds REQUEST_TIMED_OUT in its own task and gives the broker's late answer up. The
broker's answer completes it; one that comes as it expires is still what the client gets.
Virtual time throughout, against an upstream link that answers when told."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import trio
import trio.testing

from proxy.held.partition_state import PartitionStates
from proxy.held.produce import DelayedProduce, HeldProduces, ProduceAnswer, ProduceHolds
from proxy.primitives.purgatory import Purgatory
from proxy.routing.rewrite import ProducedPartitions, RequestPlan
from proxy.routing.topic_names import TopicNames
from wire.apis import ApiKey
from wire.codec import decode
from wire.headers import RequestHeader, parse_response_header
from wire.messages.produce_response import ProduceResponse

REQUEST_TIMED_OUT = 7
CORRELATION_ID = 41
PRODUCED = ProducedPartitions(1000, (("t", uuid.UUID(int=0), (0, 1)),))


@dataclass(frozen=True)
class Slot:
    plan: RequestPlan
    produced: ProducedPartitions
    sent_s: float


def produce_slot(sent_s: float = 0.0) -> Slot:
    header = RequestHeader(int(ApiKey.PRODUCE), 9, CORRELATION_ID, "producer")
    return Slot(RequestPlan(header, True, False, produced=PRODUCED), PRODUCED, sent_s)


class Upstream:
    """The client's upstream link as the produce hold uses it: the broker's answer comes when
    the test sets it (``answered``), read at once if it is set before the holder asks."""

    def __init__(self) -> None:
        self.frame: bytearray | None = None
        self.came = trio.Event()
        self.given_up: list[int] = []

    def answered(self, frame: bytearray) -> None:
        self.frame = frame
        self.came.set()

    def answer_in_hand(self, correlation_id: int) -> bool:
        return False

    async def answer(self, correlation_id: int) -> bytearray:
        await self.came.wait()
        assert self.frame is not None
        return self.frame

    def give_up(self, correlation_id: int) -> None:
        self.given_up.append(correlation_id)


class RecordingProduces(HeldProduces):
    """The produce purgatory's side, keeping what it holds."""

    held: list[DelayedProduce]

    def hold(self, delay_ms: int, interrupt: trio.CancelScope) -> DelayedProduce:
        operation = super().hold(delay_ms, interrupt)
        self.held.append(operation)
        return operation


def holds(purgatory: Purgatory, upstream: Upstream) -> ProduceHolds:
    side = RecordingProduces(purgatory, Purgatory(), PartitionStates(), TopicNames())
    side.held = []
    return ProduceHolds(side, upstream)  # type: ignore[arg-type]


async def test_the_wheel_expires_the_produce_and_the_holder_answers_request_timed_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    purgatory, upstream = Purgatory(), Upstream()
    produces = holds(purgatory, upstream)
    got: ProduceAnswer | None = None
    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        with produces.interruptible():
            got = await produces.answer(produce_slot())
        nursery.cancel_scope.cancel()
    assert got is None  # the block ended by the expiry, not by an answer
    assert 1.0 <= trio.current_time() < 1.01  # at its timeout, within the wheel's ticks
    assert purgatory.statistics().expired == 1 and purgatory.pending == 0
    slot, answer = produces.interrupted()
    assert slot.plan.header.correlation_id == CORRELATION_ID and answer.timed_out
    assert upstream.given_up == [CORRELATION_ID]  # its late answer is skipped, and due
    body = memoryview(answer.frame)[4:]
    header, start = parse_response_header(body, 1)
    assert header.correlation_id == CORRELATION_ID
    response = decode(ProduceResponse, body[start:], 9)
    codes = [p.error_code for t in response.responses for p in t.partition_responses]
    assert codes == [REQUEST_TIMED_OUT, REQUEST_TIMED_OUT]


async def test_the_answer_completes_the_produce_and_the_wheel_does_nothing_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    purgatory, upstream = Purgatory(), Upstream()
    produces = holds(purgatory, upstream)
    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        nursery.start_soon(_answer_at, 0.5, upstream, bytearray(b"broker's answer"))
        with produces.interruptible():
            answer = await produces.answer(produce_slot())
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    assert answer == ProduceAnswer(bytearray(b"broker's answer"), timed_out=False)
    assert purgatory.statistics().expired == 0 and purgatory.pending == 0
    assert upstream.given_up == []


async def test_an_answer_that_comes_as_it_expires_is_what_the_client_gets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The broker's answer and the expiry in one scheduler batch: the holder's read returns
    the answer although its block was interrupted; the broker's answer is the truth."""
    purgatory, upstream = Purgatory(), Upstream()
    produces = holds(purgatory, upstream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_answer_and_expire, produces, upstream)
        with produces.interruptible():
            await produces.answer(produce_slot())
            raise AssertionError("the expiry ends the block")
    slot, answer = produces.interrupted()
    assert answer == ProduceAnswer(bytearray(b"late but true"), timed_out=False)
    assert slot.plan.header.correlation_id == CORRELATION_ID
    assert upstream.given_up == [] and purgatory.statistics().expired == 1


async def test_abandon_takes_a_held_produce_out_of_the_purgatory() -> None:
    purgatory, upstream = Purgatory(), Upstream()
    produces = holds(purgatory, upstream)
    with trio.move_on_after(0.01), produces.interruptible():
        await produces.answer(produce_slot(sent_s=trio.current_time()))
    assert purgatory.pending == 1
    produces.abandon()
    assert purgatory.pending == 0


async def _answer_at(at_s: float, upstream: Upstream, frame: bytearray) -> None:
    await trio.sleep_until(at_s)
    upstream.answered(frame)


async def _answer_and_expire(produces: ProduceHolds, upstream: Upstream) -> None:
    """Wake the holder's read and expire its produce before the holder runs again (what the
    wheel does at the deadline, on the clock task)."""
    await trio.testing.wait_all_tasks_blocked()
    upstream.answered(bytearray(b"late but true"))
    (operation,) = produces._produces.held  # type: ignore[attr-defined]
    operation.run()
