# Strategy: issue 9, scenario 5. A healthy real client (librdkafka, closed-loop acks=all
# producer) runs through the proxy for the whole test and reports a timeline of acknowledged
# bytes; meanwhile the test alternates 3 s phases A B A B A B A, where B phases unleash the
# hostile clients (tests/support/load_hostile.py) and A phases are quiet:
# * 500 slowloris connections, each inside a 1 KiB frame and sending one byte a second, so
#   only the frame timeout can end them (frame_timeout_ms from a --config TOML file);
# * one client that pipelines Fetch requests for 512 KiB of data and never reads an answer;
# * garbage connections (random bytes, a TLS ClientHello, an unknown API key), 20 a second.
# Why alternate: the machine is shared (other work comes and goes on a scale of seconds to
# minutes), and a closed-loop throughput follows it. Measured back to back, two undisturbed
# 5 s runs differed by 40%; interleaved short phases see the same background on average.
#
# Asserted:
# * the healthy throughput in a B phase, over the mean of the A phases on either side of it,
#   has a median (over the B phases) of at least 80% (the "within 20%"); the first
#   0.5 s of each phase is left out (the switch itself). Neighbours and a median, because
#   under other people's load the A phases of one run ranged from 23 to 71 MiB/s;
# * the never-reader costs the proxy bounded memory: VmHWM over the phases stays <= 1.1 x
#   (baseline + pool limit + largest request + two responses) + 32 KiB per hostile
#   connection (one open connection costs about 17 KiB: see test_connection_storm.py), the
#   baseline taken before the first B phase. An unbounded proxy would hold up to 1024 unread
#   512 KiB answers per never-reader, 512 MiB;
# * after the phases, 500 more slowloris connections are all closed by the proxy's frame
#   timeout; every garbage connection was closed by the proxy and none got an answer; the
#   proxy is still up and the healthy client had no delivery error;
# * then a never-reader alone pipelines fetches until TCP pushes back, and a new real client
#   (kafka-python) must still bootstrap and get 10 records acknowledged within its own
#   timeouts: a client that reads nothing may cost memory, but not everyone else's service.
"""Scenario 5: slowloris, a never-reading client and garbage beside a healthy producer."""

from __future__ import annotations

import functools
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from kafka import KafkaProducer
from kafka.errors import KafkaError

from testbed.kafka_cluster import running_kafka
from testbed.processes import free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.support.load_clients import ThroughputResult, run_client
from tests.support.load_hostile import Garbage, NeverReader, Slowloris
from tests.support.load_proc import peak_rss_bytes, reset_peak_rss, rss_bytes, scrape
from tests.support.load_scenario import Report
from tests.support.load_wire import (
    PRODUCE_VERSION,
    KafkaWire,
    leader_address,
    produce_request,
    record_batch,
)

REPORT = Report(
    "hostile-clients",
    "Slow and hostile clients (scenario 5)",
    "tests/reliability/test_hostile_clients.py",
)
MIB = 2**20
LIMIT_BYTES = 32 * MIB
MAX_REQUEST_BYTES = 2 * MIB
FRAME_TIMEOUT_MS = 3_000
FETCH_DATA_BYTES = 512 * 1024
CONFIG = f"""\
[memory]
limit = "32MiB"
socket_request_max_bytes = "2MiB"

[connections]
frame_timeout_ms = {FRAME_TIMEOUT_MS}
idle_timeout_ms = 60000
"""


@dataclass(frozen=True)
class Size:
    phase_s: float
    phases: str
    settle_s: float = 0.5
    warmup_s: float = 2.0
    slowloris: int = 500
    garbage_per_s: float = 20.0
    never_reader_requests: int = 3000


QUICK = Size(phase_s=3.0, phases="ABABABA")
#: Longer phases, more of them (about 100 MiB/s of healthy producer writes at quiet times:
#: 11 x 5 s is about 5 GiB).
SOAK = Size(phase_s=5.0, phases="ABABABABABA")


@dataclass
class Phase:
    kind: str
    start_s: float  # time.monotonic()
    end_s: float
    mib_per_s: float = 0.0


@dataclass
class Hostile:
    """What the hostile clients of all B phases did, summed."""

    slowloris_opened: int = 0
    never_reader_sent: list[int] = field(default_factory=list)
    garbage_sent: int = 0
    garbage_closed: int = 0
    garbage_answered: int = 0


