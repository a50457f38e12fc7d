# Strategy: each (scenario, implementation, target rate) point runs in a fresh subprocess so
# CPU time and peak RSS belong to that point alone. Inside, one thread plays all of Kafka's
# threads in turn: the generator enqueues each request at its scheduled time, the completer
# force-completes requests at their drawn latency, and the clock/reaper expires the rest. When
# the purgatory costs too much the loop falls behind and requests are enqueued late; achieved
# rate = requests enqueued / enqueue-phase wall time, which is exactly how
# TestPurgatoryPerformance computes its "actual rate".
"""One point of the purgatory benchmark, in a process of its own, and the sweep of points."""

from __future__ import annotations

import heapq
import json
import math
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.purgatory.baseline import BaselineImpl
from bench.purgatory.workload import (
    IMPLS,
    KEY_SPACE,
    KEYS_PER_REQUEST,
    PAYLOAD_BYTES,
    SATURATED,
    SCENARIOS,
    TIMEOUT_MS,
    samples,
)
from proxy.primitives.purgatory import DEFAULT_PURGE_INTERVAL, DelayedOperation, Purgatory
from proxy.primitives.timer import DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE

__all__ = ["WARMUP_MS", "Point", "run_point", "saturation", "sweep"]

ROOT = Path(__file__).resolve().parents[2]
GENERATOR_BURST = 1024  # the generator's turn: about 5 ms of enqueueing when it is behind
WARMUP_MS = 300  # the processed rate is measured from here: the first timeouts are due
DRAIN_CAP_S = 2.0  # after the enqueue phase, wait at most this long for the rest to finish

# The harness's clock, read by the fake operations' try_complete (Kafka's FakeOperation
# reads System.currentTimeMillis). Updated once per loop iteration.
_now_ms = 0


class FakeOperation(DelayedOperation):
    """TestPurgatoryPerformance's FakeOperation: completes once its latency has passed."""

    __slots__ = ("completes_at_ms", "payload")

    def __init__(self, completes_at_ms: float) -> None:
        super().__init__(TIMEOUT_MS)
        self.completes_at_ms = completes_at_ms
        self.payload = bytes(PAYLOAD_BYTES)

    def try_complete(self) -> bool:
        if _now_ms >= self.completes_at_ms:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass


class WheelImpl:
    def __init__(self) -> None:
        self.purgatory = Purgatory(
            tick_ms=DEFAULT_TICK_MS,
            wheel_size=DEFAULT_WHEEL_SIZE,
            purge_interval=DEFAULT_PURGE_INTERVAL,
        )
        self.watch = self.purgatory.try_complete_else_watch
        self.tick = self.purgatory.advance_clock
        self.next_due = self.purgatory.timer.next_expiration_ms

    @staticmethod
    def new(completes_at_ms: float) -> FakeOperation:
        return FakeOperation(completes_at_ms)

    @staticmethod
    def complete(op: Any) -> None:
        op.force_complete()

    def pending(self) -> int:
        return self.purgatory.pending

    def finished(self) -> int:
        stats = self.purgatory.statistics()
        return stats.completed + stats.expired


@dataclass
class Point:
    scenario: str
    impl: str
    target_rps: int
    achieved_rps: float
    enqueue_rps: float
    processed_rps: float
    requests: int
    enqueued: int
    cpu_s: float
    peak_rss_mb: float
    truncated: bool
    drain_s: float
    unfinished: int  # requests neither completed nor expired when the point stopped


