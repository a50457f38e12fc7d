# Strategy: what every broker-fault scenario (tests/reliability/test_broker_faults.py,
# test_leader_failover.py) does around its fault, written once:
#
#   running_clients  the consumer starts first and the producer once the consumer has its
#                    partitions (a producer started first builds a backlog that blurs what the
#                    fault costs); on leaving, both stop and are joined (bounded).
#   settle           after the fault: wait until the consumer has every acknowledged record, stop
#                    the clients, then read the topic and the group's committed offsets from the
#                    cluster and reconcile them (broker_faults_ledger) into an Outcome.
#   recovery         seconds from a moment (the fault, a restart) to the first acknowledgement of
#                    a record sent after it, and to the first consumption of such a record,
#                    optionally only on given partitions (those the fault hit).
#   Outcome          figures for the report, problems for the assertion; `report` prints the
#                    verdict line and the scenario's docs/reliability.md section (written only
#                    with PURGATORY_WRITE_DOCS=1, tests/support/load_scenario.py).
"""Clients around a broker fault, the reconciliation after it, and the scenario's report."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from testbed.report import machine_line
from tests.support.broker_faults_ledger import Ledger, reconcile
from tests.support.broker_faults_traffic import (
    GroupConsumer,
    PacedProducer,
    committed,
    read_back,
)
from tests.support.load_scenario import publish_section

__all__ = [
    "Outcome",
    "fmt",
    "recovery",
    "running_clients",
    "settle",
    "wait_for",
]

#: How long a consumer may take to get its partitions before the producer starts anyway.
ASSIGN_TIMEOUT_S = 60.0
#: How long the consumer may take to catch up once the producer is done (hang guard).
CATCH_UP_S = 60.0


@dataclass
class Outcome:
    """What one scenario found: figures for the report, problems for the assertion."""

    name: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def row(self, name: str, value: object) -> None:
        self.rows.append((name, fmt(value)))

    def check(self, held: bool, problem: str) -> None:
        if not held:
            self.problems.append(problem)

    def threads(self, *threads: PacedProducer | GroupConsumer) -> None:
        """No client thread failed or hung."""
        for thread in threads:
            self.check(thread.failure is None, f"{thread.name} failed: {thread.failure!r}")
            self.check(not thread.is_alive(), f"{thread.name} did not stop (a client call hung)")

    def ledger(self, ledger: Ledger, producer: PacedProducer, consumer: GroupConsumer) -> None:
        """The reconciliation's problems and rows, and the producer's delivery failures."""
        self.problems += ledger.problems
        self.check(not producer.failed, f"{len(producer.failed)} failed: {producer.failed[:2]}")
        self.row("records offered / acknowledged / failed",
                 f"{producer.sent:,} / {ledger.acked:,} / {len(producer.failed):,}")  # fmt: skip
        retries = f"{producer.request_timeouts:,} / {producer.retries:,} / {producer.resent:,}"
        self.row("producer: requests timed out / retried / re-sent (librdkafka stats)", retries)
        self.row("acknowledged records not at their offset", ledger.lost)
        self.row("... acknowledged without an offset (a re-sent batch the leader had), found",
                 ledger.acked_without_offset)  # fmt: skip
        self.row("read back without the proxy", ledger.stored)
        self.row("... no acknowledgement names / duplicate keys",
                 f"{ledger.unacked_in_topic} / {ledger.duplicates_in_topic}")  # fmt: skip
        self.row("consumed through the group (redelivered)",
                 f"{ledger.consumed:,} ({ledger.redelivered:,})")  # fmt: skip
        self.row("stored records never consumed", ledger.not_consumed)
        self.row("consumer commit failures", len(consumer.commit_errors))

    def report(self, summary: str, setup: str) -> None:
        """Print the verdict line and this scenario's docs/reliability.md section."""
        line = f"{self.name}: {'ok' if not self.problems else 'FAILED'} — {summary}"
        print(line)
        md = [
            f"## {self.name}", "", machine_line(), "", setup, "", f"**Verdict:** `{line}`", "",
            "| figure | value |", "| --- | --- |",
            *(f"| {name} | {value} |" for name, value in self.rows),
        ]  # fmt: skip
        if self.problems:
            md += ["", "**Did not hold:**", "", *(f"- {p}" for p in self.problems)]
        publish_section(self.name, "\n".join(md))


@contextmanager
def running_clients(consumer: GroupConsumer, producer: PacedProducer) -> Iterator[None]:
    """The consumer, then the producer once the consumer has its partitions (a consumer
    that never joins shows up in the ledger, not as a stuck fixture); both stopped and
    joined (bounded) however the block ends."""
    consumer.start()
    try:
        consumer.assigned.wait(ASSIGN_TIMEOUT_S)
        producer.start()
        yield
    finally:
        threads = (producer, consumer)
        for thread in threads:
            thread.stop.set()
        for thread in threads:
            if thread.ident is not None:
                thread.join(timeout=60)


def settle(
    bootstrap: str,
    topic: str,
    partitions: int,
    group: str,
    producer: PacedProducer,
    consumer: GroupConsumer,
) -> Ledger:
    """Once the producer is done: wait (bounded) until the consumer has consumed every
    acknowledged record, stop it, and reconcile what the cluster (``bootstrap``) has."""
    producer.join(timeout=120)
    wanted = {(a.key, a.value) for a in producer.acked}
    deadline = time.monotonic() + CATCH_UP_S
    while time.monotonic() < deadline:
        if wanted <= {(c.key, c.value) for c in list(consumer.consumed)}:
            break
        time.sleep(0.1)
    time.sleep(1.0)  # its commit after the last batch
    consumer.stop.set()
    consumer.join(timeout=60)
    stored = read_back(bootstrap, topic, partitions)
    ledger = reconcile(
        producer.acked,
        stored.records,
        consumer.consumed,
        committed(bootstrap, group, topic, partitions),
    )
    if not stored.complete:
        ledger.problems.append("the read-back did not reach every partition's end")
    return ledger


def recovery(
    producer: PacedProducer,
    consumer: GroupConsumer,
    since_s: float,
    until_s: float = float("inf"),
    partitions: Collection[int] | None = None,
) -> dict[str, float | None]:
    """Seconds from ``since_s`` to the first ack of a record sent after it, and to the first
    consumption of such a record (both before ``until_s``; only on ``partitions`` if given);
    None if that never happened."""

    def on(partition: int) -> bool:
        return partitions is None or partition in partitions

    after = [a for a in producer.acked if since_s < a.sent_s < until_s and on(a.partition)]
    first_ack = _first(a.acked_s for a in after if a.acked_s < until_s)
    sent_after = {(a.key, a.value) for a in after}
    first_seen = _first(
        c.received_s for c in list(consumer.consumed) if (c.key, c.value) in sent_after
    )
    return {
        "producer": None if first_ack is None else first_ack - since_s,
        "consumer": None if first_seen is None else first_seen - since_s,
    }


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Hang guard: poll ``condition`` every 50 ms; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s} s")
        time.sleep(0.05)


def fmt(value: object) -> str:
    if value is None:
        return "never"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f} s"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _first(times: Iterable[float]) -> float | None:
    return min(times, default=None)
