"""The routes of the client matrix: where a client connects, and where the trusted reader reads.

``route`` is an indirectly parametrized fixture, so a test lists the routes it runs on (and
puts a slow one behind ``soak``) with ``@pytest.mark.parametrize("route", [...], indirect=True)``:

- ``direct``: the session's one-node Apache Kafka itself (``kafka_broker``), the baseline;
- ``proxy``: the session's proxy in front of that node;
- ``proxy-3-nodes``: a proxy in front of the session's three-node cluster (``kafka_cluster``,
  replication factor 3, min ISR 2);
- ``proxy-kafka-3.9``: a proxy in front of a one-node Kafka 3.9.2, the older line users run.

Every cluster and proxy is session-scoped and started only when a test asks for its route.
The trusted reader (``Route.direct``) always reads the broker itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.kafka_install import KAFKA_LINES, KAFKA_VERSION
from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess, running_proxy

#: The routes every case runs on unless it says otherwise.
ROUTES = ("direct", "proxy", "proxy-3-nodes")
#: The older line of Apache Kafka the matrix runs the round trip on.
KAFKA_39 = KAFKA_LINES[1]


@dataclass(frozen=True)
class Route:
    """Where clients connect (``bootstrap``) and where the trusted reader reads (``direct``)."""

    name: str
    bootstrap: str
    direct: str
    kafka_version: str
    proxy: ProxyProcess | None = None


@pytest.fixture(scope="session")
def cluster_proxy(kafka_cluster: KafkaCluster) -> Iterator[ProxyProcess]:
    """A proxy in front of the session's three-node cluster."""
    with running_proxy(kafka_cluster.bootstrap()) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def kafka39() -> Iterator[KafkaCluster]:
    """One node of Apache Kafka 3.9.2, with Kafka's request log (what reached the broker)."""
    with running_kafka(1, version=KAFKA_39, request_log=True) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka39_proxy(kafka39: KafkaCluster) -> Iterator[ProxyProcess]:
    with running_proxy(kafka39.bootstrap()) as proxy:
        yield proxy


def _route(request: pytest.FixtureRequest, name: str) -> Route:
    if name in ("direct", "proxy"):
        broker: Broker = request.getfixturevalue("kafka_broker")
        if name == "direct":
            return Route(name, broker.bootstrap, broker.bootstrap, KAFKA_VERSION)
        proxy: ProxyProcess = request.getfixturevalue("proxy")
        return Route(name, proxy.bootstrap, broker.bootstrap, KAFKA_VERSION, proxy)
    if name == "proxy-3-nodes":
        cluster: KafkaCluster = request.getfixturevalue("kafka_cluster")
        proxy = request.getfixturevalue("cluster_proxy")
        return Route(name, proxy.bootstrap, cluster.bootstrap(), cluster.version, proxy)
    if name == "proxy-kafka-3.9":
        old: KafkaCluster = request.getfixturevalue("kafka39")
        proxy = request.getfixturevalue("kafka39_proxy")
        return Route(name, proxy.bootstrap, old.bootstrap(), old.version, proxy)
    raise ValueError(f"unknown route {name!r}")


@pytest.fixture
def route(request: pytest.FixtureRequest) -> Route:
    """The route named by the test's indirect parameter."""
    return _route(request, request.param)
