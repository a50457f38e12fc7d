# Strategy: two measurements of proxy/primitives/memory.py in one run.
#
# 1. Fairness, in virtual time. K connections are always backlogged and pipeline like real
#    producers (up to ``pipeline`` requests outstanding, Kafka's max.in.flight default 5),
#    each request going through the proxy as proxy/connection/requests.py takes it: the
#    reader asks the pool for its bytes (with the connection's Turn), reads it (a short
#    time), forwards it (its bytes move to the pool's in-processing count and its lease is
#    released), and the broker answers it after a service time, one request per connection
#    at a time (Kafka's rule), which ends its processing. While memory is short a
#    connection keeps one request in processing, as the proxy does. The pool holds only a
#    handful of requests, so most connections are muted most of the time and the wake
#    order decides who is served. The same K request sequences (sizes and service times
#    from per-connection seeded RNGs) are replayed under three wake orders, swapped in
#    through MemoryPool's ``wake_order`` hook:
#      random  RandomWhenTight, the pool's default (KIP-72: random while tight, in rounds by
#              connection, else FIFO)
#      fifo    ArrivalOrder: strict arrival order
#      fixed   lowest connection number first: a selector iterating its keys in a fixed
#              order, the starvation KIP-72 warns about
#    Over a window (after a warm-up) it reports per-connection bytes acknowledged as Jain's
#    fairness index, the smallest and largest share of all bytes, and the p99 wait in
#    allocate. The run uses trio's MockClock, so it is deterministic and takes seconds.
# 2. Cost, in real time: microseconds per try_allocate+release and per allocate+release
#    on the fast path (the per-request hot path), per hand-off between two tasks on a
#    contended pool, and a bare trio checkpoint for scale.
"""Fairness of the KIP-72 memory pool's wake order, and the cost of its hot path."""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import trio
import trio.testing

from proxy.primitives.memory import MemoryPool
from proxy.primitives.wake_order import ArrivalOrder, RandomWhenTight, Turn, Waiter, WakeOrder
from testbed.report import machine_line, write_section

KIB = 1024


class FixedOrder:
    """Lowest connection number first, whatever the arrival order (the selector's order)."""

    def __init__(self, rank: dict[trio.lowlevel.Task, int]) -> None:
        self._rank = rank
        self._heap: list[tuple[int, int, Waiter]] = []
        self._queued: set[Waiter] = set()
        self._seq = 0

    @property
    def round(self) -> int:
        return 0

    def __len__(self) -> int:
        return len(self._queued)

    def push(self, waiter: Waiter) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self._rank[waiter.task], self._seq, waiter))
        self._queued.add(waiter)

    def discard(self, waiter: Waiter) -> None:
        self._queued.discard(waiter)

    def pop(self, tight: bool) -> Waiter:
        while True:
            waiter = heapq.heappop(self._heap)[2]
            if waiter in self._queued:
                self._queued.remove(waiter)
                return waiter


class Counting:
    """Counts a wake order's decisions (and how many were made while memory was tight)."""

    def __init__(self, inner: WakeOrder) -> None:
        self.inner = inner
        self.pops = 0
        self.tight_pops = 0

    @property
    def round(self) -> int:
        return self.inner.round

    def __len__(self) -> int:
        return len(self.inner)

    def push(self, waiter: Waiter) -> None:
        self.inner.push(waiter)

    def discard(self, waiter: Waiter) -> None:
        self.inner.discard(waiter)

    def pop(self, tight: bool) -> Waiter:
        self.pops += 1
        self.tight_pops += tight
        return self.inner.pop(tight)


@dataclass(frozen=True)
class Scenario:
    connections: int
    pool_bytes: int
    min_request_bytes: int
    max_request_bytes: int
    base_service_s: float
    service_bytes_per_s: float
    warmup_s: float
    window_s: float
    seed: int
    pipeline: int
    read_s: float


