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
# * the healthy throughput over the B phases is at least 80% of that over the A phases (the
#   issue's "within 20%"); the first 0.5 s of each phase is left out (the switch itself);
# * the never-reader costs the proxy bounded memory: VmHWM over the phases stays <= 1.1 x
#   (baseline + pool limit + largest request + two responses) + 32 KiB per hostile
#   connection (one open connection costs about 17 KiB: see test_connection_storm.py), the
#   baseline taken before the first B phase. An unbounded proxy would hold up to 1024 unread
#   512 KiB answers per never-reader, 512 MiB;
# * after the phases, 500 more slowloris connections are all closed by the proxy's frame
#   timeout; every garbage connection was closed by the proxy and none got an answer; the
#   proxy is still up and the healthy client had no delivery error.
"""Scenario 5: slowloris, a never-reading client and garbage beside a healthy producer."""

from __future__ import annotations

import functools
import math
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from bench._report import RELIABILITY_MD, machine_line, write_section
from tests.support.load_clients import ThroughputResult, run_client
from tests.support.load_hostile import Garbage, NeverReader, Slowloris
from tests.support.load_proc import peak_rss_bytes, reset_peak_rss, rss_bytes, scrape
from tests.support.load_wire import (
    PRODUCE_VERSION,
    KafkaWire,
    leader_address,
    produce_request,
    record_batch,
)
from tests.support.processes import free_port, running_tansu
from tests.support.proxy_process import ProxyProcess, running_proxy

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
    phases: str = "ABABABA"
    settle_s: float = 0.5
    warmup_s: float = 2.0
    slowloris: int = 500
    garbage_per_s: float = 20.0
    never_reader_requests: int = 3000


QUICK = Size(phase_s=3.0)
SOAK = Size(phase_s=10.0, phases="ABABABABABA")


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


def _create_topic(bootstrap: str, prefix: str) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    return topic


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


async def _scenario(size: Size, tmp_path: Path) -> None:
    config = tmp_path / "hostile.toml"
    config.write_text(CONFIG)
    metrics = f"127.0.0.1:{free_port()}"
    phases: list[Phase] = []
    tally = Hostile()
    timeline: list[ThroughputResult] = []
    with (
        running_tansu() as broker,
        running_proxy(broker.bootstrap, "--config", str(config), "--metrics", metrics) as proxy,
    ):
        healthy_topic = _create_topic(proxy.bootstrap, "healthy")
        fetch_topic = _create_topic(proxy.bootstrap, "unread")
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
        frame_timeouts = (await trio.to_thread.run_sync(scrape, metrics)).get(
            'purgatory_proxy_connections_closed_total{reason="frame_timeout"}', 0.0
        )
        assert proxy.alive(), proxy.log_text()[-3000:]

    (healthy_run,) = timeline
    for phase in phases:
        phase.mib_per_s = healthy_run.mib_per_s(phase.start_s + size.settle_s, phase.end_s)
    quiet = statistics.fmean(p.mib_per_s for p in phases if p.kind == "A")
    hostile = statistics.fmean(p.mib_per_s for p in phases if p.kind == "B")
    ratio = hostile / quiet
    hostile_connections = size.slowloris + 1 + math.ceil(size.garbage_per_s * 10)
    bound = 1.1 * (baseline + LIMIT_BYTES + MAX_REQUEST_BYTES + 2 * FETCH_DATA_BYTES)
    bound += hostile_connections * 32 * 1024
    held = (
        ratio >= 0.8
        and peak <= bound
        and cut.closed_by_proxy == cut.opened == size.slowloris
        and tally.garbage_closed == tally.garbage_sent > 0
        and healthy_run.delivery_errors == 0
    )
    verdict = (
        f"hostile-clients: {'HELD' if held else 'FAILED'}: healthy producer {quiet:.1f} MiB/s "
        f"quiet vs {hostile:.1f} MiB/s with hostile clients ({ratio:.0%}, asserted >= 80%); "
        f"{cut.closed_by_proxy}/{cut.opened} slowloris cut by the frame timeout; never-reader "
        f"wrote {max(tally.never_reader_sent)} fetches, proxy peak RSS {peak / MIB:.0f} MiB "
        f"(baseline {baseline / MIB:.0f}, bound {bound / MIB:.0f}); garbage "
        f"{tally.garbage_closed}/{tally.garbage_sent} closed by the proxy"
    )
    print(verdict)
    figures = ProxyFigures(baseline, peak, bound, cut, frame_timeouts)
    write_section(
        "hostile-clients",
        _markdown(size, phases, ratio, tally, healthy_run, figures, verdict),
        path=RELIABILITY_MD,
    )
    assert healthy_run.delivery_errors == 0, healthy_run.delivery_errors
    assert cut.opened == size.slowloris and cut.closed_by_proxy == cut.opened, cut
    assert tally.garbage_sent > 0 and tally.garbage_closed == tally.garbage_sent, tally
    assert peak <= bound, verdict
    assert ratio >= 0.8, verdict


def _markdown(
    size: Size,
    phases: list[Phase],
    ratio: float,
    tally: Hostile,
    healthy: ThroughputResult,
    figures: ProxyFigures,
    verdict: str,
) -> str:
    cut = figures.cut
    timeline = " ".join(f"{p.kind} {p.mib_per_s:.1f}" for p in phases)
    return "\n".join(
        [
            "## Slow and hostile clients (scenario 5)",
            "",
            machine_line(),
            "",
            "A librdkafka producer (acks=all, 1 KiB records, closed loop) runs through the "
            f"proxy for the whole test while phases of {size.phase_s:g} s alternate "
            f"`{size.phases}`: in B phases, {size.slowloris} slowloris connections (each inside "
            "a 1 KiB frame, one byte a second), one client pipelining Fetch requests for "
            f"512 KiB and reading nothing, and {size.garbage_per_s:g} garbage connections a "
            "second (random bytes, a TLS ClientHello, an unknown API key). Each phase's "
            f"throughput leaves out its first {size.settle_s:g} s. Proxy: 32 MiB pool, largest "
            f"request 2 MiB, `frame_timeout_ms = {FRAME_TIMEOUT_MS}` (a `--config` file). "
            "Alternating phases, because on this shared machine two back-to-back undisturbed "
            "5 s runs differed by 40%.",
            "",
            "| figure | value |",
            "|---|---|",
            f"| healthy MiB/s by phase | {timeline} |",
            f"| hostile (B) / quiet (A) throughput, asserted >= 80% | {ratio:.0%} |",
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
            "",
            f"Verdict: `{verdict}`",
            "",
            "Command: `.venv/bin/python -m pytest -q tests/reliability/test_hostile_clients.py"
            + (" -m soak`" if size is SOAK else "`"),
        ]
    )


async def test_hostile_clients_do_not_slow_a_healthy_one(tmp_path: Path) -> None:
    await _scenario(QUICK, tmp_path)


@pytest.mark.soak
async def test_hostile_clients_soak(tmp_path: Path) -> None:
    await _scenario(SOAK, tmp_path)
