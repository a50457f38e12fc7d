# Strategy: the proxy's own faults, which no broker test covers, judged as Kafka judges a
# broker's (tests/support/verifiable_judge.py): Kafka's verifiable producer (acks=all,
# idempotent) and a consumer per group protocol run through the proxy (tests/support/
# proxy_replica.py: a proxy on fixed ports, restarted where clients expect it) while
#
#   proxy-sigterm     the proxy gets SIGTERM (it stops accepting, drains for up to
#                     connections.shutdown_drain_ms, exits 0) and is started again on the
#                     same ports, as an orchestrator replaces a pod;
#   proxy-sigkill     the proxy is killed -9 (nothing drained) and started again;
#   upstream-cut      every connection from the proxy to the brokers is reset (`ss -K`), the
#                     proxy process and the brokers kept;
#   rolling restart   two proxies, each with its own ports, behind one bootstrap list that
#                     every client is given; each in turn gets SIGTERM and is started again
#                     once the clients resumed after the one before.
#
# Every acknowledged record must be consumed, stored once, and consumption must resume after
# each fault and at the end. Time to resume (from the signal or the cut to the first
# acknowledgement and the first record consumed after the outage, on any partition) is
# reported.
"""The proxy stopped, killed, cut from its brokers, and rolled: nothing acknowledged lost."""

from __future__ import annotations

import functools
import signal
from pathlib import Path

from testbed.kafka_cluster import KafkaCluster
from testbed.topics import create_topic
from tests.support.fault_cells import PARTITIONS, Cell, heal, observe
from tests.support.fault_report import FaultRun, judge_run
from tests.support.proxy_replica import ProxyReplica, can_cut, cut_upstream
from tests.support.verifiable_routes import THROUGHPUT, Route, finish, make_route, running_routes

TEST_FILE = "tests/reliability/kafka_system/test_proxy_faults.py"
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
ALL = frozenset(range(PARTITIONS))
_CLIENTS = (
    f"Kafka's VerifiableProducer (acks=all, idempotent, ~{THROUGHPUT} records/s) and one "
    "VerifiableConsumer per group protocol (classic, KIP-848's consumer) through the proxy, "
    "to a topic of 3 partitions on three Apache Kafka nodes (RF 3, min ISR 2)."
)
_JUDGED = (
    "Judged as Kafka's replication test judges a broker fault: every acknowledged record "
    "consumed, none stored twice in the log (read without the proxy), consumption resumes; "
    "time to resume from the fault to the end of the longest pause in acknowledgements and "
    "in records consumed, on any partition, until every client flows again."
)


def _route(cluster: KafkaCluster, bootstrap: str, directory: Path) -> Route:
    heal(cluster, [])
    topic = create_topic(cluster.bootstrap(), "proxy-faults", assignment=ASSIGNMENT,
                         configs=TOPIC_CONFIGS)  # fmt: skip
    return make_route("proxy", bootstrap, topic, directory, prefix=1)


def test_proxy_stopped_killed_and_cut(cluster: KafkaCluster, tmp_path: Path) -> None:
    cannot_cut = can_cut()
    assert cannot_cut is None, f"the upstream cut needs `ss -K` as root (README): {cannot_cut}"
    broker_ports = [node.ports["PLAINTEXT"] for node in cluster.nodes]
    problems: list[str] = []
    with ProxyReplica(cluster.bootstrap(), len(cluster.nodes)) as replica:
        route = _route(cluster, replica.bootstrap, tmp_path)
        hit = {route.name: ALL}
        cells: list[Cell] = []
        with running_routes([route]):
            for signum in (signal.SIGTERM, signal.SIGKILL):
                name = f"proxy: {signal.Signals(signum).name}, restarted on its ports"
                act = functools.partial(_restart, replica, signum, problems)
                cells.append(observe([route], name, 0, hit, act))

            def cut() -> str:
                return f"{cut_upstream(replica, broker_ports)} upstream connections reset"

            pid = replica.process.pid
            cells.append(observe([route], "proxy: upstream connections cut", 0, hit, cut))
            caught_up = finish([route])
        same = replica.process.pid == pid and replica.process.alive()
        if not (same and replica.http.healthy()):
            problems.append("the proxy did not survive the upstream cut (same PID, /healthz)")
    run = FaultRun(
        "proxy-faults",
        "The proxy's own faults under Kafka's verifiable clients",
        f"{TEST_FILE}::test_proxy_stopped_killed_and_cut",
        f"{_CLIENTS} The proxy runs on fixed ports; it is stopped with SIGTERM (its drain, "
        "`connections.shutdown_drain_ms`) and started again on the same ports, then killed "
        "with SIGKILL and started again, then every connection it has to the brokers is reset "
        "with `ss -K` (the kernel destroys the sockets; proxy and brokers keep running). "
        f"{_JUDGED}",
    )
    _, problems = judge_run(run, cluster.bootstrap(), [route], cells, caught_up, problems)
    assert not problems, problems


def test_rolling_restart_of_two_replicas(cluster: KafkaCluster, tmp_path: Path) -> None:
    problems: list[str] = []
    with (
        ProxyReplica(cluster.bootstrap(), len(cluster.nodes)) as first,
        ProxyReplica(cluster.bootstrap(), len(cluster.nodes)) as second,
    ):
        route = _route(cluster, f"{first.bootstrap},{second.bootstrap}", tmp_path)
        cells: list[Cell] = []
        with running_routes([route]):
            for which, replica in (("first", first), ("second", second)):
                name = f"rolling restart: the {which} of two replicas (SIGTERM, restarted)"
                act = functools.partial(_restart, replica, signal.SIGTERM, problems)
                cells.append(observe([route], name, 0, {route.name: ALL}, act))
            caught_up = finish([route])
    run = FaultRun(
        "proxy-rolling-restart",
        "A rolling restart of two proxy replicas under Kafka's verifiable clients",
        f"{TEST_FILE}::test_rolling_restart_of_two_replicas",
        f"{_CLIENTS} Two proxies, each with its own bootstrap and broker ports, in front of "
        "the same cluster; every client is given both bootstrap addresses. Each replica in "
        "turn is stopped with SIGTERM and started again on its ports, the second once the "
        f"clients resumed after the first. {_JUDGED}",
    )
    _, problems = judge_run(run, cluster.bootstrap(), [route], cells, caught_up, problems)
    assert not problems, problems


def _restart(replica: ProxyReplica, signum: int, problems: list[str]) -> str:
    """Stop ``replica`` with ``signum`` and start it on its ports again; a SIGTERM must end in
    an orderly exit (code 0). The note for the cell."""
    code, stopped_s, started_s = replica.restart(signum)
    if signum == signal.SIGTERM and code != 0:
        problems.append(f"SIGTERM: exit code {code}, not 0 (an orderly stop)")
    return f"exit code {code} after {stopped_s:.2f} s, listening again after {started_s:.2f} s"
