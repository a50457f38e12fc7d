"""Fetch sessions through the proxy: exactly once, in order, across a consumer-group rebalance.

The Java client and librdkafka both fetch with incremental sessions (KIP-227), which the
proxy terminates itself (issue 6). Each client consumes 10,000 records over 8 partitions
through the proxy in a group where a second member joins mid-way and the first then
leaves; members commit what they processed synchronously when partitions are revoked, so
a duplicate, a gap or a reordering is a real failure of the fetch path
(tests/compat/_group_consume.py explains the scenario and the check). The proxy is a
private one with /metrics, whose counters show that the clients' fetches were terminated
in the proxy (it sent its own upstream fetches for them) rather than forwarded.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import trio

from testbed.processes import Broker, free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat._group_consume import (
    CLIENTS,
    RECORDS,
    check,
    create_and_fill,
    run_join_then_leave,
    summary,
)
from tests.integration._kafka_raw import metric_value


@pytest.fixture(scope="module")
def metered_proxy(kafka_broker: Broker) -> Iterator[tuple[ProxyProcess, str]]:
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics) as proxy:
        yield proxy, metrics


def _counters(metrics: str) -> tuple[float, float]:
    """(upstream fetches the proxy sent for client fetches, client fetches it held)."""
    upstream = sum(
        metric_value(metrics, "purgatory_proxy_upstream_fetches_total", kind=kind)
        for kind in ("immediate", "refetch")
    )
    held = sum(
        metric_value(metrics, f"purgatory_proxy_purgatory_{kind}_total", operation="fetch")
        for kind in ("completions", "expirations")
    )
    return upstream, held


@pytest.mark.parametrize("client", CLIENTS)
async def test_group_consumes_every_record_once_in_order_across_rebalances(
    kafka_broker: Broker, metered_proxy: tuple[ProxyProcess, str], client: str
) -> None:
    proxy, metrics = metered_proxy
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"sessions-{client}-{suffix}", f"sessions-{client}-{suffix}"
    # Produced straight to the broker: this test is about the fetch path through the proxy.
    counts = await trio.to_thread.run_sync(create_and_fill, kafka_broker.bootstrap, topic)
    assert sum(counts.values()) == RECORDS
    upstream_before, held_before = _counters(metrics)
    timeline = await trio.to_thread.run_sync(
        run_join_then_leave, client, proxy.bootstrap, topic, group, counts
    )
    upstream_after, held_after = _counters(metrics)
    upstream, held = upstream_after - upstream_before, held_after - held_before
    problems = check(timeline, counts)
    consumed = sum(1 for e in timeline if e.kind == "consumed")
    print(
        f"{client}: {consumed} deliveries of {RECORDS} records; the proxy sent {upstream:.0f} "
        f"upstream fetches for them and held {held:.0f} client fetches\n{summary(timeline)}"
    )
    assert problems == [], "\n".join(problems) + "\n" + summary(timeline)
    assert proxy.alive()
    assert upstream > 0, "the clients' fetches were terminated in the proxy, not forwarded"