def run_point(
    scenario: str, impl_name: str, rate: int, requests: int, cap_s: float, seed: int
) -> Point:
    global _now_ms
    import random

    p50, p75 = SCENARIOS[scenario]
    impl: Any = WheelImpl() if impl_name == "wheel" else BaselineImpl()
    rnd = random.Random(seed)
    keys = tuple(f"fakeKey{rnd.randrange(KEY_SPACE)}" for _ in range(KEYS_PER_REQUEST))
    arrivals = samples(rate, p50, p75, seed)
    new, watch, tick, complete, next_due = (
        impl.new,
        impl.watch,
        impl.tick,
        impl.complete,
        impl.next_due,
    )
    completions: list[tuple[float, int, Any]] = []
    push, pop = heapq.heappush, heapq.heappop
    perf = time.perf_counter
    sleep = time.sleep

    cpu0 = time.process_time()
    start = perf()
    next_arrival, latency = next(arrivals)
    enqueued = 0
    end: float | None = None
    truncated = False
    cpu_s = 0.0
    warm: tuple[float, int] | None = None  # (time, finished) when the window opens
    finished_at_end = 0
    while True:
        now = (perf() - start) * 1000.0
        _now_ms = now_ms = int(now)
        if warm is None and now >= WARMUP_MS:
            warm = (perf(), impl.finished())
        # Generator: everything scheduled by now (a late loop enqueues a burst).
        burst = 0
        while (
            end is None and enqueued < requests and next_arrival <= now and burst < GENERATOR_BURST
        ):
            op = new(now + latency)
            if latency < TIMEOUT_MS:
                push(completions, (op.completes_at_ms, enqueued, op))
            watch(op, keys, now_ms)
            enqueued += 1
            burst += 1
            next_arrival, latency = next(arrivals)
        if end is None and (enqueued == requests or now > cap_s * 1000.0):
            end = perf()
            cpu_s = time.process_time() - cpu0
            finished_at_end = impl.finished()
            truncated = enqueued < requests
        # Completer.
        while completions and completions[0][0] <= now:
            complete(pop(completions)[2])
        # Clock (wheel) / reaper (baseline).
        tick(now_ms)
        if end is not None:
            if not completions and impl.pending() == 0:
                break
            if perf() - end > DRAIN_CAP_S:
                break
        # Sleep until the next thing to do, if it is not imminent.
        wake = next_arrival if end is None else math.inf
        if completions:
            wake = min(wake, completions[0][0])
        due = next_due()
        if due is not None:
            wake = min(wake, due)
        gap_ms = wake - (perf() - start) * 1000.0
        if gap_ms > 0.3:
            sleep(min(gap_ms, 50.0) / 1000.0)
    done = perf()
    assert end is not None
    elapsed = end - start
    enqueue_rps = enqueued / elapsed
    # Throughput of the purgatory itself: requests completed or expired per second once
    # the first timeouts are due. Equal to the arrival rate while it keeps up.
    if warm is not None and end - warm[0] > 0.1:
        processed_rps = (finished_at_end - warm[1]) / (end - warm[0])
    else:
        processed_rps = enqueue_rps
    return Point(
        scenario=scenario,
        impl=impl_name,
        target_rps=rate,
        achieved_rps=min(enqueue_rps, processed_rps),
        enqueue_rps=enqueue_rps,
        processed_rps=processed_rps,
        requests=requests,
        enqueued=enqueued,
        cpu_s=cpu_s,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        truncated=truncated,
        drain_s=done - end,
        unfinished=len(completions) + impl.pending(),
    )


def point_in_subprocess(
    scenario: str, impl: str, rate: int, requests: int, cap_s: float, seed: int
) -> Point:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.purgatory",
            "--point",
            scenario,
            impl,
            str(rate),
            str(requests),
            str(cap_s),
            str(seed),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    return Point(**json.loads(out.strip().splitlines()[-1]))


def sweep(requests: int, cap_s: float, rates: tuple[int, ...], seed: int) -> list[Point]:
    points: list[Point] = []
    for scenario in SCENARIOS:
        for impl in IMPLS:
            saturated_points = 0
            for rate in rates:
                point = point_in_subprocess(scenario, impl, rate, requests, cap_s, seed)
                points.append(point)
                print(
                    f"{scenario:12} {impl:8} target {rate:>7} achieved "
                    f"{point.achieved_rps:>9.0f} cpu {point.cpu_s:6.1f}s "
                    f"rss {point.peak_rss_mb:5.0f}MB{' (capped)' if point.truncated else ''}",
                    flush=True,
                )
                if point.achieved_rps < SATURATED * rate:
                    saturated_points += 1
                    if saturated_points == 2:
                        break  # the curve has flattened; higher targets only cost time
    return points


def saturation(points: list[Point], scenario: str, impl: str) -> int | None:
    for p in points:
        if p.scenario == scenario and p.impl == impl and p.achieved_rps < SATURATED * p.target_rps:
            return p.target_rps
    return None
