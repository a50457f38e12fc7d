"""A consumer group of three with a member leaving, in the classic protocol and in KIP-848's.

Three members of one client start together on 9,000 records over 6 partitions; once each has
partitions, one that is in the middle of a partition commits and leaves; the other two
finish. Every record must be processed exactly once, in order per partition, and the group's
committed offsets, read directly afterwards, must be every partition's end
(tests/compat/_group_consume.py). The kinds: Java and librdkafka in both protocols
(``group.protocol=consumer`` for KIP-848), franz-go in both (its ServerSideBalancer for
KIP-848) and sarama (classic only). The acceptance of issue 30 is ``java-kip848`` and
``franz-go`` through the proxy in front of three nodes.

Each run takes 10-30 s (the consumer protocol hands partitions to a new member within two
5 s heartbeats), so the default suite runs, through the proxy in front of three nodes (the
route that needs the proxy most), the acceptance's two kinds, librdkafka's KIP-848 consumer
and sarama; the other kinds there (Java and librdkafka classic, which test_fetch_sessions.py
also runs through the proxy, and franz-go's KIP-848), the direct baseline and the one-node
proxy are ``soak``.
"""

from __future__ import annotations

import uuid

import pytest
import trio

from tests.compat._group_consume import (
    MEMBERS,
    THREE_PARTITIONS,
    THREE_RECORDS,
    check,
    committed_problems,
    create_and_fill,
    run_three_then_leave,
    summary,
)
from tests.compat.conftest import Route

#: The kinds the default suite runs through the proxy in front of three nodes.
DEFAULT_KINDS = ("java-kip848", "franz-go", "confluent-kafka-kip848", "sarama")
KIND_ROUTES = [
    pytest.param(
        kind,
        route,
        marks=()
        if (kind, route) in {(k, "proxy-3-nodes") for k in DEFAULT_KINDS}
        else pytest.mark.soak,
    )
    for kind in MEMBERS
    for route in ("direct", "proxy", "proxy-3-nodes")
]


@pytest.mark.parametrize(("kind", "route"), KIND_ROUTES, indirect=["route"])
async def test_group_of_three_with_a_member_leaving(route: Route, kind: str) -> None:
    topic = f"three-{kind}-{uuid.uuid4().hex[:8]}"
    counts = await trio.to_thread.run_sync(
        create_and_fill, route.direct, topic, THREE_PARTITIONS, THREE_RECORDS
    )
    timeline = await trio.to_thread.run_sync(
        run_three_then_leave, kind, route.bootstrap, topic, topic, counts
    )
    committed = await trio.to_thread.run_sync(
        committed_problems, route.direct, topic, topic, counts
    )
    problems = check(timeline, counts) + committed
    print(f"{kind} via {route.name}\n{summary(timeline)}")
    assert problems == [], "\n".join(problems) + "\n" + summary(timeline)
    assert route.proxy is None or route.proxy.alive()
