"""The two reports the pipeline tests read: one over real traffic, one on a Spark cluster.

Each is made once per session (a proxy, real clients and a Spark run take a minute or more on
two cores), and every test file of this folder reads the same one.
"""

from __future__ import annotations

import pytest

from testbed.processes import Broker
from tests.pipeline._cluster import ClusterRun, report_on_cluster
from tests.pipeline._traffic import TrafficRun, report_over_traffic


@pytest.fixture(scope="session")
def traffic_run(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> TrafficRun:
    """The report over the log of real traffic through the proxy (tests/pipeline/_traffic.py)."""
    return report_over_traffic(kafka_broker, tmp_path_factory.mktemp("pipeline"))


@pytest.fixture(scope="session")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> ClusterRun:
    """The report of a synthetic log on a standalone Spark cluster (tests/pipeline/_cluster.py)."""
    return report_on_cluster(tmp_path_factory.mktemp("cluster"))
