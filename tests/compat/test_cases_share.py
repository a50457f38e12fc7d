"""A share consumer (KIP-932), Java's KafkaShareConsumer, on Apache Kafka 4.4.

Share groups work on Kafka 4.4 with no broker setting (the testbed sets only the share
coordinator's topic sizes) and are not generally available in 3.9, so the case runs on the
4.4 routes only. One consumer in a new share group must be delivered
every record exactly once, on its first delivery, and acknowledge them all (tests/compat/
_share.py). Through the proxy this needs ShareGroupHeartbeat, ShareFetch and
ShareAcknowledge (APIs 76, 78, 79).
"""

from __future__ import annotations

import uuid

import pytest
import trio

from tests.compat._share import check_share, run_share, stored_records
from tests.compat.conftest import ROUTES, Route


@pytest.mark.parametrize("route", ROUTES, indirect=True)
async def test_share_consumer_gets_every_record_once(route: Route) -> None:
    topic = f"share-{uuid.uuid4().hex[:8]}"
    run = await trio.to_thread.run_sync(run_share, route.bootstrap, topic, f"{topic}-share")
    stored = await trio.to_thread.run_sync(stored_records, route.direct, topic)
    print(f"share consumer via {route.name}: {run.elapsed_s:.1f} s")
    assert check_share(run, stored) == []
    assert route.proxy is None or route.proxy.alive()
