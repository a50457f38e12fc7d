"""Transactions with read_committed (KIP-98), for the clients that have both: Java and librdkafka.

Each client commits a transaction, aborts one (its records flushed to the log first) and
commits a third, then reads the topic with isolation.level=read_committed. It must see
exactly the committed records, as a direct read_committed reader of the broker does, while a
direct read_uncommitted reader finds the aborted records in the log (tests/compat/
_transactions.py).
"""

from __future__ import annotations

import uuid

import pytest
import trio

from tests.compat._transactions import CLIENTS, check_transactions, read_direct, run_transactions
from tests.compat.conftest import ROUTES, Route


@pytest.mark.parametrize("route", ROUTES, indirect=True)
@pytest.mark.parametrize("client", CLIENTS)
async def test_read_committed_sees_exactly_the_committed_records(route: Route, client: str) -> None:
    topic = f"txn-{client}-{uuid.uuid4().hex[:8]}"
    run = await trio.to_thread.run_sync(run_transactions, client, route.bootstrap, topic)
    committed = await trio.to_thread.run_sync(read_direct, route.direct, topic, "read_committed")
    everything = await trio.to_thread.run_sync(read_direct, route.direct, topic, "read_uncommitted")
    assert check_transactions(run, committed, everything) == []
    assert route.proxy is None or route.proxy.alive()
