"""The held fetches' partition-state table is bounded (issue 29): what no held fetch, fetch
session or watcher names is forgotten, by size while a client floods it and within two sweep
periods once it has left; what consumers still use is kept. Unit tests of the table's two
generations, then the whole proxy in process against a scripted broker, in virtual time."""

from __future__ import annotations

import trio
import trio.testing

from proxy.held.partition_state import PartitionStates
from tests.support.fetch_requests import fetch_partitions
from tests.support.inprocess import WireClient, proxy_in_process
from tests.support.one_partition import broker_with_topic, fetch
from wire.messages import FetchRequest


def _learn(states: PartitionStates, *keys: tuple[str, int]) -> None:
    for key in keys:
        states.learn(key, 5, 5, 0, 0)


def test_a_sweep_keeps_what_is_named_and_what_is_new_and_the_next_one_forgets_the_rest() -> None:
    states = PartitionStates(sweep_floor=4)
    _learn(states, ("a", 0), ("b", 0))
    assert not states.crowded and states.sweep_due
    assert states.evict({("a", 0)}) == 0  # b is new: kept this time
    assert states.sweep_due  # ... and looked at again
    _learn(states, ("c", 0))
    assert states.evict({("a", 0)}) == 1  # b is old and unnamed now; c is new
    assert states.get(("b", 0)) is None and states.get(("c", 0)) is not None
    assert states.evict(set()) == 2  # nothing named: a (old) and c (old now) go
    assert len(states) == 0 and states.evicted == 3 and not states.sweep_due


def test_relearning_a_partition_makes_it_new_again() -> None:
    states = PartitionStates(sweep_floor=4)
    _learn(states, ("a", 0))
    states.evict(set())
    _learn(states, ("a", 0))  # answered again since the sweep
    assert states.evict(set()) == 0 and len(states) == 1


def test_the_table_is_crowded_once_it_doubles_since_the_last_sweep() -> None:
    states = PartitionStates(sweep_floor=4)
    _learn(states, *((f"t{i}", 0) for i in range(3)))
    assert not states.crowded
    _learn(states, ("t3", 0))
    assert states.crowded  # the floor
    named = {(f"t{i}", 0) for i in range(4)}
    states.evict(named)
    _learn(states, *((f"u{i}", 0) for i in range(3)))
    assert not states.crowded  # 7 of 8
    _learn(states, ("u3", 0))
    assert states.crowded


def _made_up_partitions(batch: int, topics: int, partitions: int) -> FetchRequest:
    """A sessionless fetch of ``topics`` x ``partitions`` partitions nobody uses, answered
    at once (max wait 0)."""
    made_up = {f"made-up-{batch}-{topic}": range(partitions) for topic in range(topics)}
    return fetch_partitions(made_up, max_wait_ms=0, partition_max_bytes=1)


async def _long_poll(consumer: WireClient, stop: trio.Event) -> None:
    """An idle consumer of t/0: long-polls of 500 ms until ``stop``, each answered empty."""
    while not stop.is_set():
        await consumer.send(fetch(max_wait_ms=500), 12)
        _, response, _ = await consumer.receive()
        assert response.responses[0].partitions[0].error_code == 0


async def test_made_up_partitions_are_forgotten_while_they_come_and_after_the_client_left(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy, trio.open_nursery() as nursery:
        held = proxy.running.services.held
        assert held is not None
        stop = trio.Event()
        nursery.start_soon(_long_poll, await proxy.client(), stop)
        await trio.sleep(1.0)

        flood = await proxy.client()
        largest = 0
        for batch in range(12):  # 60,000 partitions, 5,000 a fetch
            await flood.send(_made_up_partitions(batch, topics=1000, partitions=5), 12)
            _, response, _ = await flood.receive()
            assert sum(len(topic.partitions) for topic in response.responses) == 5000
            largest = max(largest, len(held.states))
        # Swept by size as they came: at most twice the floor (10,000) plus one fetch's worth.
        assert largest <= 25_000
        await flood.stream.aclose()
        looked = len(broker.fetch_requests)

        await trio.sleep(20.0)  # two sweep periods
        # Only the consumer's partition is left: named all along (its held fetches, the
        # watcher that covers it) ...
        assert list(held.states._states) == [("t", 0)]
        # ... and its knowledge still serves: every fetch of the consumer since was held
        # without a look upstream (min_bytes 0); the broker saw the watcher's polls only.
        assert all(request.min_bytes == 1 for _, request in broker.fetch_requests[looked:])
        stop.set()
