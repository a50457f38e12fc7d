"""The client matrix through the proxy: every client must see exactly what a direct reader sees.

Same drivers and checks as test_matrix_direct.py, but each client's bootstrap is the proxy;
the trusted direct reader still reads the broker itself.
"""

from __future__ import annotations

import pytest
import trio

from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat import CLIENTS, roundtrip_and_check


@pytest.mark.parametrize("client", CLIENTS)
async def test_roundtrip_through_proxy_matches_direct(
    kafka_broker: Broker, proxy: ProxyProcess, client: str
) -> None:
    result, problems = await trio.to_thread.run_sync(
        roundtrip_and_check, client, proxy.bootstrap, kafka_broker.bootstrap
    )
    print(f"{client} via proxy: {result.elapsed_s:.2f} s, settings {result.report.settings}")
    assert problems == []
    assert len(result.report.consumed) == 1000
    assert proxy.alive()


async def test_debian_kcat_works_through_proxy(kafka_broker: Broker, proxy: ProxyProcess) -> None:
    """Debian's kcat (librdkafka 2.0.2) through the proxy in front of Apache Kafka."""
    result, problems = await trio.to_thread.run_sync(
        roundtrip_and_check, "kcat-debian", proxy.bootstrap, kafka_broker.bootstrap
    )
    assert problems == []
    assert len(result.report.consumed) == 1000


async def test_debian_kcat_works_through_proxy_in_front_of_tansu(tansu_broker: Broker) -> None:
    """Tansu only: Debian's kcat (librdkafka 2.0.2) fails on Tansu directly
    (test_matrix_direct.py) but works through the proxy in front of it.

    Tansu writes ApiVersions' top-level tagged fields even at their defaults, which
    librdkafka < 2.1 cannot skip; the proxy re-encodes that response the way Kafka does.
    """
    with running_proxy(tansu_broker.bootstrap) as proxy:
        result, problems = await trio.to_thread.run_sync(
            roundtrip_and_check, "kcat-debian", proxy.bootstrap, tansu_broker.bootstrap
        )
    assert problems == []
    assert len(result.report.consumed) == 1000