@dataclass
class ProxyFigures:
    """The proxy seen from outside over the phases, and the slowloris check after them."""

    baseline_bytes: int
    peak_bytes: int
    bound_bytes: float
    cut: Slowloris
    frame_timeouts: float
    pinned: Pinned


async def _fill(address: tuple[str, int], topic: str) -> None:
    """Write FETCH_DATA_BYTES to ``topic`` (8 records of 64 KiB), for the never-reader."""
    wire = await KafkaWire.connect(*address, "fill")
    try:
        records = record_batch(FETCH_DATA_BYTES // 8 - 64, records=8)
        await wire.send(produce_request(topic, records), PRODUCE_VERSION)
        await wire.receive()
    finally:
        await wire.aclose()


async def _hostile_phase(
    proxy: ProxyProcess, broker: tuple[str, int], fetch_topic: str, size: Size, tally: Hostile
) -> None:
    """Slowloris, a never-reader and garbage for one phase; ours closed at its end."""
    end = trio.current_time() + size.phase_s
    slowloris = Slowloris((proxy.host, proxy.port), size.slowloris)
    never_reader = NeverReader(broker, fetch_topic, size.never_reader_requests, FETCH_DATA_BYTES)
    garbage = Garbage((proxy.host, proxy.port), 1 / size.garbage_per_s)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(garbage.run, end)  # stops starting new ones at the end
            with trio.move_on_at(end):
                async with trio.open_nursery() as until_end:
                    until_end.start_soon(slowloris.run)
                    until_end.start_soon(never_reader.run)
    finally:
        tally.slowloris_opened += slowloris.opened
        tally.never_reader_sent.append(never_reader.sent)
        tally.garbage_sent += garbage.sent
        tally.garbage_closed += garbage.closed_by_proxy
        tally.garbage_answered += garbage.answered


async def _slowloris_all_cut(proxy: ProxyProcess, size: Size) -> Slowloris:
    """Open ``size.slowloris`` more and wait until the proxy closed them all (or 30 s more)."""
    slowloris = Slowloris((proxy.host, proxy.port), size.slowloris)
    async with trio.open_nursery() as nursery:
        await nursery.start(slowloris.run)
        with trio.move_on_after(FRAME_TIMEOUT_MS / 1000 + 30):
            while slowloris.closed_by_proxy < slowloris.opened:
                await trio.sleep(0.2)
        nursery.cancel_scope.cancel()
    return slowloris


@dataclass
class Pinned:
    """A never-reader alone, pushed back by TCP, and a client that connects after it."""

    never_reader_sent: int
    pool_used_bytes: float
    pool_muted: float
    newcomer_ok: bool
    newcomer_s: float
    newcomer_error: str


def _newcomer(bootstrap: str, topic: str, records: int = 10) -> tuple[bool, float, str]:
    """A new kafka-python producer: bootstrap, then ``records`` acknowledged sends.

    Its own timeouts (15 s to bootstrap, 15 s per request) decide whether it got in.
    """
    start = time.monotonic()
    try:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all", bootstrap_timeout_ms=15_000,
            max_block_ms=15_000, request_timeout_ms=15_000,
        )  # fmt: skip
        try:
            for _ in range(records):
                producer.send(topic, b"newcomer").get(timeout=30)
        finally:
            producer.close(timeout=5)
    except KafkaError as error:
        return False, time.monotonic() - start, f"{type(error).__name__}: {error}"
    return True, time.monotonic() - start, ""


async def _pinned(
    proxy: ProxyProcess, metrics: str, broker: tuple[str, int], fetch_topic: str, topic: str,
    size: Size,
) -> Pinned:  # fmt: skip
    """Does one client that never reads hold memory others need?

    The never-reader pipelines fetches until TCP pushes back (its count stops growing for a
    second); then the pool is read from /metrics and a new client must get in.
    """
    never_reader = NeverReader(broker, fetch_topic, size.never_reader_requests, FETCH_DATA_BYTES)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(never_reader.run)
        with trio.move_on_after(30):
            seen = -1
            while seen != never_reader.sent:
                seen = never_reader.sent
                await trio.sleep(1.0)
        values = await trio.to_thread.run_sync(scrape, metrics)
        ok, seconds, error = await trio.to_thread.run_sync(_newcomer, proxy.bootstrap, topic)
        nursery.cancel_scope.cancel()
    return Pinned(
        never_reader.sent,
        values["purgatory_proxy_memory_pool_used_bytes"],
        values["purgatory_proxy_memory_pool_muted_connections"],
        ok,
        seconds,
        error,
    )


