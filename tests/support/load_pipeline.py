# Strategy: issue 29's fairness flood. Many connections each pipeline a few large produce
# requests at once, the way a producer with max.in.flight.requests.per.connection = 5 and full
# batches does, and then read their acknowledgements. What is judged is the moment half of all
# the bytes have been acknowledged ("half-time"): how many connections have none acknowledged
# by then, and Jain's index of what each one has. A server that serves connections in turn (a
# Kafka broker keeps one request per connection in processing) leaves nobody at zero; one that
# lets whoever got in first pipeline everything leaves the late ones with nothing.
#
# Each connection's requests are written by one task and its answers read by another, so a
# server that reads slowly (muting, back-pressure) delays the sender, never the count.
"""A pipelining produce flood and what it leaves at half-time (issue 29's fairness)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import trio

from tests.support.load_stats import jain_index
from tests.support.load_wire import PRODUCE_VERSION, KafkaWire, produce_request, record_batch
from wire.messages.produce_response import ProduceResponse

__all__ = ["HalfTime", "pipelining_flood"]


@dataclass(frozen=True)
class HalfTime:
    """One flood's verdict at half-time.

    Attributes:
        at_zero: connections with nothing acknowledged when half of all bytes were.
        jain: Jain's index of the bytes each connection had acknowledged then.
        seconds: from the first request to half-time.
        errors: acknowledgements that carried an error (none expected).
        spread: how many connections had 0, 1, 2, ... requests acknowledged at half-time.
    """

    at_zero: int
    jain: float
    seconds: float
    errors: int
    spread: tuple[int, ...]


async def pipelining_flood(
    address: tuple[str, int],
    topic: str,
    *,
    connections: int,
    pipeline: int,
    value_bytes: int,
    timeout_s: float = 120.0,
) -> HalfTime:
    """``connections`` connections to ``address``, each sending ``pipeline`` produces of one
    ``value_bytes`` record at once (acks=all) and reading their answers; every answer is
    awaited (``timeout_s`` at most)."""
    records = record_batch(value_bytes)
    request = produce_request(topic, records)
    wires = [await KafkaWire.connect(*address, f"pipeline-{i}") for i in range(connections)]
    acked: list[tuple[float, int]] = []  # (when, connection) of each acknowledgement
    errors = 0
    start = trio.Event()

    async def send(wire: KafkaWire) -> None:
        await start.wait()
        for _ in range(pipeline):
            await wire.send(request, PRODUCE_VERSION)

    async def acknowledge(index: int, wire: KafkaWire) -> None:
        nonlocal errors
        for _ in range(pipeline):
            _, response = await wire.receive()
            assert isinstance(response, ProduceResponse)
            codes = [p.error_code for t in response.responses for p in t.partition_responses]
            if codes == [0]:
                acked.append((trio.current_time(), index))
            else:
                errors += 1

    try:
        with trio.fail_after(timeout_s):
            async with trio.open_nursery() as nursery:
                for index, wire in enumerate(wires):
                    nursery.start_soon(send, wire)
                    nursery.start_soon(acknowledge, index, wire)
                await trio.sleep(0.1)  # every task is at the start line
                started_s = trio.current_time()
                start.set()
    finally:
        for wire in wires:
            await wire.aclose()
    half = math.ceil(len(acked) / 2)
    per_connection = [0] * connections
    for _, index in acked[:half]:
        per_connection[index] += len(records)
    counts = [acked_bytes // len(records) for acked_bytes in per_connection]
    return HalfTime(
        at_zero=counts.count(0),
        jain=jain_index(per_connection),
        seconds=acked[half - 1][0] - started_s,
        errors=errors,
        spread=tuple(counts.count(n) for n in range(pipeline + 1)),
    )
