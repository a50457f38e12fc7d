"""The feature cases of the matrix: codecs, 5 MiB records, 200 partitions, headers and tombstones.

Every client with a case program (tests/compat/_cases.py: all but kcat) runs each case: it
creates the case's topics, produces its records (idempotent acks=all where the client can)
and reads every partition back without a group; the check compares what it was told and what
it read with a direct read of the broker, and for the codecs, the codec of every batch the
broker stores.

Routes: every case runs on every route, but the default suite keeps one per case, the one
that asks most of the proxy: 200 partitions through the proxy in front of three nodes (the
partitions' leaders spread over three brokers), the others through the proxy in front of one
node. The other routes, the direct baseline among them, are ``soak`` (the 28 runs of a route
take 1-3 minutes).
"""

from __future__ import annotations

import uuid

import pytest
import trio

from tests.compat._cases import (
    CASE_CLIENTS,
    CASES,
    case_command,
    check_case,
    observe_case,
    run_case,
)
from tests.compat.conftest import ROUTES, Route

#: The route of each case in the default suite; its other routes are soak.
DEFAULT_ROUTE = {
    "codecs": "proxy",
    "large": "proxy",
    "partitions": "proxy-3-nodes",
    "headers": "proxy",
}
CASE_ROUTES = [
    pytest.param(case, route, marks=() if DEFAULT_ROUTE[case] == route else pytest.mark.soak)
    for case in CASES
    for route in ROUTES
]


@pytest.mark.parametrize(("case", "route"), CASE_ROUTES, indirect=["route"])
@pytest.mark.parametrize("client", CASE_CLIENTS)
async def test_feature_case_matches_the_broker(route: Route, client: str, case: str) -> None:
    base, run = f"{case}-{client}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    command = case_command(client, route.bootstrap, case, base, run)
    result = await trio.to_thread.run_sync(run_case, client, command, case, base, run)
    stored = await trio.to_thread.run_sync(observe_case, route.direct, result.topics)
    print(f"{client} {case} via {route.name}: {result.elapsed_s:.1f} s")
    assert check_case(result, stored) == []
    assert route.proxy is None or route.proxy.alive()
