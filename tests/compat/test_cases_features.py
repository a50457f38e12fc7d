"""The feature cases of the matrix: codecs, 5 MiB records, 200 partitions, headers and tombstones.

Every client with a case program (tests/compat/_cases.py: all but kcat) runs each case on
each route: it creates the case's topics, produces its records (idempotent acks=all where the
client can) and reads every partition back without a group; the check compares what it was
told and what it read with a direct read of the broker, and for the codecs, the codec of
every batch the broker stores.
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


@pytest.mark.parametrize("route", ROUTES, indirect=True)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("client", CASE_CLIENTS)
async def test_feature_case_matches_the_broker(route: Route, client: str, case: str) -> None:
    base, run = f"{case}-{client}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    command = case_command(client, route.bootstrap, case, base, run)
    result = await trio.to_thread.run_sync(run_case, client, command, case, base, run)
    stored = await trio.to_thread.run_sync(observe_case, route.direct, result.topics)
    print(f"{client} {case} via {route.name}: {result.elapsed_s:.1f} s")
    assert check_case(result, stored) == []
    assert route.proxy is None or route.proxy.alive()
