# Strategy: issue 9, scenario 3, the incident KIP-72 was written after: many producers send
# large requests as fast as they can, and a broker that reads every connection's request into
# memory at once runs out of it. Here 120 raw connections (tests/support/load_flood.py) each
# keep two 1 MiB produce requests outstanding through a proxy started with
# ``--memory-limit 32MiB``, while a real client (librdkafka) produces small records at a steady
# rate through the same proxy.
#
# What is measured, from outside the proxy (tests/support/load_proc.py):
# * baseline: the proxy's RSS once all flood connections are open and have each completed one
#   small produce (so per-connection state is already paid for); VmHWM is reset there;
# * peak: VmHWM after the flood, i.e. the largest RSS during it, spikes included;
# * the pool's used bytes and muted connections, sampled from /metrics.
# Asserted on the limited run (the acceptance criteria):
# * peak <= 1.1 * (baseline + limit + max request): the pool may go negative by one
#   request of at most the configured maximum (KIP-72's bound: proxy/primitives/memory.py),
#   and 10% of the whole is allowance for the allocator and interpreter (our reading of the
#   issue's "+ 10%"). The allocator needs most of it: once a 1 MiB buffer has been freed,
#   glibc serves later ones from its heap and keeps what they leave resident, measured at 7 to
#   10 MiB on this flood (RSS minus the memory Python traces grew from 51 to 58-61 MiB, and
#   stayed flat with MALLOC_MMAP_THRESHOLD_ pinned, which costs 0.6 s of page faults per GiB,
#   so the proxy does not pin it).
# * every request sent is answered (after the flood stops sending, owed responses are awaited),
#   no flood connection is closed, no produce fails;
# * Jain's fairness of the bytes each connection had acknowledged in the measurement window
#   is >= 0.9;
# * the steady real client loses nothing (every record acknowledged and consumed).
# The same flood through a proxy with ``--memory-limit -1`` is run and reported beside it, to
# show what the limit buys; nothing is asserted on it.
#
# Each run gets its own broker (a one-node Apache Kafka), so both runs start from the same
# empty log.
"""Scenario 3: a 1 MiB produce flood from 120 connections against a 32 MiB pool."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import pytest
import trio

from testbed.kafka_cluster import running_kafka
from testbed.processes import free_port
from testbed.proxy_process import running_proxy
from testbed.topics import create_topic
from tests.support.load_clients import SteadyResult, run_client
from tests.support.load_flood import Flood, FloodResult
from tests.support.load_proc import (
    MetricsSampler,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
)
from tests.support.load_scenario import Report
from tests.support.load_wire import leader_address

REPORT = Report(
    "memory-flood", "Memory flood (scenario 3)", "tests/reliability/test_memory_flood.py"
)
MIB = 2**20
LIMIT_BYTES = 32 * MIB
#: Kafka's default socket.request.max.bytes (100 MiB) is above the limit, which the proxy
#: refuses (the pool could never hold one such request); 2 MiB fits the 1 MiB requests.
MAX_REQUEST_BYTES = 2 * MIB
MAX_REQUEST_ENV = {
    "PURGATORY_PROXY_MEMORY__SOCKET_REQUEST_MAX_BYTES": f"{MAX_REQUEST_BYTES // MIB}MiB"
}
POOL_USED = "purgatory_proxy_memory_pool_used_bytes"
POOL_MUTED = "purgatory_proxy_memory_pool_muted_connections"


@dataclass(frozen=True)
class Size:
    connections: int
    window_requests: int
    warmup_s: float = 2.0
    max_s: float = 90.0
    value_bytes: int = MIB
    pipeline: int = 2
    steady_rate_per_s: float = 20.0


#: 12 acknowledged requests per connection in the window: about 6 s at this machine's
#: quiet-time speed (250 MiB/s), 11 s when it is busy (135 MiB/s). Measured Jain: 0.975-0.98.
QUICK = Size(connections=120, window_requests=12)
#: More connections, more requests each: 250 x 24 x 1 MiB = 6 GiB written per run.
SOAK = Size(connections=250, window_requests=24, warmup_s=5.0, max_s=600.0)


@dataclass
class FloodRun:
    label: str
    baseline_bytes: int
    peak_bytes: int
    pool_used_max: float
    muted_max: float
    flood: FloodResult
    steady: SteadyResult
    request_bytes: int

    @property
    def growth_mib(self) -> float:
        return (self.peak_bytes - self.baseline_bytes) / MIB


async def _flood_run(label: str, memory_limit: str, size: Size) -> FloodRun:
    metrics = f"127.0.0.1:{free_port()}"
    args = ("--memory-limit", memory_limit, "--metrics", metrics)
    with (
        running_kafka(1) as broker,
        running_proxy(broker.bootstrap(), *args, env=MAX_REQUEST_ENV) as proxy,
    ):
        # 1 MiB of value per batch: above Kafka's default message.max.bytes (1 MiB + 12).
        flood_topic = create_topic(
            proxy.bootstrap, "flood", configs={"max.message.bytes": str(2 << 20)}
        )
        steady_topic = create_topic(proxy.bootstrap, "flood")
        address = await leader_address(proxy.host, proxy.port, flood_topic)
        flood = Flood(
            address,
            flood_topic,
            connections=size.connections,
            value_bytes=size.value_bytes,
            pipeline=size.pipeline,
        )
        await flood.connect()
        baseline = rss_bytes(proxy.pid)
        reset_peak_rss(proxy.pid)
        sampler = MetricsSampler(metrics, (POOL_USED, POOL_MUTED))
        steady: list[SteadyResult] = []
        stop = threading.Event()

        async def steady_client() -> None:
            result = await trio.to_thread.run_sync(
                functools.partial(
                    run_client, "steady", proxy.bootstrap, steady_topic,
                    size.steady_rate_per_s, size.max_s, stop=stop,
                )
            )  # fmt: skip
            assert isinstance(result, SteadyResult)
            steady.append(result)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sampler.run)
            nursery.start_soon(steady_client)
            result = await flood.run(size.warmup_s, size.window_requests, size.max_s, drain_s=60)
            peak = peak_rss_bytes(proxy.pid)
            stop.set()
            with trio.fail_after(120):
                while not steady:
                    await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
        await flood.aclose()
        assert proxy.alive(), proxy.log_text()[-3000:]
        return FloodRun(
            label,
            baseline,
            peak,
            sampler.maxima.get(POOL_USED, float("nan")),
            sampler.maxima.get(POOL_MUTED, float("nan")),
            result,
            steady[0],
            flood.request_bytes,
        )


def _bound_bytes(run: FloodRun) -> float:
    return 1.1 * (run.baseline_bytes + LIMIT_BYTES + MAX_REQUEST_BYTES)


def _verdict(limited: FloodRun, unlimited: FloodRun, size: Size) -> str:
    held = (
        limited.peak_bytes <= _bound_bytes(limited)
        and limited.flood.answered == limited.flood.sent
        and not limited.flood.broken
        and not limited.flood.error_codes
        and limited.flood.fairness >= 0.9
        and limited.steady.errors == 0
    )
    return (
        f"memory-flood: {'HELD' if held else 'FAILED'}: {size.connections} connections x "
        f"{size.pipeline} x 1 MiB produces, window {limited.flood.window_s:.0f} s; 32 MiB pool: "
        f"peak RSS "
        f"{limited.peak_bytes / MIB:.0f} MiB (baseline {limited.baseline_bytes / MIB:.0f}, "
        f"bound {_bound_bytes(limited) / MIB:.0f}), pool used max "
        f"{limited.pool_used_max / MIB:.1f} MiB, answered {limited.flood.answered}/"
        f"{limited.flood.sent}, fairness {limited.flood.fairness:.3f}, "
        f"{limited.flood.window_mib_per_s:.0f} MiB/s; no limit: peak RSS "
        f"{unlimited.peak_bytes / MIB:.0f} MiB (baseline {unlimited.baseline_bytes / MIB:.0f}), "
        f"fairness {unlimited.flood.fairness:.3f}"
    )


def _body(limited: FloodRun, unlimited: FloodRun, size: Size) -> list[str]:
    rows = []
    for run in (limited, unlimited):
        flood, steady = run.flood, run.steady
        rows.append(
            f"| {run.label} | {run.baseline_bytes / MIB:.0f} | {run.peak_bytes / MIB:.0f} | "
            f"{run.growth_mib:.0f} | {run.pool_used_max / MIB:.1f} | {run.muted_max:.0f} | "
            f"{flood.answered}/{flood.sent} | {len(flood.broken)} | "
            f"{sum(flood.error_codes.values())} | {flood.fairness:.3f} | {flood.window_s:.1f} | "
            f"{flood.window_mib_per_s:.0f} | {steady.acked}/{steady.sent} | "
            f"{steady.ack_p50_ms:.0f} / {steady.ack_p99_ms:.0f} | {steady.errors} |"
        )
    return [
        f"{size.connections} raw connections each keep {size.pipeline} produce requests of "
        f"1 MiB (acks=all) outstanding until {size.window_requests} requests per connection "
        "on average were acknowledged after the warm-up, while a librdkafka "
        f"producer sends {size.steady_rate_per_s:g} small records/s and a consumer reads "
        "them back. Each run has its own Apache Kafka and proxy "
        "(`socket_request_max_bytes` 2 MiB). Baseline: RSS with every flood connection "
        "open and warmed up; peak: VmHWM reset at the baseline and read after the flood. "
        "Fairness: Jain's index of each connection's acknowledged bytes in that window "
        f"(from {size.warmup_s:g} s on; a volume rather than a duration, so a busy machine "
        "does not leave too few requests per connection to judge). Asserted on the 32 MiB "
        "run only: "
        "peak <= 1.1 x (baseline + limit + max request), every request answered, "
        "fairness >= 0.9, no steady-client error.",
        "",
        "| run | baseline MiB | peak MiB | growth MiB | pool used max MiB | muted max | "
        "answered | closed | errors | fairness | window s | flood MiB/s | steady acked | "
        "steady ack p50 / p99 ms | steady errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


async def _scenario(size: Size) -> None:
    limited = await _flood_run("32 MiB", "32MiB", size)
    unlimited = await _flood_run("no limit (-1)", "-1", size)
    verdict = _verdict(limited, unlimited, size)
    REPORT.write(_body(limited, unlimited, size), verdict, soak=size is SOAK)

    flood = limited.flood
    assert flood.answered == flood.sent and not flood.broken, (
        f"unanswered: {flood.sent - flood.answered}, closed: {flood.broken[:5]}"
    )
    assert not flood.error_codes, f"produce errors: {dict(flood.error_codes)}"
    assert limited.steady.errors == 0, limited.steady
    assert flood.fairness >= 0.9, sorted(t.window_bytes // MIB for t in flood.tallies)
    assert limited.peak_bytes <= _bound_bytes(limited), (
        f"peak RSS {limited.peak_bytes / MIB:.0f} MiB above the bound "
        f"{_bound_bytes(limited) / MIB:.0f} MiB (baseline {limited.baseline_bytes / MIB:.0f}, "
        f"pool used max {limited.pool_used_max / MIB:.1f} MiB, {limited.muted_max:.0f} muted)"
    )


async def test_memory_flood_is_bounded_by_the_pool() -> None:
    await _scenario(QUICK)


@pytest.mark.soak
async def test_memory_flood_soak() -> None:
    await _scenario(SOAK)
