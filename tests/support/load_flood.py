# Strategy: the KIP-72 incident, reproduced. Many connections each send large produce
# requests back to back (up to ``pipeline`` unanswered at a time, like a producer's
# max.in.flight), which is what took LinkedIn's brokers down: every connection's request is
# read into memory at once. Through the proxy the memory pool should bound that, mute readers,
# and still serve every connection its share.
#
# Each connection runs two tasks: a sender that keeps ``pipeline`` requests outstanding until
# the flood's end time, and an acknowledger that reads the responses in order. The sender never
# gets cancelled inside a write (a half-written frame would be our bug, not the proxy's); it
# just stops starting new requests. After the end time every owed response is awaited, up to
# ``drain_s``: "every request is eventually answered" is ``answered == sent``.
#
# Fairness is measured on the bytes each connection had acknowledged (error NONE) inside a
# window that starts after a warm-up (connections ramp up one by one) and ends at the flood's
# end time (after it, connections stop at different moments).
"""A produce flood from many raw connections, with per-connection acknowledged bytes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import trio

from tests.support.load_stats import jain_index
from tests.support.load_wire import (
    PRODUCE_VERSION,
    KafkaWire,
    produce_request,
    record_batch,
    request_frame,
)
from wire.messages.produce_response import ProduceResponse

__all__ = ["Flood", "FloodResult", "Tally"]


@dataclass
class Tally:
    """One flood connection's counts."""

    index: int
    sent: int = 0
    answered: int = 0
    acked_bytes: int = 0
    window_bytes: int = 0
    error_codes: Counter[int] = field(default_factory=Counter)
    broken: str | None = None


@dataclass
class FloodResult:
    """What the flood saw, summed and per connection."""

    tallies: list[Tally]
    request_bytes: int
    window_s: float

    @property
    def sent(self) -> int:
        return sum(t.sent for t in self.tallies)

    @property
    def answered(self) -> int:
        return sum(t.answered for t in self.tallies)

    @property
    def broken(self) -> list[str]:
        return [f"#{t.index}: {t.broken}" for t in self.tallies if t.broken]

    @property
    def error_codes(self) -> Counter[int]:
        return sum((t.error_codes for t in self.tallies), Counter())

    @property
    def fairness(self) -> float:
        """Jain's index of the bytes each connection had acknowledged in the window."""
        return jain_index([t.window_bytes for t in self.tallies])

    @property
    def window_mib_per_s(self) -> float:
        return sum(t.window_bytes for t in self.tallies) / self.window_s / 2**20


class Flood:
    """``connections`` raw producers of ``value_bytes`` records to ``topic`` at ``address``.

    Use: ``await flood.connect()`` (each connection also completes one small produce, so the
    proxy holds its per-connection state before anyone measures a baseline), then
    ``await flood.run(...)``, then ``await flood.aclose()``.
    """

    def __init__(
        self,
        address: tuple[str, int],
        topic: str,
        *,
        connections: int,
        value_bytes: int,
        pipeline: int = 2,
    ) -> None:
        self.address = address
        self.topic = topic
        self.connections = connections
        self.pipeline = pipeline
        self.records = record_batch(value_bytes)
        self._request = produce_request(topic, self.records)
        #: The largest frame the flood sends (client ids differ by a few bytes at most).
        self.request_bytes = len(
            request_frame(self._request, PRODUCE_VERSION, 1, f"flood-{connections}")
        )
        self._wires: list[KafkaWire] = []

    async def connect(self) -> None:
        host, port = self.address
        for index in range(self.connections):
            wire = await KafkaWire.connect(host, port, f"flood-{index}")
            self._wires.append(wire)
            await wire.send(produce_request(self.topic, record_batch(10)), PRODUCE_VERSION)
            _, response = await wire.receive()
            assert isinstance(response, ProduceResponse)
            codes = [p.error_code for t in response.responses for p in t.partition_responses]
            assert codes == [0], f"warm-up produce failed: {codes}"

    async def run(self, duration_s: float, warmup_s: float, drain_s: float) -> FloodResult:
        """Flood for ``duration_s``, then wait up to ``drain_s`` for every owed response."""
        start = trio.current_time()
        window = (start + warmup_s, start + duration_s)
        tallies = [Tally(i) for i in range(len(self._wires))]
        with trio.move_on_after(duration_s + drain_s):
            async with trio.open_nursery() as nursery:
                for wire, tally in zip(self._wires, tallies, strict=True):
                    nursery.start_soon(self._connection, wire, tally, window)
        return FloodResult(tallies, len(self.records), window[1] - window[0])

    async def _connection(self, wire: KafkaWire, tally: Tally, window: tuple[float, float]) -> None:
        slots = trio.Semaphore(self.pipeline)
        sent_in, sent_out = trio.open_memory_channel[None](self.pipeline)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._send, wire, tally, window[1], slots, sent_in)
                await self._acknowledge(wire, tally, window, slots, sent_out)
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
            tally.broken = f"{type(error).__name__}: {error}"

    async def _send(
        self,
        wire: KafkaWire,
        tally: Tally,
        end_s: float,
        slots: trio.Semaphore,
        sent: trio.MemorySendChannel[None],
    ) -> None:
        async with sent:
            while True:
                await slots.acquire()
                if trio.current_time() >= end_s:
                    return
                await wire.send(self._request, PRODUCE_VERSION)
                tally.sent += 1
                await sent.send(None)

    async def _acknowledge(
        self,
        wire: KafkaWire,
        tally: Tally,
        window: tuple[float, float],
        slots: trio.Semaphore,
        sent: trio.MemoryReceiveChannel[None],
    ) -> None:
        async with sent:
            async for _ in sent:
                _, response = await wire.receive()
                slots.release()
                tally.answered += 1
                assert isinstance(response, ProduceResponse)
                codes = [p.error_code for t in response.responses for p in t.partition_responses]
                tally.error_codes.update(code for code in codes if code)
                if codes == [0]:
                    tally.acked_bytes += len(self.records)
                    if window[0] <= trio.current_time() <= window[1]:
                        tally.window_bytes += len(self.records)

    async def aclose(self) -> None:
        for wire in self._wires:
            await wire.aclose()
