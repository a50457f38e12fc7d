"""Shared fixtures: the real broker every integration test talks to."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testbed.processes import Broker, running_tansu
from testbed.proxy_process import ProxyProcess, running_proxy


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Broker]:
    """A real Kafka-compatible broker: ``$KAFKA_BOOTSTRAP`` if set, else a fresh Tansu."""
    external = os.environ.get("KAFKA_BOOTSTRAP")
    if external:
        host, _, port = external.split(",")[0].rpartition(":")
        yield Broker(host, int(port), None)
        return
    with running_tansu() as broker:
        yield broker


@pytest.fixture(scope="session")
def proxy(kafka_broker: Broker) -> Iterator[ProxyProcess]:
    """One purgatory-proxy process in front of the session's broker."""
    with running_proxy(kafka_broker.bootstrap) as running:
        yield running
