# Strategy: Kafka's transactions test (apache/kafka:tests/kafkatest/tests/core/transactions_test.py)
# through the proxy. An input topic (2 partitions) is seeded by Kafka's VerifiableProducer; one
# TransactionalMessageCopier per input partition (kafka-tools jar: consume read_committed, produce
# to the output topic and commit the consumed offsets in one transaction, a third of the
# transactions aborted at random) copies it through the proxy, while a read_committed
# VerifiableConsumer reads the output through the proxy. Meanwhile two brokers are hard-bounced
# (kill -9, started again after the broker session timeout): the leader of the output's partition 0,
# then the transaction coordinator of copier 0's transactional id. Kafka's judgement: the output,
# read by the concurrent consumer and read back from the cluster (read_committed, without the
# proxy), holds each input record exactly once, no duplicate, in the input's order per partition
# (the copier keeps the partition).
#
# Each bounce comes once the copiers made progress (Kafka's bounce_copiers waits for 20 %), and the
# seed is large enough that copying outlasts both bounces on this machine (a bounce after the copy
# finished fails the test: it would prove nothing); the copiers' progress at each bounce and how
# soon they committed again are reported.
"""Exactly once through the proxy: the transactional copier under hard bounces."""

from __future__ import annotations

import contextlib
import functools
import signal
import time
from collections import Counter
from pathlib import Path

from testbed.kafka_cluster import KafkaCluster
from testbed.kafka_tools import (
    KafkaTool,
    running_tool,
    transactional_copier,
    verifiable_consumer,
    verifiable_producer,
)
from testbed.processes import free_port
from testbed.proxy_process import running_proxy
from testbed.topics import create_topic
from tests.support.broker_faults import ProxyHttp
from tests.support.cluster_roles import coordinator, leaders, wait_until
from tests.support.fault_cells import HARD_BOUNCE_DOWN_S, heal
from tests.support.load_scenario import Report
from tests.support.verifiable_judge import Read, acks_of, read_log, reads_of

TEST_FILE = "tests/reliability/kafka_system/test_exactly_once.py"
INPUT_ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1]}
OUTPUT_ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
SEEDS = 40_000
TRANSACTION_SIZE = 200
#: Kafka's test: lower than its progress timeout, at least the request timeout (30 s).
TRANSACTION_TIMEOUT_MS = 40_000
#: Share of the copying after which each bounce comes (the second, at the earliest, once the
#: cluster healed from the first).
BOUNCE_AT = (0.15, 0.4)
COPY_BOUND_S = 300.0  # hang guards
READ_BOUND_S = 120.0