@dataclass(frozen=True)
class Result:
    order: str
    jain: float
    min_share: float
    max_share: float
    p50_wait_ms: float
    p99_wait_ms: float
    max_wait_ms: float
    starved: int
    mib_per_s: float
    grants: int
    random_pick_percent: float

    def row(self) -> dict[str, object]:
        """The JSON row the issue specifies."""
        return {
            "order": self.order,
            "jain": self.jain,
            "min_share": self.min_share,
            "max_share": self.max_share,
            "p99_wait_ms": self.p99_wait_ms,
        }


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def jain_index(values: list[int]) -> float:
    """(sum x)^2 / (n * sum x^2): 1 when all equal, 1/n when one gets everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return (total * total) / (len(values) * squares) if squares else math.nan


def simulate(order_name: str, sc: Scenario) -> Result:
    """Run the K connections under one wake order in virtual time."""
    rank: dict[trio.lowlevel.Task, int] = {}
    inner: WakeOrder
    if order_name == "random":
        inner = RandomWhenTight(random.Random(sc.seed))
    elif order_name == "fifo":
        inner = ArrivalOrder()
    elif order_name == "fixed":
        inner = FixedOrder(rank)
    else:
        raise ValueError(order_name)
    order = Counting(inner)
    pool = MemoryPool(sc.pool_bytes, sc.max_request_bytes, wake_order=order)
    served = [0] * sc.connections
    waits_s: list[float] = []
    start_s, end_s = sc.warmup_s, sc.warmup_s + sc.window_s

    asking_since: list[float | None] = [None] * sc.connections
    open_waits_s: list[float] = []

    async def connection(index: int, nursery: trio.Nursery) -> None:
        rank[trio.lowlevel.current_task()] = index
        rng = random.Random(sc.seed * 1_000_003 + index)  # same sequence under every order
        turn = Turn()
        outstanding = trio.Semaphore(sc.pipeline)  # the client's requests in flight
        at_broker = trio.Lock()  # the broker processes one request per connection at a time
        answered = trio.Event()
        processing = [0]
        # Tasks started together run in an order trio randomizes; stagger the first
        # request so arrival order, and so every run, is deterministic.
        await trio.sleep(index * 1e-6)

        async def broker(size: int, service_s: float) -> None:
            async with at_broker:
                await trio.sleep(service_s)
            pool.end_processing(size)
            processing[0] -= 1
            answered.set()
            outstanding.release()
            if start_s <= trio.current_time() < end_s:
                served[index] += size

        while True:
            await outstanding.acquire()
            size = rng.randint(sc.min_request_bytes, sc.max_request_bytes)
            service_s = (sc.base_service_s + size / sc.service_bytes_per_s) * rng.uniform(0.5, 1.5)
            asking_since[index] = asked_s = trio.current_time()
            while processing[0] and pool.tight:  # the proxy's rule while memory is short
                answered = trio.Event()
                await answered.wait()
            lease = await pool.allocate(size, turn)
            asking_since[index] = None
            granted_s = trio.current_time()
            if start_s <= granted_s < end_s:
                waits_s.append(granted_s - asked_s)
            await trio.sleep(sc.read_s)  # the body comes in
            pool.start_processing(size)  # forwarded: in processing until answered
            lease.release()
            processing[0] += 1
            nursery.start_soon(broker, size, service_s)

    async def main() -> None:
        with trio.move_on_at(end_s):
            async with trio.open_nursery() as nursery:
                for index in range(sc.connections):
                    nursery.start_soon(connection, index, nursery)
        # Waits still open at the end count up to the end (a lower bound): otherwise a
        # connection starved for the whole window would leave no wait at all.
        open_waits_s.extend(end_s - since for since in asking_since if since is not None)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    total = sum(served)
    grants = len(waits_s)
    waits_s = sorted(waits_s + open_waits_s)
    return Result(
        order=order_name,
        jain=jain_index(served),
        min_share=min(served) / total,
        max_share=max(served) / total,
        p50_wait_ms=percentile(waits_s, 50) * 1000,
        p99_wait_ms=percentile(waits_s, 99) * 1000,
        max_wait_ms=waits_s[-1] * 1000,
        starved=sum(1 for s in served if s == 0),
        mib_per_s=total / sc.window_s / (1 << 20),
        grants=grants,
        random_pick_percent=(
            100.0 * order.tight_pops / order.pops if order_name == "random" and order.pops else 0.0
        ),
    )


# -- real-time cost ---------------------------------------------------------------------


async def ping_pong(pool: MemoryPool, rounds: int) -> None:
    """Allocate, yield while holding (so the other task parks), release; ``rounds`` times."""
    for _ in range(rounds):
        with await pool.allocate(1):
            await trio.lowlevel.checkpoint()


def micro(n: int, repeats: int) -> dict[str, float]:
    """Microseconds per operation (the best of ``repeats`` runs of ``n`` each)."""

    async def main() -> dict[str, float]:
        pool = MemoryPool(1 << 30, 1 << 20)
        best: dict[str, float] = {}

        def keep(name: str, started: float, count: int) -> None:
            us = (time.perf_counter() - started) / count * 1e6
            best[name] = min(best.get(name, math.inf), us)

        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(n):
                pool.release(pool.try_allocate(1000))  # type: ignore[arg-type]
            keep("try_allocate + release", t, n)

            t = time.perf_counter()
            for _ in range(n):
                pool.release(await pool.allocate(1000))
            keep("allocate + release (fast path)", t, n)

            t = time.perf_counter()
            for _ in range(n):
                with await pool.allocate(1000):
                    pass
            keep("with await allocate() (fast path)", t, n)

            t = time.perf_counter()
            for _ in range(n):
                await trio.lowlevel.checkpoint()
            keep("bare trio checkpoint (for scale)", t, n)

            # Contended: a 1-byte pool shared by two tasks; every grant is a park, a
            # release that hands the byte over, and a wake-up.
            tight = MemoryPool(1, 1)
            rounds = n // 4
            t = time.perf_counter()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ping_pong, tight, rounds)
                nursery.start_soon(ping_pong, tight, rounds)
            keep("contended allocate + release (park, hand-off, wake)", t, 2 * rounds)
        return best

    return trio.run(main)


# -- report -----------------------------------------------------------------------------


def markdown(sc: Scenario, results: list[Result], costs: dict[str, float], command: str) -> str:
    fair = 1 / sc.connections
    lines = [
        "## Memory pool: wake-order fairness and hot-path cost (`bench.fairness`)",
        "",
        machine_line(),
        "",
        f"`{command}`",
        "",
        f"{sc.connections} always-backlogged connections, each pipelining up to "
        f"{sc.pipeline} requests, share a {sc.pool_bytes // KIB} KiB pool (max allocation "
        f"{sc.max_request_bytes // KIB} KiB). Each request is "
        f"{sc.min_request_bytes // KIB}-{sc.max_request_bytes // KIB} KiB (uniform): its "
        f"memory is held while it is read ({sc.read_s * 1000:g} ms), then counted as in "
        "processing until the broker answers it, one request per connection at a time, after "
        f"({sc.base_service_s * 1000:g} ms + size at {sc.service_bytes_per_s / (1 << 20):g} "
        "MiB/s) x U(0.5, 1.5); while memory is short a connection keeps one request in "
        "processing (the proxy's rule). The same per-connection request sequences run under "
        f"each wake order in virtual time (trio MockClock); bytes acknowledged are counted "
        f"over {sc.window_s:g} s after a {sc.warmup_s:g} s warm-up. Shares are fractions of "
        f"all bytes acknowledged (a fair share is 1/{sc.connections} = {fair:.3f}).",
        "",
        "| wake order | Jain index | min share (x fair) | max share (x fair) | starved "
        "| p50 wait ms | p99 wait ms | max wait ms | MiB/s served |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "random": "random while tight, in rounds (ours)",
        "fifo": "FIFO",
        "fixed": "fixed connection order",
    }
    for r in results:
        lines.append(
            f"| {labels[r.order]} | {r.jain:.4f} | {r.min_share:.4f} ({r.min_share / fair:.2f}) "
            f"| {r.max_share:.4f} ({r.max_share / fair:.2f}) | {r.starved} "
            f"| {r.p50_wait_ms:.1f} | {r.p99_wait_ms:.1f} | {r.max_wait_ms:.1f} "
            f"| {r.mib_per_s:.1f} |"
        )
    ours = next(r for r in results if r.order == "random")
    lines += [
        "",
        f"Under this load {ours.random_pick_percent:.1f}% of the pool's hand-offs were made "
        "while memory was tight (so at random); the rest in arrival order. Waits still open "
        "at the end of the window are counted up to the end; a starved connection adds only "
        "one such wait among tens of thousands, which is why starvation shows in the "
        "starved, min-share and max-wait columns rather than in p99.",
        "",
        "Hot-path cost (real time, best of the repeats, µs per operation):",
        "",
        "| operation | µs |",
        "|---|---:|",
    ]
    for name, us in costs.items():
        lines.append(f"| {name} | {us:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--pool-kib", type=int, default=256)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pipeline", type=int, default=5, help="requests in flight per client")
    parser.add_argument("--micro-n", type=int, default=100_000)
    parser.add_argument("--micro-repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the fairness rows here")
    parser.add_argument("--no-record", action="store_true", help="do not write docs/benchmarks.md")
    args = parser.parse_args(argv)
    sc = Scenario(
        connections=args.connections,
        pool_bytes=args.pool_kib * KIB,
        min_request_bytes=4 * KIB,
        max_request_bytes=64 * KIB,
        base_service_s=0.002,
        service_bytes_per_s=8 * (1 << 20),
        warmup_s=args.warmup_s,
        window_s=args.window_s,
        seed=args.seed,
        pipeline=args.pipeline,
        read_s=0.0005,
    )
    results = []
    for name in ("random", "fifo", "fixed"):
        t = time.perf_counter()
        result = simulate(name, sc)
        results.append(result)
        print(
            f"{name:7} jain={result.jain:.4f} min_share={result.min_share:.4f} "
            f"max_share={result.max_share:.4f} starved={result.starved} "
            f"p99_wait_ms={result.p99_wait_ms:.1f} grants={result.grants} "
            f"({time.perf_counter() - t:.1f} s real)",
            flush=True,
        )
    costs = micro(args.micro_n, args.micro_repeats)
    for name, us in costs.items():
        print(f"{name}: {us:.2f} µs")
    if args.json:
        args.json.write_text(json.dumps([r.row() for r in results], indent=2) + "\n")
    command = "python -m bench.fairness " + " ".join(argv if argv is not None else sys.argv[1:])
    if not args.no_record:
        write_section("fairness", markdown(sc, results, costs, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
