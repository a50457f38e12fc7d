# Strategy: the long run under `make soak`: an hour of steady produce and consume through the
# proxy (Kafka's verifiable clients, both group protocols) with a broker bounce every minute,
# clean and hard in turn, each chasing the leader of the next partition. Besides Kafka's
# judgement of the records (tests/support/fault_matrix.py: nothing acknowledged lost or stored
# twice, consumption resumes after every bounce), the question is whether anything the proxy
# holds grows with the faults: its resident memory, descriptors, memory pool and held
# operations are sampled every 5 s (tests/support/proxy_sampler.py) and the last quarter of the
# run is held against the first (the first after a warm-up of two minutes, so the JIT-less
# steady state is compared, not start-up). Tolerances say what a leak would look like, not a
# timing: RSS may rise by 16 MiB (a shared read cache and allocator slack; a leaked
# connection costs about 17 KiB, a leaked held fetch its response budget), descriptors by 4,
# the pool's median by 1 MiB, held operations' median by 2.
#
# FAULT_SOAK_MINUTES (default 60) shortens a run to prove the harness. The plot goes to
# docs/img/fault-soak.png and the section to docs/reliability.md with PURGATORY_WRITE_DOCS=1.
"""An hour through the proxy with a bounce a minute: nothing lost, nothing grows."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testbed.kafka_cluster import KafkaCluster
from testbed.report import RELIABILITY_MD
from testbed.topics import create_topic
from tests.support.fault_cells import Cell, heal, run_cell
from tests.support.fault_report import FaultRun, judge_run
from tests.support.load_scenario import WRITE_DOCS_ENV
from tests.support.proxy_replica import ProxyReplica
from tests.support.proxy_sampler import FIGURES, Sampler, plot, quarters
from tests.support.verifiable_routes import THROUGHPUT, finish, make_route, running_routes

TEST_FILE = "tests/reliability/kafka_system/test_fault_soak.py"
MINUTES = float(os.environ.get("FAULT_SOAK_MINUTES", "60"))
WARM_UP_S = 120.0
BOUNCE_EVERY_S = 60.0
FAULTS = ("leader-clean-bounce", "leader-hard-bounce")
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
#: Largest rise from the first quarter to the last: label -> (statistic, allowed rise).
TOLERANCES = {
    "RSS": ("max", 16.0),
    "open descriptors": ("max", 4.0),
    "memory pool used": ("median", 1.0),
    "held operations": ("median", 2.0),
}
PLOT = RELIABILITY_MD.parent / "img" / "fault-soak.png"


@pytest.mark.soak
def test_an_hour_of_bounces_through_the_proxy(cluster: KafkaCluster, tmp_path: Path) -> None:
    heal(cluster, [])
    with ProxyReplica(cluster.bootstrap(), len(cluster.nodes)) as replica:
        topic = create_topic(cluster.bootstrap(), "fault-soak", assignment=ASSIGNMENT,
                             configs={"min.insync.replicas": "2"})  # fmt: skip
        route = make_route("proxy", replica.bootstrap, topic, tmp_path, prefix=1)
        sampler = Sampler(replica.http)
        cells: list[Cell] = []
        pid = replica.process.pid
        with running_routes([route]):
            sampler.start()
            started = time.monotonic()
            time.sleep(WARM_UP_S)
            while time.monotonic() - started < MINUTES * 60 - BOUNCE_EVERY_S:
                due = time.monotonic() + BOUNCE_EVERY_S
                index = len(cells)
                cells.append(run_cell(cluster, [route], FAULTS[index % 2], index))
                time.sleep(max(0.0, due - time.monotonic()))
            heal(cluster, [topic])
            sampler.stop.set()
            sampler.join(timeout=30)
            caught_up = finish([route])
        same = replica.process.alive() and replica.process.pid == pid
    samples = [s for s in sampler.samples if s.at_s - sampler.samples[0].at_s >= WARM_UP_S]
    problems = [] if same else ["the proxy process died or was replaced"]
    rows = [("samples (every 5 s, after the warm-up) / missed scrapes",
             f"{len(samples)} / {sampler.misses}")]  # fmt: skip
    for label in FIGURES:
        parts = quarters(samples, label)
        unit = FIGURES[label][2]
        rows.append((f"{label}{f' ({unit})' if unit else ''}: median / max by quarter",
                     ", ".join(f"{m:.1f} / {x:.1f}" for m, x in parts)))  # fmt: skip
        if label in TOLERANCES:
            statistic, allowed = TOLERANCES[label]
            pick = 0 if statistic == "median" else 1
            rise = parts[3][pick] - parts[0][pick]
            if rise > allowed:
                problems.append(f"{label}: {statistic} rose by {rise:.1f} from the first quarter "
                                f"to the last (allowed {allowed:g})")  # fmt: skip
    if os.environ.get(WRITE_DOCS_ENV) == "1" and samples:
        plot(samples, [c.fault_s for c in cells], PLOT,
             f"purgatory-proxy, {MINUTES:g} min, a broker bounce a minute")  # fmt: skip
    run = FaultRun(
        "fault-soak",
        f"An hour of bounces through the proxy ({MINUTES:g} minutes this run)",
        f"{TEST_FILE}::test_an_hour_of_bounces_through_the_proxy",
        f"Kafka's VerifiableProducer (acks=all, idempotent, ~{THROUGHPUT} records/s) and one "
        "VerifiableConsumer per group protocol through the proxy for the run, on three Apache "
        "Kafka nodes (RF 3, min ISR 2); every minute after a two-minute warm-up the leader of "
        "the next partition is bounced, cleanly and hard in turn. The proxy's RSS, open "
        "descriptors, memory pool and held operations (its purgatories' pending operations) "
        "are sampled from /metrics every 5 s; the last quarter of the run is held against the "
        "first (RSS max + 16 MiB, descriptors max + 4, pool median + 1 MiB, held median + 2). "
        "`FAULT_SOAK_MINUTES` sets the length (60 by default).\n\n"
        "![RSS, descriptors, pool and held operations over the run](img/fault-soak.png)",
        soak=True,
        env=f"FAULT_SOAK_MINUTES={MINUTES:g}" if "FAULT_SOAK_MINUTES" in os.environ else "",
    )
    _, problems = judge_run(run, cluster.bootstrap(), [route], cells, caught_up, problems, rows)
    assert not problems, problems
