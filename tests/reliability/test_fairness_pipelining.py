# Strategy: issue 29's "under memory pressure some connections get nothing while others get
# everything", against Apache Kafka. 100 connections each pipeline six 1 MB produces
# (tests/support/load_pipeline.py) through a proxy with a 32 MiB pool, and straight to the
# broker for comparison, alternately, several runs each. Judged at half-time (half of all bytes
# acknowledged): through the proxy no connection may have nothing acknowledged, and Jain's
# index of the acknowledged bytes must be at least the direct route's. Against Apache Kafka the
# direct route is nearly round-robin (a broker keeps one request per connection in processing),
# so both routes land within a few hundredths of 1.0 and one run's index moves by about as much
# with the machine's load (where half-time falls in the connections' cycle): "at least" is
# judged on the means over the runs, less three standard errors of their difference (computed
# from the runs themselves), so the test fails when the proxy is less fair than the broker by
# more than the runs' own noise. Measured over six runs each on this machine: direct 0.983,
# proxy 0.970 on average; before issue 29's change, proxy 0.74-0.77. The numbers are printed.
#
# Main's proxy let whoever got pool memory first pipeline all six requests into the broker
# while others waited for their first: 7 to 16 connections at zero at half-time (Jain 0.62 to
# 0.82) where the broker alone left none (0.84 to 0.92). Kafka keeps one request per connection
# in processing; the proxy does too while memory is short (proxy/connection/client.py).
"""Fairness under memory pressure: a pipelining produce flood through a 32 MiB pool."""

from __future__ import annotations

import statistics

import pytest

from testbed.kafka_cluster import running_kafka
from testbed.proxy_process import running_proxy
from testbed.topics import create_topic
from tests.support.load_pipeline import HalfTime, pipelining_flood
from tests.support.load_wire import leader_address

CONNECTIONS = 100
PIPELINE = 6
#: Kafka's default message.max.bytes is 1 MiB + 12: a record of 1 MB fits in one batch.
VALUE_BYTES = 1_000_000
PROXY_ENV = {"PURGATORY_PROXY_MEMORY__SOCKET_REQUEST_MAX_BYTES": "2MiB"}


async def _runs(runs: int) -> tuple[list[HalfTime], list[HalfTime]]:
    direct: list[HalfTime] = []
    proxied: list[HalfTime] = []
    with (
        running_kafka() as kafka,
        running_proxy(kafka.bootstrap(), "--memory-limit", "32MiB", env=PROXY_ENV) as proxy,
    ):
        topic = create_topic(proxy.bootstrap, "fairness")
        via_proxy = await leader_address(proxy.host, proxy.port, topic)
        host, port = kafka.bootstrap().rsplit(":", 1)
        straight = (host, int(port))
        for _ in range(runs):
            for route, results in ((straight, direct), (via_proxy, proxied)):
                results.append(
                    await pipelining_flood(
                        route, topic, connections=CONNECTIONS, pipeline=PIPELINE,
                        value_bytes=VALUE_BYTES,
                    )
                )  # fmt: skip
        assert proxy.alive()
    return direct, proxied


def _row(name: str, results: list[HalfTime]) -> str:
    mean = statistics.mean(r.jain for r in results)
    return (
        f"{name}: at zero {[r.at_zero for r in results]}, Jain "
        f"{[round(r.jain, 3) for r in results]} (mean {mean:.3f}), half-time "
        f"{[round(r.seconds, 1) for r in results]} s, requests acknowledged by connections "
        f"(0, 1, 2, ...) {[r.spread for r in results]}"
    )


def _noise(direct: list[HalfTime], proxied: list[HalfTime]) -> float:
    """Three standard errors of the difference of the two routes' mean Jain indexes."""
    variance = sum(
        statistics.variance([r.jain for r in runs]) / len(runs) for runs in (direct, proxied)
    )
    return 3 * variance**0.5


async def _scenario(runs: int) -> None:
    direct, proxied = await _runs(runs)
    noise = _noise(direct, proxied)
    print(f"pipelining flood, {CONNECTIONS} x {PIPELINE} x 1 MB, 32 MiB pool, {runs} runs:")
    print(_row("direct", direct))
    print(_row("proxy ", proxied))
    print(f"three standard errors of the difference of the means: {noise:.3f}")
    assert not any(r.errors for r in direct + proxied)
    assert all(r.at_zero == 0 for r in proxied), [r.at_zero for r in proxied]
    direct_mean = statistics.mean(r.jain for r in direct)
    assert statistics.mean(r.jain for r in proxied) >= direct_mean - noise


async def test_a_pipelining_flood_leaves_no_connection_behind() -> None:
    await _scenario(runs=3)


@pytest.mark.soak
async def test_a_pipelining_flood_leaves_no_connection_behind_soak() -> None:
    await _scenario(runs=10)
