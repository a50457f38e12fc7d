"""One three-node Apache Kafka (RF 3, min ISR 2) for every test of Kafka's system-test bar.

Each test heals it before it starts (every node running, no partition under-replicated,
tests/support/fault_cells.heal), so a test that fails mid-fault does not hand a broken cluster
to the next; every test has its own topics and groups. One cluster for the package saves its
start-up (half a minute on two cores) for each test of the default suite.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.kafka_cluster import KafkaCluster, running_kafka


@pytest.fixture(scope="package")
def cluster() -> Iterator[KafkaCluster]:
    with running_kafka(3) as running:
        yield running
