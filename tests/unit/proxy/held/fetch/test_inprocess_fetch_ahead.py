"""Read-ahead for an active consumer in process (serve() against a scripted broker, virtual
time; proxy/held/fetch/ahead.py): the next fetch's first look is the read-ahead sent
while the previous answer went out; a seek discards it; its memory comes back either way; a
client that does not ask where its answers end gets none."""

from __future__ import annotations

import math

import trio
import trio.testing

from tests.support.inprocess import InProcessProxy, TaskWakeups, WireClient, proxy_in_process
from tests.support.one_partition import batch_at, broker_with_topic, fetch
from tests.support.scripted_broker import ScriptedBroker
from wire.messages import FetchRequest, MetadataRequest

#: Batches on the partition, one offset each; each Fetch answer carries at most two.
_BATCHES = 8
_PER_FETCH = 2


def busy_broker() -> ScriptedBroker:
    broker = broker_with_topic()
    for offset in range(_BATCHES):
        broker.append("t", 0, batch_at(offset))
    broker.max_blobs_per_fetch = _PER_FETCH
    return broker


def records(response: object) -> bytes:
    return bytes(response.responses[0].partitions[0].records)  # type: ignore[attr-defined]


def upstream_offsets(broker: ScriptedBroker) -> list[tuple[int, int]]:
    """(correlation id, fetch offset) of every Fetch the broker received: a client's first
    look has the client's id, the proxy's own reads (read-aheads) negative ones."""
    return [
        (correlation_id, request.topics[0].partitions[0].fetch_offset)
        for correlation_id, request in broker.fetch_requests
    ]


def read_aheads(proxy: InProcessProxy, outcome: str) -> float:
    counter = proxy.running.services.metrics.read_aheads.labels(outcome)
    return float(counter._value.get())


async def active_consumer(
    proxy: InProcessProxy, max_wait_ms: int = 500
) -> tuple[WireClient, list[int]]:
    """A consumer whose upstream connection is open (a Metadata request opened it) and which
    has fetched the first four batches, the second time from where the first answer ended (so
    the proxy trusts its predictions), with fetches that wait up to ``max_wait_ms``; the ids
    of those two fetches."""
    consumer = await proxy.client()
    await consumer.send(MetadataRequest(topics=None), 12)
    await consumer.receive()
    ids = []
    for offset in (0, 2):
        fetch_id = await consumer.send(fetch(offset=offset, max_wait_ms=max_wait_ms), 12)
        correlation_id, response, _ = await consumer.receive()
        assert correlation_id == fetch_id
        assert records(response) == batch_at(offset) + batch_at(offset + 1)
        ids.append(fetch_id)
    await trio.testing.wait_all_tasks_blocked()
    return consumer, ids


async def consumer_with_read_ahead(proxy: InProcessProxy) -> tuple[WireClient, int]:
    """An active consumer with a read-ahead out (its response budget taken from the pool),
    and the pool's available bytes before the consumer came."""
    pool = proxy.running.services.pool
    start = pool.available_bytes
    consumer, _ = await active_consumer(proxy)
    assert read_aheads(proxy, "sent") == 1
    assert pool.available_bytes < start  # the read-ahead's response budget
    return consumer, start


async def test_the_next_fetch_is_answered_from_the_read_ahead_without_a_new_upstream_fetch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = busy_broker()
    async with proxy_in_process(broker) as proxy:
        start = proxy.running.services.pool.available_bytes
        consumer, first_ids = await active_consumer(proxy)
        # The read-ahead went while the second answer was written: offset 4, the proxy's own
        # id (none after the first answer: the client had not shown yet where it asks).
        ((_, ahead_offset),) = [(c, o) for c, o in upstream_offsets(broker) if c < 0]
        assert ahead_offset == 4
        sent = trio.current_time()
        third_id = await consumer.send(fetch(offset=4), 12)
        correlation_id, response, at = await consumer.receive()
        assert correlation_id == third_id
        assert records(response) == batch_at(4) + batch_at(5)
        assert round(at - sent, 6) == 0.0
        await trio.testing.wait_all_tasks_blocked()
        asked = upstream_offsets(broker)
        assert [c for c, _ in asked if c > 0] == first_ids  # the third fetch sent nothing
        # ...and its answer carried records with more behind them: the next read-ahead went.
        assert [o for c, o in asked if c < 0] == [4, 6]
        assert (read_aheads(proxy, "sent"), read_aheads(proxy, "used")) == (2, 1)
        # The last read-ahead serves the fetch that reaches the end; nothing more is read
        # ahead, and every lease (a used read-ahead's is its fetch's) is back in the pool.
        last_id = await consumer.send(fetch(offset=6), 12)
        correlation_id, response, _ = await consumer.receive()
        assert (correlation_id, records(response)) == (last_id, batch_at(6) + batch_at(7))
        await trio.testing.wait_all_tasks_blocked()
        assert [c for c, _ in upstream_offsets(broker) if c > 0] == first_ids
        assert (read_aheads(proxy, "sent"), read_aheads(proxy, "used")) == (2, 2)
        assert proxy.running.services.pool.available_bytes == start