async def _scenario(size: Size, tmp_path: Path) -> None:
    config = tmp_path / "hostile.toml"
    config.write_text(CONFIG)
    metrics = f"127.0.0.1:{free_port()}"
    phases: list[Phase] = []
    tally = Hostile()
    timeline: list[ThroughputResult] = []
    with (
        running_kafka(1) as broker,
        running_proxy(broker.bootstrap(), "--config", str(config), "--metrics", metrics) as proxy,
    ):
        healthy_topic = create_topic(proxy.bootstrap, "healthy")
        fetch_topic = create_topic(proxy.bootstrap, "unread")
        fetch_broker = await leader_address(proxy.host, proxy.port, fetch_topic)
        await _fill(fetch_broker, fetch_topic)
        # At most: the phases overrun a little (garbage connections still closing at a
        # phase's end are waited for); the client is stopped once the last phase is over.
        longest_s = size.warmup_s + 3 * len(size.phases) * size.phase_s
        stop = threading.Event()

        async def healthy() -> None:
            result = await trio.to_thread.run_sync(
                functools.partial(
                    run_client, "throughput", proxy.bootstrap, healthy_topic, longest_s, stop=stop
                )
            )
            assert isinstance(result, ThroughputResult)
            timeline.append(result)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(healthy)
            await trio.sleep(size.warmup_s + 0.5)  # + the client process's start-up
            baseline = rss_bytes(proxy.pid)
            reset_peak_rss(proxy.pid)
            for kind in size.phases:
                phase = Phase(kind, time.monotonic(), 0.0)
                if kind == "B":
                    await _hostile_phase(proxy, fetch_broker, fetch_topic, size, tally)
                else:
                    await trio.sleep(size.phase_s)
                phase.end_s = time.monotonic()
                phases.append(phase)
            peak = peak_rss_bytes(proxy.pid)
            stop.set()
        cut = await _slowloris_all_cut(proxy, size)
        pinned = await _pinned(proxy, metrics, fetch_broker, fetch_topic, healthy_topic, size)
        frame_timeouts = (await trio.to_thread.run_sync(scrape, metrics)).get(
            'purgatory_proxy_connections_closed_total{reason="frame_timeout"}', 0.0
        )
        assert proxy.alive(), proxy.log_text()[-3000:]

    (healthy_run,) = timeline
    for phase in phases:
        phase.mib_per_s = healthy_run.mib_per_s(phase.start_s + size.settle_s, phase.end_s)
    quiet = statistics.fmean(p.mib_per_s for p in phases if p.kind == "A")
    hostile = statistics.fmean(p.mib_per_s for p in phases if p.kind == "B")
    ratio = _median_pair_ratio(phases)
    hostile_connections = size.slowloris + 1 + math.ceil(size.garbage_per_s * 10)
    bound = 1.1 * (baseline + LIMIT_BYTES + MAX_REQUEST_BYTES + 2 * FETCH_DATA_BYTES)
    bound += hostile_connections * 32 * 1024
    held = (
        ratio >= 0.8
        and pinned.newcomer_ok
        and peak <= bound
        and cut.closed_by_proxy == cut.opened == size.slowloris
        and tally.garbage_closed == tally.garbage_sent > 0
        and healthy_run.delivery_errors == 0
    )
    verdict = (
        f"hostile-clients: {'HELD' if held else 'FAILED'}: healthy producer {quiet:.1f} MiB/s "
        f"quiet vs {hostile:.1f} MiB/s with hostile clients (median B/A {ratio:.0%}, asserted "
        f">= 80%; means {hostile / quiet:.0%}); "
        f"{cut.closed_by_proxy}/{cut.opened} slowloris cut by the frame timeout; never-reader "
        f"wrote {max(tally.never_reader_sent)} fetches, proxy peak RSS {peak / MIB:.0f} MiB "
        f"(baseline {baseline / MIB:.0f}, bound {bound / MIB:.0f}); garbage "
        f"{tally.garbage_closed}/{tally.garbage_sent} closed by the proxy; a never-reader alone "
        f"held {pinned.pool_used_bytes / MIB:.0f} of 32 MiB of pool and a new client "
        f"{'got in' if pinned.newcomer_ok else 'could not get in'} ({pinned.newcomer_s:.1f} s)"
    )
    figures = ProxyFigures(baseline, peak, bound, cut, frame_timeouts, pinned)
    REPORT.write(
        _body(size, phases, ratio, tally, healthy_run, figures), verdict, soak=size is SOAK
    )
    assert healthy_run.delivery_errors == 0, healthy_run.delivery_errors
    assert cut.opened == size.slowloris and cut.closed_by_proxy == cut.opened, cut
    assert tally.garbage_sent > 0 and tally.garbage_closed == tally.garbage_sent, tally
    assert peak <= bound, verdict
    assert pinned.newcomer_ok, (
        f"with one never-reading client connected, a new producer failed after "
        f"{pinned.newcomer_s:.1f} s: {pinned.newcomer_error}; the never-reader holds "
        f"{pinned.pool_used_bytes:.0f} pool bytes of {LIMIT_BYTES} ({pinned.pool_muted:.0f} muted)"
    )
    assert ratio >= 0.8, verdict


