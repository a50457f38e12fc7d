"""Fixtures of the integration suite beyond the brokers every suite shares (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.kafka_cluster import KafkaCluster
from tests.support.secure_kafka import running_secure_kafka


@pytest.fixture(scope="session")
def secure_kafka() -> Iterator[KafkaCluster]:
    """Apache Kafka with SSL (mutual TLS), SASL_SSL and SASL_PLAINTEXT (KIP-368 sessions of
    tests/support/secure_kafka.REAUTH_MS) listeners, for the security tests."""
    with running_secure_kafka() as cluster:
        yield cluster