async def test_a_seek_discards_the_read_ahead_and_a_fresh_read_serves_the_fetch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = busy_broker()
    async with proxy_in_process(broker) as proxy:
        consumer, start = await consumer_with_read_ahead(proxy)
        pool = proxy.running.services.pool
        # Seek to the last batch: not where the read-ahead reads (offset 4).
        seek_id = await consumer.send(fetch(offset=7), 12)
        correlation_id, response, _ = await consumer.receive()
        assert correlation_id == seek_id
        assert records(response) == batch_at(7)
        await trio.testing.wait_all_tasks_blocked()
        assert (seek_id, 7) in upstream_offsets(broker)  # a fresh first look served it
        assert read_aheads(proxy, "discarded") == 1
        # Nothing to read past offset 8: no new read-ahead, and all memory is back.
        assert read_aheads(proxy, "sent") == 1
        assert pool.available_bytes == start
        # The discarded answer was consumed on the way: later answers still match their ids.
        metadata_id = await consumer.send(MetadataRequest(topics=None), 12)
        assert (await consumer.receive())[0] == metadata_id


async def test_closing_the_connection_with_a_read_ahead_in_flight_releases_its_memory(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = busy_broker()
    async with proxy_in_process(broker) as proxy:
        consumer, start = await consumer_with_read_ahead(proxy)
        await consumer.stream.aclose()
        await trio.testing.wait_all_tasks_blocked()
        assert proxy.running.services.pool.available_bytes == start
        assert read_aheads(proxy, "discarded") == 1


async def test_a_read_ahead_unclaimed_for_the_clients_max_wait_is_given_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A consumer that pauses keeps no response budget: its read-ahead is given up once its
    own max wait (500 ms) has passed, and its fetch after the pause is read afresh."""
    broker = busy_broker()
    async with proxy_in_process(broker) as proxy:
        sent = trio.current_time()
        consumer, start = await consumer_with_read_ahead(proxy)
        pool = proxy.running.services.pool
        assert trio.current_time() == sent  # (the answers came at once, in virtual time)
        await trio.sleep(0.499)
        assert pool.available_bytes < start  # still out, just before its time
        await trio.sleep(0.002)
        assert pool.available_bytes == start
        assert (read_aheads(proxy, "expired"), read_aheads(proxy, "discarded")) == (1, 0)
        resume_id = await consumer.send(fetch(offset=4), 12)
        correlation_id, response, _ = await consumer.receive()
        assert (correlation_id, records(response)) == (resume_id, batch_at(4) + batch_at(5))
        await trio.testing.wait_all_tasks_blocked()
        assert (resume_id, 4) in upstream_offsets(broker)  # a fresh first look served it
        assert read_aheads(proxy, "used") == 0


async def test_forwarded_requests_between_fetches_keep_client_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A request forwarded behind the read-ahead on the same upstream connection is answered
    in client order, and the fetch after it still uses the read-ahead."""
    broker = busy_broker()
    async with proxy_in_process(broker) as proxy:
        consumer, first_ids = await active_consumer(proxy)
        ids = [
            await consumer.send(MetadataRequest(topics=None), 12),
            await consumer.send(fetch(offset=4), 12),
            await consumer.send(MetadataRequest(topics=None), 12),
        ]
        answers = [await consumer.receive() for _ in ids]
        assert [a[0] for a in answers] == ids
        assert records(answers[1][1]) == batch_at(4) + batch_at(5)
        await trio.testing.wait_all_tasks_blocked()
        assert [c for c, _ in upstream_offsets(broker) if c > 0] == first_ids
        assert read_aheads(proxy, "used") == 1


async def test_a_consumer_at_the_end_gets_no_read_ahead(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Nothing past what the answer returned: a speculative read would find nothing."""
    broker = broker_with_topic()
    broker.append("t", 0, batch_at(0))
    async with proxy_in_process(broker) as proxy:
        consumer = await proxy.client()
        await consumer.send(MetadataRequest(topics=None), 12)
        await consumer.receive()
        await consumer.send(fetch(offset=0), 12)
        assert records((await consumer.receive())[1]) == batch_at(0)
        await trio.testing.wait_all_tasks_blocked()
        assert read_aheads(proxy, "sent") == 0
        assert [c for c, _ in upstream_offsets(broker) if c < 0] == []


async def test_a_consumer_that_asks_behind_its_answers_gets_no_read_ahead(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client whose next fetch is not where its last answer ended (kafka-python asks from
    what it has consumed so far) would waste every read-ahead: it gets none."""
    broker = busy_broker()
    async with proxy_in_process(broker) as proxy:
        consumer = await proxy.client()
        await consumer.send(MetadataRequest(topics=None), 12)
        await consumer.receive()
        for offset in range(_BATCHES - 1):  # one batch further each time, two returned
            await consumer.send(fetch(offset=offset), 12)
            assert records((await consumer.receive())[1]) == batch_at(offset) + batch_at(offset + 1)
        await trio.testing.wait_all_tasks_blocked()
        assert read_aheads(proxy, "sent") == 0
        assert [c for c, _ in upstream_offsets(broker) if c < 0] == []


async def test_a_read_ahead_kept_through_a_long_pause_neither_closes_the_link_nor_spins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A consumer that pauses past connections.upstream_idle_timeout_ms with a read-ahead's
    answer awaited (its fetches wait up to 200 s, so the read-ahead is kept that long): the
    link stays open for it, and its idle watch looks again an idle time later instead of
    spinning on a deadline already past."""
    broker = busy_broker()
    async with proxy_in_process(broker) as proxy:
        consumer, first_ids = await active_consumer(proxy, max_wait_ms=200_000)
        await trio.testing.wait_all_tasks_blocked()  # the read-ahead is answered
        rounds = TaskWakeups("UpstreamLink._close_when_idle")  # the idle watches' rounds
        autojump_clock.autojump_threshold = math.inf
        trio.lowlevel.add_instrument(rounds)
        try:
            autojump_clock.jump(100)  # three idle timeouts (30 s) and more
            for _ in range(200):
                await trio.lowlevel.checkpoint()
        finally:
            trio.lowlevel.remove_instrument(rounds)
            autojump_clock.autojump_threshold = 0
        assert rounds.count <= 2
        await consumer.send(fetch(offset=4, max_wait_ms=200_000), 12)
        assert records((await consumer.receive())[1]) == batch_at(4) + batch_at(5)
        assert read_aheads(proxy, "used") == 1
        assert [c for c, _ in upstream_offsets(broker) if c > 0] == first_ids


def session_fetch(offset: int, session_id: int, epoch: int) -> FetchRequest:
    """A fetch in a KIP-227 session: epoch 0 opens one (full), later epochs are incremental
    and name the partition because its offset moved."""
    request = fetch(offset=offset)
    request.session_id, request.session_epoch = session_id, epoch
    return request


async def test_an_incremental_session_fetch_is_answered_from_the_read_ahead(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The client's session ends at the proxy; what the read-ahead must match is the
    session's whole partition set after the incremental request's changes."""
    broker = busy_broker()
    async with proxy_in_process(broker) as proxy:
        consumer = await proxy.client()
        await consumer.send(MetadataRequest(topics=None), 12)
        await consumer.receive()
        ids, session_id = [], 0
        for epoch, offset in enumerate((0, 2, 4, 6)):
            ids.append(await consumer.send(session_fetch(offset, session_id, epoch), 12))
            correlation_id, response, _ = await consumer.receive()
            assert correlation_id == ids[-1]
            assert response.error_code == 0
            assert records(response) == batch_at(offset) + batch_at(offset + 1)
            session_id = session_id or response.session_id
            assert response.session_id == session_id != 0
        await trio.testing.wait_all_tasks_blocked()
        # The first two fetches asked upstream themselves; the last two were read ahead.
        assert [c for c, _ in upstream_offsets(broker) if c > 0] == ids[:2]
        assert [o for c, o in upstream_offsets(broker) if c < 0] == [4, 6]
        assert read_aheads(proxy, "used") == 2


async def test_a_read_ahead_never_takes_the_pool_below_half_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Consumers that pause with a read-ahead out keep its budget: speculation may use only
    the half of the pool (here 1.5 MiB, and a response budget of 1 MiB, the largest
    allocation: taking it would leave a third free)."""
    broker = busy_broker()
    async with proxy_in_process(
        broker, memory={"limit": "1536KiB", "socket_request_max_bytes": "1MiB"}
    ) as proxy:
        pool = proxy.running.services.pool
        start = pool.available_bytes
        await active_consumer(proxy)
        assert read_aheads(proxy, "sent") == 0
        assert pool.available_bytes == start
