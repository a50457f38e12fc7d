# Strategy: reproduce seed 000's purgatory benchmark (Kafka's TestPurgatoryPerformance) for
# our timing-wheel purgatory and, in the same run, for a faithful copy of the design it
# replaced (Kafka 0.8.2's RequestPurgatory: a heap of individual requests plus watcher lists
# purged whenever their total size reaches the purge interval).
#
# Each (scenario, implementation, target rate) point runs in a fresh subprocess so CPU time
# and peak RSS belong to that point alone. Inside, one thread plays all of Kafka's threads
# in turn: the generator enqueues each request at its scheduled (exponential inter-arrival)
# time, the completer force-completes requests at their drawn (log-normal) latency, and the
# clock/reaper expires the rest. When the purgatory costs too much the loop falls behind and
# requests are enqueued late; achieved rate = requests enqueued / enqueue-phase wall time,
# which is exactly how TestPurgatoryPerformance computes its "actual rate".
"""Purgatory enqueue-rate benchmark: timing wheel vs. the 0.8 DelayQueue design.

Run ``python -m bench.purgatory`` (``--quick`` for 200,000 requests per point, ``--json FILE``
for machine-readable rows). Results go to docs/benchmarks.md and docs/img/purgatory.png.

Where the time goes (cProfile, wheel, high-timeout, at saturation, 2026-11-22): about 60 % in
the purgatory and 30 % in this harness (building the fake operation and its 100-byte
payload, the completer's heap, the loop). Of the purgatory's share: try_complete_else_watch
itself 27 % (two checks, three dict inserts), the estimate-triggered purges 24 % (each
sweeps ~3 x pending entries to drop ~1000; the seed's design, unchanged), wheel insert and
cascade 31 % (a 200 ms timeout lands in the 400 ms wheel and is re-added once to the 20 ms
one before it fires), completion and expiry 16 %. The structures are already __slots__
classes, the wheel insert is iterative with the bucket link inlined, and buckets are dicts
(deletes run in C), so what is left is CPython's per-call cost.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import resource
import subprocess
import sys
import time
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.primitives.purgatory import DEFAULT_PURGE_INTERVAL, DelayedOperation, Purgatory
from proxy.primitives.timer import DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "docs" / "img" / "purgatory.png"

TIMEOUT_MS = 200
PAYLOAD_BYTES = 100
KEY_SPACE = 100  # TestPurgatoryPerformance defaults: 3 keys drawn once from 100
KEYS_PER_REQUEST = 3
REAPER_POLL_MS = 200  # 0.8's reaper polls its DelayQueue for at most 200 ms
REAPER_SLICE_S = 0.005  # the reaper thread's turn on the one core, like an OS time slice
GENERATOR_BURST = 1024  # the generator's turn: about 5 ms of enqueueing when it is behind
WARMUP_MS = 300  # the processed rate is measured from here: the first timeouts are due
DRAIN_CAP_S = 2.0  # after the enqueue phase, wait at most this long for the rest to finish

SCENARIOS = {
    # name: (p50 ms, p75 ms) of the log-normal completion latency
    "low-timeout": (20.0, 60.0),
    "high-timeout": (200.0, 400.0),
}
IMPLS = ("wheel", "baseline")
RATES = (
    2_500,
    5_000,
    10_000,
    20_000,
    40_000,
    60_000,
    80_000,
    100_000,
    120_000,
    150_000,
    200_000,
    250_000,
    300_000,
)
SATURATED = 0.95

# The harness's clock, read by the fake operations' try_complete (Kafka's FakeOperation
# reads System.currentTimeMillis). Updated once per loop iteration.
_now_ms = 0


# -- the timing-wheel purgatory (proxy.primitives.purgatory) ---------------------------------------


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


# -- the old design (Kafka 0.8.2 RequestPurgatory), faithfully ------------------------------


class OldRequest:
    """0.8's DelayedRequest: an AtomicBoolean ``satisfied`` and a deadline."""

    __slots__ = ("completes_at_ms", "deadline_ms", "payload", "satisfied")

    def __init__(self, completes_at_ms: float) -> None:
        self.completes_at_ms = completes_at_ms
        self.deadline_ms = 0
        self.satisfied = False
        self.payload = bytes(PAYLOAD_BYTES)


