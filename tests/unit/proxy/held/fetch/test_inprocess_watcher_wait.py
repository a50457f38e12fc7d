"""The watcher's poll waits as long as the longest max wait of the fetches it covers (in
process against a scripted broker, virtual time): idle consumers with a 5 s max wait cost the
broker one poll per 5 s, not one per watcher_max_wait_ms; and a partition wanted while such a
poll is out is covered at once by a poll on a second connection, so records written behind the
proxy's back wake its held fetch without waiting for the first poll to return."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import batch_at, fetch
from tests.support.scripted_broker import ScriptedBroker
from wire.messages import FetchRequest
from wire.messages.fetch_request import FetchPartition, FetchTopic

LONG_WAIT_MS = 5000


def watcher_polls(broker: ScriptedBroker) -> list[FetchRequest]:
    """The watcher's polls (max_bytes 1: it reads no records)."""
    return [request for _, request in broker.fetch_requests if request.max_bytes == 1]


def fetch_partition(partition: int, offset: int, max_wait_ms: int) -> FetchRequest:
    wanted = FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_id=0,
                        session_epoch=-1,
                        topics=[FetchTopic(topic="t", partitions=[wanted])])  # fmt: skip


async def test_idle_consumers_with_a_long_max_wait_cost_one_watcher_poll_per_max_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = ScriptedBroker()
    broker.create_topic("t")
    async with proxy_in_process(broker) as proxy:
        consumers = [await proxy.client() for _ in range(3)]
        for consumer in consumers:  # the proxy learns where the partition ends
            await consumer.send(fetch(0, max_wait_ms=LONG_WAIT_MS), 12)
        for consumer in consumers:
            await consumer.receive()
        start, polls = trio.current_time(), len(watcher_polls(broker))
        while trio.current_time() - start < 20:  # idle long-polls, held in the proxy
            for consumer in consumers:
                await consumer.send(fetch(0, max_wait_ms=LONG_WAIT_MS), 12)
            for consumer in consumers:
                await consumer.receive()
        sent = watcher_polls(broker)[polls:]
        assert {request.max_wait_ms for request in sent} == {LONG_WAIT_MS}
        assert 4 <= len(sent) <= 5  # 20 s of 5 s polls (with 500 ms ones: 40)


async def test_a_partition_wanted_while_a_long_poll_is_out_is_covered_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = ScriptedBroker()
    broker.create_topic("t", partitions=2)
    async with proxy_in_process(broker) as proxy:
        idle, other = await proxy.client(), await proxy.client()
        await idle.send(fetch_partition(0, 0, 10), 12)  # p0's end known
        await idle.receive()
        await idle.send(fetch_partition(0, 0, LONG_WAIT_MS), 12)  # held: a 5 s poll goes out
        await trio.sleep(1)
        [long_poll] = [r for r in watcher_polls(broker) if r.max_wait_ms == LONG_WAIT_MS]
        assert [p.partition for p in long_poll.topics[0].partitions] == [0]
        polls = len(watcher_polls(broker))
        await other.send(fetch_partition(1, 0, 500), 12)  # p1's first look finds nothing: held
        await trio.sleep(0.2)
        [second] = watcher_polls(broker)[polls:]  # while the first is out
        assert [p.partition for p in second.topics[0].partitions] == [0, 1]
        written = trio.current_time()
        broker.append("t", 1, batch_at(0))  # behind the proxy's back
        _, response, at = await other.receive()
        assert response.responses[0].partitions[0].records
        assert at - written < 0.05  # woken by the second poll, not at its own max wait
