"""Fetch sessions through the proxy: exactly once, in order, across a consumer-group rebalance.

The Java client and librdkafka both fetch with incremental sessions (KIP-227), which the
proxy terminates itself (issue 6). Each client consumes 10,000 records over 8 partitions
through the proxy in a group where a second member joins mid-way and the first then
leaves; members commit what they processed synchronously when partitions are revoked, so
a duplicate, a gap or a reordering is a real failure of the fetch path
(tests/compat/_group_consume.py explains the scenario and the check).
"""

from __future__ import annotations

import uuid

import pytest
import trio

from tests.compat._group_consume import (
    CLIENTS,
    RECORDS,
    check,
    create_and_fill,
    run_join_then_leave,
    summary,
)
from tests.support.processes import Broker
from tests.support.proxy_process import ProxyProcess


@pytest.mark.parametrize("client", CLIENTS)
async def test_group_consumes_every_record_once_in_order_across_rebalances(
    kafka_broker: Broker, proxy: ProxyProcess, client: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"sessions-{client}-{suffix}", f"sessions-{client}-{suffix}"
    # Produced straight to the broker: this test is about the fetch path through the proxy.
    counts = await trio.to_thread.run_sync(create_and_fill, kafka_broker.bootstrap, topic)
    assert sum(counts.values()) == RECORDS
    timeline = await trio.to_thread.run_sync(
        run_join_then_leave, client, proxy.bootstrap, topic, group, counts
    )
    problems = check(timeline, counts)
    consumed = sum(1 for e in timeline if e.kind == "consumed")
    print(f"{client}: {consumed} deliveries of {RECORDS} records\n{summary(timeline)}")
    assert problems == [], "\n".join(problems) + "\n" + summary(timeline)
    assert proxy.alive()