class OldPurgatory:
    """Kafka 0.8.2's RequestPurgatory on one thread (see kafka/server/RequestPurgatory.scala).

    - ``check_and_maybe_watch``: for each key, if the request is not satisfied and its
      check fails, append it to the key's list (a LinkedList there); then put the request
      itself into the reaper's DelayQueue (a heap of individual requests).
    - Completion only flips ``satisfied``; the request stays in the heap and in every list.
    - The reaper loop: poll one expired, unsatisfied request (satisfied ones popped on the
      way are dropped) and expire it; then, on every iteration, purge all watcher lists if
      their total size is >= purge_interval, and purge the heap if its size is >=
      purge_interval. An iteration also happens when the poll times out (200 ms).
    """

    def __init__(self, purge_interval: int = DEFAULT_PURGE_INTERVAL) -> None:
        self.purge_interval = purge_interval
        self.watchers: dict[Hashable, list[OldRequest]] = {}
        self.delayed: list[tuple[int, int, OldRequest]] = []
        self.seq = 0
        self.unsatisfied = 0
        self.finished = 0  # completed or expired
        self.last_poll_ms = 0
        self.purges = 0

    def check_and_maybe_watch(self, request: OldRequest, keys: Any, now_ms: int) -> bool:
        for key in keys:
            lst = self.watchers.get(key)
            if lst is None:
                lst = self.watchers[key] = []
            # Watchers.checkAndMaybeAdd
            if request.satisfied or _now_ms >= request.completes_at_ms:
                if not request.satisfied:
                    request.satisfied = True
                    return True
                return False
            lst.append(request)
        request.deadline_ms = now_ms + TIMEOUT_MS
        self.seq += 1
        heapq.heappush(self.delayed, (request.deadline_ms, self.seq, request))
        self.unsatisfied += 1
        return False

    def complete(self, request: OldRequest) -> None:
        if not request.satisfied:  # satisfied.compareAndSet(false, true)
            request.satisfied = True
            self.unsatisfied -= 1
            self.finished += 1

    def watched(self) -> int:
        return sum(len(lst) for lst in self.watchers.values())

    def reaper_step(self, now_ms: int) -> None:
        """Run reaper iterations until none is due, or for one scheduler slice at most.

        In Kafka the reaper is its own thread; on one core it shares the CPU with the
        generator and the completer. The slice gives them their turn, as the OS would.
        """
        delayed = self.delayed
        slice_end = time.perf_counter() + REAPER_SLICE_S
        while time.perf_counter() < slice_end:
            expired = None
            while delayed and delayed[0][0] <= now_ms:  # pollExpired
                _, _, request = heapq.heappop(delayed)
                if not request.satisfied:
                    request.satisfied = True
                    self.unsatisfied -= 1
                    self.finished += 1
                    expired = request
                    break
            if expired is None:
                if now_ms - self.last_poll_ms < REAPER_POLL_MS:
                    return
                self.last_poll_ms = now_ms  # the 200 ms poll timed out: one idle iteration
            self._maybe_purge()
            if expired is None:
                return

    def _maybe_purge(self) -> None:
        if self.watched() >= self.purge_interval:
            self.purges += 1
            for lst in self.watchers.values():
                lst[:] = [r for r in lst if not r.satisfied]
        if len(self.delayed) >= self.purge_interval:
            self.delayed = [e for e in self.delayed if not e[2].satisfied]
            heapq.heapify(self.delayed)


class BaselineImpl:
    def __init__(self) -> None:
        self.purgatory = OldPurgatory()
        self.watch = self.purgatory.check_and_maybe_watch
        self.tick = self.purgatory.reaper_step
        self.complete = self.purgatory.complete

    @staticmethod
    def new(completes_at_ms: float) -> OldRequest:
        return OldRequest(completes_at_ms)

    def next_due(self) -> int | None:
        p = self.purgatory
        due = p.last_poll_ms + REAPER_POLL_MS
        return min(p.delayed[0][0], due) if p.delayed else due

    def pending(self) -> int:
        return self.purgatory.unsatisfied

    def finished(self) -> int:
        return self.purgatory.finished


