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
# window that starts after a warm-up (connections ramp up one by one) and ends once the
# connections have, on average, ``window_requests`` acknowledged requests each; the flood stops
# sending then (after it, connections stop at different moments). A volume, not a duration:
# with the random wake order of KIP-72, a connection's share over a few requests is a matter
# of chance (Poisson-like: about 4 requests each gives Jain ~0.8 however fair the pool is),
# and how many requests fit in a fixed time depends on how busy the shared machine is.
"""A produce flood from many raw connections, with per-connection acknowledged bytes."""

from __future__ import annotations

import math
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


@dataclass
class _Window:
    """The measurement window: from the warm-up's end until enough bytes were acknowledged.

    Its end is a volume, not a time, so the fairness index has as many requests per
    connection to work with on a busy machine as on an idle one (with a few requests per
    connection, chance alone makes shares unequal).
    """

    start_s: float
    deadline_s: float
    target_bytes: int
    end_s: float = math.inf
    acked_bytes: int = 0

    def over(self, now_s: float) -> bool:
        return now_s >= self.end_s or now_s >= self.deadline_s

    def count(self, now_s: float, size_bytes: int) -> bool:
        """Whether an acknowledgement at ``now_s`` falls in the window (and count it)."""
        if now_s < self.start_s or self.over(now_s):
            return False
        self.acked_bytes += size_bytes
        if self.acked_bytes >= self.target_bytes:
            self.end_s = now_s
        return True

    @property
    def seconds(self) -> float:
        return min(self.end_s, self.deadline_s) - self.start_s


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

    async def run(
        self, warmup_s: float, window_requests: int, max_s: float, drain_s: float
    ) -> FloodResult:
        """Flood until the window holds ``window_requests`` acknowledged requests per
        connection on average (or ``max_s`` passed), then wait up to ``drain_s`` for every
        owed response.
        """
        now = trio.current_time()
        window = _Window(
            start_s=now + warmup_s,
            deadline_s=now + max_s,
            target_bytes=window_requests * len(self._wires) * len(self.records),
        )
        tallies = [Tally(i) for i in range(len(self._wires))]
        with trio.move_on_after(max_s + drain_s):
            async with trio.open_nursery() as nursery:
                for wire, tally in zip(self._wires, tallies, strict=True):
                    nursery.start_soon(self._connection, wire, tally, window)
        return FloodResult(tallies, len(self.records), window.seconds)

    async def _connection(self, wire: KafkaWire, tally: Tally, window: _Window) -> None:
        slots = trio.Semaphore(self.pipeline)
        sent_in, sent_out = trio.open_memory_channel[None](self.pipeline)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._send, wire, tally, window, slots, sent_in)
                await self._acknowledge(wire, tally, window, slots, sent_out)
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
            tally.broken = f"{type(error).__name__}: {error}"

    async def _send(
        self,
        wire: KafkaWire,
        tally: Tally,
        window: _Window,
        slots: trio.Semaphore,
        sent: trio.MemorySendChannel[None],
    ) -> None:
        async with sent:
            while True:
                await slots.acquire()
                if window.over(trio.current_time()):
                    return
                await wire.send(self._request, PRODUCE_VERSION)
                tally.sent += 1
                await sent.send(None)

    async def _acknowledge(
        self,
        wire: KafkaWire,
        tally: Tally,
        window: _Window,
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
                    if window.count(trio.current_time(), len(self.records)):
                        tally.window_bytes += len(self.records)

    async def aclose(self) -> None:
        for wire in self._wires:
            await wire.aclose()