def test_transactional_copy_is_exactly_once_under_hard_bounces(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    heal(cluster, [])
    bootstrap = cluster.bootstrap()
    metrics_port = free_port()
    rows: list[tuple[str, str]] = []
    problems: list[str] = []
    with running_proxy(bootstrap, "--metrics", f"127.0.0.1:{metrics_port}") as proxy:
        source = create_topic(bootstrap, "eos-input", assignment=INPUT_ASSIGNMENT,
                              configs=TOPIC_CONFIGS)  # fmt: skip
        sink = create_topic(bootstrap, "eos-output", assignment=OUTPUT_ASSIGNMENT,
                            configs=TOPIC_CONFIGS)  # fmt: skip
        seeder = verifiable_producer(
            "seed", proxy.bootstrap, source, tmp_path, throughput=-1, max_messages=SEEDS,
            properties={"enable.idempotence": "true", "retries": 1_000_000},
        )  # fmt: skip
        with running_tool(seeder):
            assert seeder.wait(COPY_BOUND_S) == 0, seeder.log_text()[-2000:]
        seeded = acks_of(seeder)
        assert len(seeded) == SEEDS, f"{len(seeded)} of {SEEDS} seeds acknowledged"
        copiers = [
            transactional_copier(
                f"copier-{p}",
                proxy.bootstrap,
                source,
                p,
                sink,
                tmp_path,
                transactional_id=f"{source}-copier-{p}",
                group=f"{source}-copiers",
                transaction_size=TRANSACTION_SIZE,
                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            )
            for p in INPUT_ASSIGNMENT
        ]
        reader = verifiable_consumer(
            "reader", proxy.bootstrap, sink, f"{sink}-reader", tmp_path,
            properties={"isolation.level": "read_committed"},
        )  # fmt: skip
        with contextlib.ExitStack() as stack:
            stack.enter_context(running_tool(reader))
            reader.wait_for_events("partitions_assigned")
            started_s = time.time()
            for copier in copiers:
                stack.enter_context(running_tool(copier))
            roles = ["leader of the output's partition 0", "transaction coordinator of copier 0"]
            for role, share in zip(roles, BOUNCE_AT, strict=True):
                wait_until(functools.partial(_copied, copiers, share), COPY_BOUND_S,
                           f"copiers at {share:.0%}")  # fmt: skip
                heal(cluster, [])
                if role.startswith("leader"):
                    victim = leaders(bootstrap, sink)[0].leader
                else:
                    victim = coordinator(bootstrap, f"{source}-copier-0")
                before = _progress(copiers)
                if before >= 1.0:
                    problems.append(f"the copy was done before the bounce of the {role}: "
                                    "more seeds would keep it busy")  # fmt: skip
                bounced_s = time.time()
                cluster.kill(victim, signal.SIGKILL)
                time.sleep(HARD_BOUNCE_DOWN_S)
                cluster.start(victim)
                resumed = _resume_s(copiers, bounced_s)
                rows.append((f"hard bounce of the {role}",
                             f"node {victim} at {before:.0%} copied; copiers committed again "
                             f"after {_fmt(resumed)}"))  # fmt: skip
            for copier in copiers:
                code = copier.wait(COPY_BOUND_S)
                finished = [e for e in copier.named("ShutdownComplete")
                            if int(e.data["remaining"]) == 0]  # fmt: skip
                if code != 0 or not finished:
                    problems.append(f"{copier.name}: exit {code}, finished {bool(finished)}; log "
                                    f"{copier.log_path}")  # fmt: skip
            copied_s = time.time() - started_s
            wait_until(lambda: len(reads_of(reader)) >= SEEDS, READ_BOUND_S, "the reader")
            reader.stop()
        proxy_ok = proxy.alive() and ProxyHttp(metrics_port).healthy()
    source_log = read_log(bootstrap, source, len(INPUT_ASSIGNMENT))
    sink_log = read_log(bootstrap, sink, len(OUTPUT_ASSIGNMENT), isolation="read_committed")
    seeds = {a.value for a in seeded}
    consumed = [r.value for r in reads_of(reader)]
    stored = [r.value for r in sink_log]
    checks = [
        ("the output read back (read_committed, without the proxy)", stored),
        ("the output consumed through the proxy (read_committed)", consumed),
    ]
    for what, values in checks:
        counts = Counter(values)
        duplicates = sum(n - 1 for n in counts.values())
        missing, extra = seeds - set(counts), set(counts) - seeds
        rows.append((what, f"{len(values):,} records: missing {len(missing)}, not in the input "
                           f"{len(extra)}, duplicated {duplicates}"))  # fmt: skip
        if missing or extra or duplicates:
            problems.append(
                f"{what}: missing {sorted(missing)[:3]} ({len(missing)}), extra "
                f"{sorted(extra)[:3]} ({len(extra)}), duplicated {duplicates}"
            )
    out_of_order = _order_breaks(source_log, sink_log)
    rows.append(("output partitions not in their input partition's order", str(out_of_order)))
    if out_of_order:
        problems.append(f"{out_of_order} output partitions out of their input's order")
    rows[:0] = [
        ("input records (seeded through the proxy, idempotent)", f"{len(seeds):,}"),
        ("copied in", f"{copied_s:.1f} s by {len(copiers)} copiers"),
        ("proxy alive and /healthz ok after", "yes" if proxy_ok else "no"),
    ]
    if not proxy_ok:
        problems.append("the proxy died or /healthz was not ok")
    _report(rows, problems)
    assert not problems, problems


def _copied(copiers: list[KafkaTool], share: float) -> bool:
    return _progress(copiers) >= share


def _progress(copiers: list[KafkaTool]) -> float:
    """Share of the input the copiers committed so far (their own count)."""
    done = total = 0
    for copier in copiers:
        status = copier.named("ProcessLoop", "ShutdownComplete")
        if not status:
            return 0.0
        last = status[-1].data
        done += int(last["totalProcessed"])
        total += int(last["totalProcessed"]) + int(last["remaining"])
    return done / total if total else 0.0


def _resume_s(copiers: list[KafkaTool], since_s: float) -> float | None:
    """Seconds from ``since_s`` until every copier committed a transaction after it (one that
    had already finished counts at once); None if one did not within the bound."""

    def latest() -> float | None:
        times = [0.0]
        for copier in copiers:
            status = copier.named("ProcessLoop", "ShutdownComplete")
            before = [e for e in status if e.read_s <= since_s]
            if before and before[-1].name == "ShutdownComplete":
                continue
            mark = int(before[-1].data["totalProcessed"]) if before else 0
            later = [e.read_s for e in status
                     if e.read_s > since_s and int(e.data["totalProcessed"]) > mark]  # fmt: skip
            if not later:
                return None
            times.append(min(later) - since_s)
        return max(times)

    with contextlib.suppress(AssertionError):
        wait_until(lambda: latest() is not None, COPY_BOUND_S, "the copiers committing")
    return latest()


def _order_breaks(source: list[Read], sink: list[Read]) -> int:
    """Output partitions whose committed records are not in their input partition's order."""
    breaks = 0
    for partition in {r.partition for r in source}:
        wanted = [
            r.value for r in sorted(source, key=lambda r: r.offset) if r.partition == partition
        ]
        got = [r.value for r in sorted(sink, key=lambda r: r.offset) if r.partition == partition]
        breaks += got != wanted
    return breaks


def _fmt(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.2f} s"


def _report(rows: list[tuple[str, str]], problems: list[str]) -> None:
    verdict = (
        f"exactly-once: {'ok' if not problems else 'FAILED'} — {SEEDS:,} records copied "
        "transactionally through the proxy under two hard bounces; "
        + ("each exactly once, in order" if not problems else "; ".join(problems))
    )
    body = [
        "Kafka's transactions test "
        "(`apache/kafka:tests/kafkatest/tests/core/transactions_test.py`, hard_bounce of "
        "brokers) through the proxy. Three Apache Kafka nodes (RF 3, min ISR "
        f"2). An input topic of 2 partitions is seeded with {SEEDS:,} records by Kafka's "
        "VerifiableProducer; one TransactionalMessageCopier per input partition (kafka-tools "
        f"jar; transactions of {TRANSACTION_SIZE} records, a third aborted at random, offsets "
        "committed in the transaction with the group's metadata) copies it to an output "
        "topic of 3 partitions, and a read_committed VerifiableConsumer reads the output, all "
        "through the proxy. At 15 % and 40 % of the copy a broker is killed -9 and started "
        "again after the broker session timeout + 1 s: the leader of the output's partition "
        "0, then the transaction coordinator of copier 0. Judged as Kafka judges: the output, "
        "as consumed through the proxy and as read back from the cluster (read_committed), "
        "holds every input record exactly once, and each output partition its input "
        "partition's records in order.",
        "",
        "| figure | value |",
        "| --- | --- |",
        *(f"| {name} | {value} |" for name, value in rows),
    ]
    if problems:
        body += ["", "**Did not hold:**", "", *(f"- {p}" for p in problems)]
    Report("exactly-once", "Exactly once through the proxy under hard bounces",
           f"{TEST_FILE}::test_transactional_copy_is_exactly_once_under_hard_bounces",
           ).write(body, verdict, soak=False)  # fmt: skip
