"""The client matrix against the broker itself: the baseline the proxy's matrix must equal.

Each client creates a fresh topic, produces 1,000 keyed records with acks=all (idempotent
where the client can), consumes them in a consumer group from the earliest offset and
commits; ``check_roundtrip`` compares that with a plain kafka-python read of the broker (see
tests/compat/_check.py for what is checked).

The tests are trio tests that run the blocking drivers in a worker thread, so a proxy
fixture running in the test's trio loop can later hand them its bootstrap address instead.
"""

from __future__ import annotations

import functools

import pytest
import trio

from testbed.processes import Broker
from tests.compat import CLIENTS, ClientFailed, roundtrip_and_check

#: Debian's kcat links librdkafka 2.0.2, which cannot parse Tansu's ApiVersions reply
#: (DESIGN "Known quirks"). This is that failure, word for word, as librdkafka logs it.
DEBIAN_LIBRDKAFKA_ON_TANSU = "ApiVersionRequest failed: Local: Read underflow"


@pytest.mark.parametrize("client", CLIENTS)
async def test_roundtrip_matches_direct_consumer(kafka_broker: Broker, client: str) -> None:
    result, problems = await trio.to_thread.run_sync(
        roundtrip_and_check, client, kafka_broker.bootstrap, kafka_broker.bootstrap
    )
    print(f"{client}: {result.elapsed_s:.2f} s, settings {result.report.settings}")
    assert problems == []
    assert len(result.report.consumed) == 1000


async def test_debian_kcat_works_on_apache_kafka(kafka_broker: Broker) -> None:
    """Debian's own librdkafka 2.0.2 reads Apache Kafka's ApiVersions (it fails on Tansu's)."""
    _, problems = await trio.to_thread.run_sync(
        roundtrip_and_check, "kcat-debian", kafka_broker.bootstrap, kafka_broker.bootstrap
    )
    assert problems == []


async def test_debian_kcat_fails_on_tansu_directly(tansu_broker: Broker) -> None:
    """Tansu only: Debian's kcat cannot parse its ApiVersions reply (test_matrix_proxy.py shows
    the proxy in front of Tansu mending that). Pinned so it cannot change unnoticed."""
    run = functools.partial(
        roundtrip_and_check, "kcat-debian", tansu_broker.bootstrap, tansu_broker.bootstrap
    )
    with pytest.raises(ClientFailed) as failed:
        await trio.to_thread.run_sync(run)
    assert failed.value.stage == "metadata"
    assert DEBIAN_LIBRDKAFKA_ON_TANSU in failed.value.detail
