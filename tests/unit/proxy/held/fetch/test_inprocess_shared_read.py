"""One upstream read shared by many held fetches is charged to the pool once (issue 29), in
process and in virtual time: twenty clients fetch the same 1 MiB at once and never read."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import broker_with_topic, fetch

MIB = 1024 * 1024
CLIENTS = 20


async def test_a_shared_upstream_read_is_charged_once_and_released_with_its_last_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    broker.append("t", 0, b"x" * MIB)
    async with proxy_in_process(broker) as proxy:
        pool = proxy.running.services.pool
        # Lockstep streams: the proxy's answers wait until the clients read, which they never
        # do, so every client holds its answer (until connections.send_timeout_ms).
        clients = [await proxy.client(lockstep=True) for _ in range(CLIENTS)]
        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(client.send, fetch(max_wait_ms=500), 12)
        await trio.sleep(1)
        assert len(broker.fetch_requests) == 1  # one upstream read answers them all
        assert MIB <= pool.used_bytes < 2 * MIB, pool.used_bytes
        await trio.sleep(30)  # the send timeout closes them; the last one releases the read
        assert pool.used_bytes == 0
        assert pool.statistics().outstanding_leases == 0
