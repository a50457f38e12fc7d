"""A partition's leadership moves under a held fetch (serve() against a scripted broker,
virtual time).

Clients fetch with the leader epoch they know (current_leader_epoch). When the leadership of a
partition moves, Kafka completes a fetch waiting in its DelayedFetch at once with
FENCED_LEADER_EPOCH and the new leader (KIP-951), and the client goes there. A fetch held in
the proxy waits on the proxy's watcher, which polls the broker without an epoch: since Fetch
v11 (KIP-392) a follower serves such a poll as if nothing had happened, so the held fetch was
answered at its max wait with nothing, and the consumer stayed on a broker that no longer led
its partition (seen on a three-node Apache Kafka after a preferred-leader election: 16.9 s,
the whole max wait, against 0.36 s direct).
"""

from __future__ import annotations

import trio
import trio.testing

from tests.support.fetch_requests import fetch_partitions
from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import broker_with_topic
from tests.support.scripted_broker import FENCED_LEADER_EPOCH, NODE_ID
from wire.messages.fetch_request import FetchRequest

MAX_WAIT_MS = 5000


def _fetch(epoch: int) -> FetchRequest:
    return fetch_partitions({"t": [0]}, max_wait_ms=MAX_WAIT_MS, leader_epoch=epoch)


async def test_a_held_fetch_learns_at_once_that_its_leader_moved(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        consumer = await proxy.client()
        await consumer.send(_fetch(epoch=0), 12)
        await consumer.receive()  # nothing there; the proxy knows the partition's end now
        await consumer.send(_fetch(epoch=0), 12)  # held: nothing new
        await trio.sleep(0.2)
        moved = trio.current_time()
        broker.new_leader_epoch("t", 0)
        _, response, at = await consumer.receive()
        partition = response.responses[0].partitions[0]
        assert partition.error_code == FENCED_LEADER_EPOCH, partition
        assert partition.current_leader.leader_id == NODE_ID
        assert partition.current_leader.leader_epoch == 1
        assert round(at - moved, 3) < 0.1  # at once, not at the max wait


async def test_a_fetch_without_an_epoch_is_not_fenced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An epoch of -1 (a client that does not know it) is never fenced: the held fetch then
    waits its max wait, as it does on Kafka."""
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:
        consumer = await proxy.client()
        await consumer.send(_fetch(epoch=-1), 12)
        await consumer.receive()
        sent = trio.current_time()
        await consumer.send(_fetch(epoch=-1), 12)
        await trio.sleep(0.2)
        broker.new_leader_epoch("t", 0)
        _, response, at = await consumer.receive()
        assert response.responses[0].partitions[0].error_code == 0
        assert round(at - sent, 3) == MAX_WAIT_MS / 1000