def _median_pair_ratio(phases: list[Phase]) -> float:
    """Median over B phases of B / mean(the A phases just before and after it).

    Each B is compared with its own neighbours, so a slow drift of the machine's background
    load cancels out, and the median ignores one phase hit by a burst of someone else's work.
    """
    ratios = [
        phase.mib_per_s / statistics.fmean([before.mib_per_s, after.mib_per_s])
        for before, phase, after in zip(phases, phases[1:], phases[2:], strict=False)
        if phase.kind == "B" and before.kind == after.kind == "A"
    ]
    return statistics.median(ratios)


def _body(
    size: Size,
    phases: list[Phase],
    ratio: float,
    tally: Hostile,
    healthy: ThroughputResult,
    figures: ProxyFigures,
) -> list[str]:
    cut = figures.cut
    timeline = " ".join(f"{p.kind} {p.mib_per_s:.1f}" for p in phases)
    return [
        "A librdkafka producer (acks=all, 1 KiB records, closed loop) runs through the "
        f"proxy for the whole test while phases of {size.phase_s:g} s alternate "
        f"`{size.phases}`: in B phases, {size.slowloris} slowloris connections (each inside "
        "a 1 KiB frame, one byte a second), one client pipelining Fetch requests for "
        f"512 KiB and reading nothing, and {size.garbage_per_s:g} garbage connections a "
        "second (random bytes, a TLS ClientHello, an unknown API key). Each phase's "
        f"throughput leaves out its first {size.settle_s:g} s. Proxy: 32 MiB pool, largest "
        f"request 2 MiB, `frame_timeout_ms = {FRAME_TIMEOUT_MS}` (a `--config` file). "
        "Alternating phases, each B judged against its neighbouring A phases, because on "
        "this shared machine two back-to-back undisturbed 5 s runs differed by 40%.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| healthy MiB/s by phase | {timeline} |",
        "| median over B phases of B / mean of its neighbouring A phases, asserted >= 80% | "
        f"{ratio:.0%} |",
        f"| healthy delivery errors | {healthy.delivery_errors} |",
        f"| slowloris opened in B phases | {tally.slowloris_opened} |",
        f"| slowloris afterwards: cut by the frame timeout / opened | "
        f"{cut.closed_by_proxy} / {cut.opened} |",
        f"| connections closed for frame timeout (metric, whole run) | "
        f"{figures.frame_timeouts:.0f} |",
        f"| never-reader fetches written per phase (then TCP pushed back) | "
        f"{', '.join(map(str, tally.never_reader_sent))} of {size.never_reader_requests} |",
        f"| proxy RSS baseline / peak / bound | {figures.baseline_bytes / MIB:.0f} / "
        f"{figures.peak_bytes / MIB:.0f} / {figures.bound_bytes / MIB:.0f} MiB |",
        f"| garbage connections closed by the proxy / sent / answered | "
        f"{tally.garbage_closed} / {tally.garbage_sent} / {tally.garbage_answered} |",
        f"| afterwards, a never-reader alone: fetches written / pool used / muted | "
        f"{figures.pinned.never_reader_sent} / {figures.pinned.pool_used_bytes / MIB:.1f} MiB "
        f"/ {figures.pinned.pool_muted:.0f} |",
        f"| then a new kafka-python producer (10 sends) | "
        f"{'ok' if figures.pinned.newcomer_ok else figures.pinned.newcomer_error} in "
        f"{figures.pinned.newcomer_s:.1f} s |",
    ]


async def test_hostile_clients_do_not_slow_a_healthy_one(tmp_path: Path) -> None:
    await _scenario(QUICK, tmp_path)


@pytest.mark.soak
async def test_hostile_clients_soak(tmp_path: Path) -> None:
    await _scenario(SOAK, tmp_path)