# -- one point -------------------------------------------------------------------------------


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


def _samples(rate: int, p50: float, p75: float, seed: int) -> Iterator[tuple[float, float]]:
    """(arrival ms, latency ms) pairs, drawn in chunks to keep memory flat."""
    import numpy as np

    rng = np.random.default_rng(seed)
    sigma = (math.log(p75) - math.log(p50)) / 0.674490
    arrival = 0.0
    while True:
        gaps = rng.exponential(1000.0 / rate, 8192)
        cumulative = arrival + np.cumsum(gaps)
        arrival = float(cumulative[-1])
        # Whole milliseconds, the residue carried over (as TestPurgatoryPerformance does):
        # requests arrive in per-ms batches and the generator sleeps between them.
        arrivals = np.floor(cumulative).tolist()
        latencies = np.floor(rng.lognormal(math.log(p50), sigma, 8192)).tolist()
        yield from zip(arrivals, latencies, strict=True)


def run_point(
    scenario: str, impl_name: str, rate: int, requests: int, cap_s: float, seed: int
) -> Point:
    global _now_ms
    import random

    p50, p75 = SCENARIOS[scenario]
    impl: Any = WheelImpl() if impl_name == "wheel" else BaselineImpl()
    rnd = random.Random(seed)
    keys = tuple(f"fakeKey{rnd.randrange(KEY_SPACE)}" for _ in range(KEYS_PER_REQUEST))
    samples = _samples(rate, p50, p75, seed)
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
    next_arrival, latency = next(samples)
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
            next_arrival, latency = next(samples)
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


