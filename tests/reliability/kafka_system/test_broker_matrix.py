# Strategy: the proxy held to the bar Apache Kafka holds its own brokers to. Kafka's system
# tests (apache/kafka:tests/kafkatest/tests/core/replication_test.py, transactions_test.py) run the
# verifiable clients of the kafka-tools jar while brokers are shut down and bounced, cleanly and
# hard, and then check that every acknowledged record was consumed. Here the same clients
# (testbed/kafka_tools.py) and the same faults (tests/support/fault_cells.py) run on a
# three-node Apache Kafka (RF 3, min ISR 2), through the proxy and straight to the brokers side
# by side: two routes, each with its own topic (one replica assignment, so one fault hits both
# at the same moment), an idempotent acks=all producer and a consumer per group protocol
# (classic and KIP-848). Kafka's judgement (tests/support/verifiable_judge.py): every
# acknowledged record consumed, none missing from the log, none stored twice; consumption
# resumes after every fault and at the end. Time to resume (from the fault to the first
# acknowledgement and the first consumed record after the outage, on the partitions it hit)
# is measured for both routes in the same run and reported (proxy ÷ direct), not asserted.
#
# The short form (`make test`) runs each fault once; the long form (`make soak`) ten times,
# with the controller's clean bounce too. Each prints its docs/reliability.md section (the
# matrix, and the command that produced it), written there with PURGATORY_WRITE_DOCS=1.
# The cluster is the package's (conftest.py); the proxy's own faults and exactly-once are
# test_proxy_faults.py and test_exactly_once.py.
"""Kafka's replication-test matrix through the proxy and direct: nothing acknowledged lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.kafka_cluster import KafkaCluster
from testbed.processes import free_port
from testbed.proxy_process import running_proxy
from testbed.topics import create_topic
from tests.support.broker_faults import ProxyHttp
from tests.support.fault_cells import heal, run_cell
from tests.support.fault_report import FaultRun, judge_run
from tests.support.verifiable_routes import THROUGHPUT, finish, make_route, running_routes

TEST_FILE = "tests/reliability/kafka_system/test_broker_matrix.py"
#: Both routes' topics: partition p led by node p + 1 when every node is up.
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
SHORT_FAULTS = (
    "leader-clean-shutdown",
    "leader-hard-shutdown",
    "leader-clean-bounce",
    "leader-hard-bounce",
    "controller-hard-bounce",
    "leader-paused",
)
LONG_FAULTS = (*SHORT_FAULTS[:4], "controller-clean-bounce", *SHORT_FAULTS[4:])
#: Runs per fault of the long form; FAULT_MATRIX_REPETITIONS sets another (a shorter proof).
LONG_REPETITIONS = int(os.environ.get("FAULT_MATRIX_REPETITIONS", "10"))


def test_broker_faults_matrix(cluster: KafkaCluster, tmp_path: Path) -> None:
    _broker_matrix(cluster, tmp_path, SHORT_FAULTS, 1, "test_broker_faults_matrix")


@pytest.mark.soak
def test_broker_faults_matrix_soak(cluster: KafkaCluster, tmp_path: Path) -> None:
    _broker_matrix(cluster, tmp_path, LONG_FAULTS, LONG_REPETITIONS,
                   "test_broker_faults_matrix_soak")  # fmt: skip


def _broker_matrix(
    cluster: KafkaCluster, directory: Path, faults: tuple[str, ...], repetitions: int, test: str
) -> None:
    heal(cluster, [])
    metrics_port = free_port()
    with running_proxy(cluster.bootstrap(), "--metrics", f"127.0.0.1:{metrics_port}") as proxy:
        http = ProxyHttp(metrics_port)
        topics = {
            name: create_topic(
                cluster.bootstrap(), f"matrix-{name}", assignment=ASSIGNMENT, configs=TOPIC_CONFIGS
            )
            for name in ("proxy", "direct")
        }
        routes = [
            make_route("proxy", proxy.bootstrap, topics["proxy"], directory, prefix=1),
            make_route("direct", cluster.bootstrap(), topics["direct"], directory, prefix=2),
        ]
        cells = []
        with running_routes(routes):
            for repetition in range(repetitions):
                for key in faults:
                    cells.append(run_cell(cluster, routes, key, repetition))
            heal(cluster, list(topics.values()))
            caught_up = finish(routes)
        proxy_ok = proxy.alive() and http.healthy()
    soak = test.endswith("_soak")
    run = FaultRun(
        "kafka-system-faults" + ("-soak" if soak else ""),
        "Kafka's replication test through the proxy"
        + (f" ({repetitions} runs per fault)" if soak else ""),
        f"{TEST_FILE}::{test}",
        DESCRIPTION,
        soak,
        env=f"FAULT_MATRIX_REPETITIONS={repetitions}"
        if "FAULT_MATRIX_REPETITIONS" in os.environ and soak
        else "",
    )
    problems = [] if proxy_ok else ["the proxy died or /healthz was not ok after the faults"]
    _, problems = judge_run(run, cluster.bootstrap(), routes, cells, caught_up, problems)
    assert not problems, problems


DESCRIPTION = (
    "Kafka's replication test (`apache/kafka:tests/kafkatest/tests/core/replication_test.py`) "
    "through the proxy and straight to the brokers, side by side in one run. Three Apache Kafka "
    "nodes (RF 3, min ISR 2); per route a topic of 3 partitions (the same replica "
    "assignment, so a fault hits both routes' partitions at once), Kafka's "
    f"VerifiableProducer (acks=all, idempotent, ~{THROUGHPUT} records/s) and one "
    "VerifiableConsumer per group protocol (classic, and KIP-848's consumer), from the "
    "kafka-tools jar. Before each fault the cluster is healed (every node up, no partition "
    "under-replicated, preferred leaders); the fault hits the leader of one partition "
    "(repetition r: partition r mod 3) or the active controller. Hard bounce: kill -9, "
    "started again after the broker session timeout (6 s) + 1 s; paused: SIGSTOP for "
    "10 s. Judged as Kafka judges: acknowledged records never consumed are lost, an "
    "acknowledged record stored twice in the log (read without the proxy) is duplicated; "
    "consumption resumes (each consumer's commits reach the last acknowledged offsets). "
    "Time to resume: from the fault to the end of the longest pause in acknowledgements "
    "(producer), and in records consumed (each consumer), on the partitions the fault hit, "
    "until every client flows again: the first acknowledgement or record after the outage "
    "(median over the runs, and the worst); proxy ÷ direct compares the medians of the same "
    "run. The producer sends to the partitions in turn (RoundRobinPartitioner), so a "
    "partition is never idle for long by the partitioner's choice."
)
