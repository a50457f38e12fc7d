"""Shared fixtures: the real brokers the integration tests talk to.

Apache Kafka (KRaft, resolved from Maven Central by ``python -m testbed.kafka_install``) is the
broker of the integration, compatibility and reliability suites; ``$KAFKA_BOOTSTRAP`` points
``kafka_broker`` at any other cluster instead. Tansu, the embedded broker of ``make run``, is
the broker only of the tests about it (``tansu_broker``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.processes import Broker, running_tansu
from testbed.proxy_process import ProxyProcess, running_proxy


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Broker]:
    """A real broker: ``$KAFKA_BOOTSTRAP`` if set, else a one-node Apache Kafka."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        host, _, port = external.split(",")[0].rpartition(":")
        yield Broker(host, int(port), None)
        return
    with running_kafka(1) as cluster:
        node = cluster.nodes[0]
        yield Broker("127.0.0.1", node.ports["PLAINTEXT"], node.pid)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Three Apache Kafka nodes (replication factor 3, min ISR 2), with Kafka's request log
    so tests can see which node a request reached. Tests that stop nodes start their own."""
    with running_kafka(3, request_log=True) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[Broker]:
    """The embedded broker of ``make run`` (Tansu), for the tests about it."""
    with running_tansu() as broker:
        yield broker


@pytest.fixture(scope="session")
def proxy(kafka_broker: Broker) -> Iterator[ProxyProcess]:
    """One purgatory-proxy process in front of the session's broker."""
    with running_proxy(kafka_broker.bootstrap) as running:
        yield running