def _point_in_subprocess(
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


# -- the sweep and the report ----------------------------------------------------------------


def sweep(requests: int, cap_s: float, rates: tuple[int, ...], seed: int) -> list[Point]:
    points: list[Point] = []
    for scenario in SCENARIOS:
        for impl in IMPLS:
            saturated_points = 0
            for rate in rates:
                point = _point_in_subprocess(scenario, impl, rate, requests, cap_s, seed)
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


def chart(points: list[Point], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    styles = {
        "wheel": ("tab:blue", "o", "timing wheel"),
        "baseline": ("tab:red", "s", "0.8 design"),
    }
    for col, scenario in enumerate(SCENARIOS):
        top, bottom = axes[0][col], axes[1][col]
        for impl in IMPLS:
            rows = [p for p in points if p.scenario == scenario and p.impl == impl]
            color, marker, label = styles[impl]
            x = [p.target_rps / 1000 for p in rows]
            top.plot(
                x, [p.achieved_rps / 1000 for p in rows], marker=marker, color=color, label=label
            )
            per_request = [1e6 * p.cpu_s / max(p.enqueued, 1) for p in rows]
            bottom.plot(x, per_request, marker=marker, color=color, label=label)
        xmax = max(p.target_rps for p in points) / 1000
        top.plot([0, xmax], [0, xmax], ls=":", color="grey", label="target")
        p50, p75 = SCENARIOS[scenario]
        top.set_title(f"{scenario} (p50 {p50:.0f} ms, p75 {p75:.0f} ms, timeout {TIMEOUT_MS} ms)")
        top.set_xlabel("target rate (k requests/s)")
        top.set_ylabel("achieved rate (k requests/s)")
        bottom.set_xlabel("target rate (k requests/s)")
        bottom.set_ylabel("process CPU µs per request enqueued")
        top.legend()
        bottom.legend()
        top.grid(alpha=0.3)
        bottom.grid(alpha=0.3)
    fig.suptitle("Purgatory enqueue performance, one CPython thread (seed 000's benchmark)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def markdown(points: list[Point], requests: int, cap_s: float, command: str) -> str:
    from testbed.report import machine_line

    lines = [
        "## Purgatory: timing wheel vs. the 0.8 design (`bench/purgatory.py`)",
        "",
        machine_line(),
        "",
        f"Command: `{command}`. Seed 000's benchmark: exponential inter-arrivals at the target "
        f"rate, log-normal completion latency, timeout {TIMEOUT_MS} ms, {PAYLOAD_BYTES}-byte "
        f"payload, tick {DEFAULT_TICK_MS} ms, wheel {DEFAULT_WHEEL_SIZE}, purge interval "
        f"{DEFAULT_PURGE_INTERVAL}, {KEYS_PER_REQUEST} keys per request. {requests:,} requests "
        f"per point, or {cap_s:.0f} s of enqueueing when the target is too slow or the loop "
        "saturates (marked *). Achieved = the lower of the enqueue rate (requests enqueued / "
        "enqueue time, TestPurgatoryPerformance's 'actual rate') and the processed rate "
        f"(requests completed or expired per second, from {WARMUP_MS} ms to the end of the "
        "enqueue phase). One thread generates, completes and expires, taking turns like "
        "threads on one core (generator: "
        f"up to {GENERATOR_BURST} requests, reaper: up to {REAPER_SLICE_S * 1000:.0f} ms). Each "
        "point is a fresh process; CPU s is process CPU time during the enqueue phase, peak "
        "RSS the process's maximum. Unfinished = requests neither completed nor expired "
        f"{DRAIN_CAP_S:.0f} s after the enqueue phase (the purgatory had fallen behind). "
        "Saturation = first target where achieved < 95 % of it.",
        "",
        "| scenario | impl | saturation (RPS) |",
        "|---|---|---|",
    ]
    top_rate = max(p.target_rps for p in points)
    for scenario in SCENARIOS:
        for impl in IMPLS:
            sat = saturation(points, scenario, impl)
            shown = f"not reached (>= {top_rate:,})" if sat is None else f"{sat:,}"
            lines.append(f"| {scenario} | {impl} | {shown} |")
    lines += [
        "",
        "| scenario | impl | target RPS | achieved RPS | CPU s | CPU µs/req | peak RSS MB "
        "| unfinished |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        star = "*" if p.truncated else ""
        lines.append(
            f"| {p.scenario} | {p.impl} | {p.target_rps:,} | {p.achieved_rps:,.0f}{star} | "
            f"{p.cpu_s:.1f} | {1e6 * p.cpu_s / max(p.enqueued, 1):.1f} | "
            f"{p.peak_rss_mb:.0f} | {p.unfinished:,} |"
        )
    lines += ["", "![purgatory benchmark](img/purgatory.png)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200,000 requests per point")
    parser.add_argument("--json", type=Path, help="write rows and saturation summaries here")
    parser.add_argument("--requests", type=int, help="requests per point (default 1,000,000)")
    parser.add_argument("--cap-s", type=float, help="max enqueue seconds per point")
    parser.add_argument("--rates", type=str, help="comma-separated target rates")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-report", action="store_true", help="skip docs/ outputs")
    parser.add_argument("--point", nargs=6, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.point:
        scenario, impl, rate, requests, cap_s, seed = args.point
        point = run_point(scenario, impl, int(rate), int(requests), float(cap_s), int(seed))
        print(json.dumps(point.__dict__))
        return 0

    requests = args.requests or (200_000 if args.quick else 1_000_000)
    cap_s = args.cap_s or (6.0 if args.quick else 15.0)
    rates = tuple(int(r) for r in args.rates.split(",")) if args.rates else RATES
    points = sweep(requests, cap_s, rates, args.seed)
    command = "python -m bench.purgatory" + (" --quick" if args.quick else "")
    print()
    for scenario in SCENARIOS:
        for impl in IMPLS:
            print(f"saturation {scenario:12} {impl:8} {saturation(points, scenario, impl)}")
    if args.json:
        rows: list[dict[str, Any]] = [
            {
                "scenario": p.scenario,
                "impl": p.impl,
                "target_rps": p.target_rps,
                "achieved_rps": round(p.achieved_rps, 1),
                "cpu_s": round(p.cpu_s, 3),
                "peak_rss_mb": round(p.peak_rss_mb, 1),
            }
            for p in points
        ]
        rows += [
            {"scenario": s, "impl": i, "saturation_rps": saturation(points, s, i)}
            for s in SCENARIOS
            for i in IMPLS
        ]
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if not args.no_report:
        from testbed.report import write_section

        chart(points, CHART)
        write_section("purgatory", markdown(points, requests, cap_s, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
