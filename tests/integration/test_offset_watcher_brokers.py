"""The ListOffsets watcher of passthrough mode against both real brokers: Apache Kafka and
Tansu 0.6 (the embedded one).

Records produced behind the proxy must wake a held fetch through ListOffsets alone; the fetch
is then re-done on the client's own connection (here a second channel standing in for it),
which is where the true end comes from. Kafka's ListOffsets latest is the high watermark;
Tansu 0.6's is the last batch's base offset + 1. The test pins both down, since the watcher's
design (a change detector, proxy/held/fetch/offset_watcher.py) must work with either.
"""

from __future__ import annotations

import pytest
import trio

from proxy.address import Address
from proxy.held.fetch.answer import FetchResults, learn
from proxy.held.fetch.delayed import DelayedFetch
from proxy.held.fetch.offset_watcher import LATEST, LIST_OFFSETS_VERSION, OffsetWatcher
from proxy.held.partition_state import PartitionKey, PartitionStates
from proxy.observability.metrics import Metrics
from proxy.primitives.memory import MemoryPool
from proxy.primitives.purgatory import current_time_ms
from proxy.routing.topic_names import TopicNames
from proxy.upstream.broker_channel import BrokerChannel
from testbed.processes import Broker
from testbed.topics import create_topic
from tests.integration._kafka_raw import RawConnection, batch
from tests.support.recording_purgatory import RecordingPurgatory
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.fetch_response import FetchResponse
from wire.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from wire.messages.list_offsets_response import ListOffsetsResponse

RECORDS = 5
INTERVAL_MS = 100


def _fetch(topic: str, offsets: dict[int, int]) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=10,
        min_bytes=0,
        max_bytes=1 << 20,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=index, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                    for index, offset in offsets.items()
                ],
            )
        ],
    )


async def _latest(channel: BrokerChannel, topic: str, isolation_level: int) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsPartition(partition_index=0, timestamp=LATEST)]
            )
        ],
    )
    response = await channel.request(request, LIST_OFFSETS_VERSION)
    assert isinstance(response, ListOffsetsResponse)
    (answer,) = response.topics[0].partitions
    assert answer.error_code == 0
    return answer.offset


def _produce(bootstrap: str, topic: str) -> int:
    """One batch of RECORDS records to partition 0 (another client of the cluster)."""
    with RawConnection(bootstrap) as producer:
        error_code, base_offset = producer.produce(
            topic, batch(*(b"v%d" % i for i in range(RECORDS)))
        )
    assert error_code == 0
    return base_offset


async def _fresh(states: PartitionStates, key: PartitionKey, end: int) -> None:
    """Wait (briefly) until a poll's answer covers ``key`` at ``end``: between the send of one
    poll and its answer the previous one's interval may run out, so not at any instant."""
    with trio.fail_after(2):
        while not states.nothing_new(key, end, 0, current_time_ms()):
            await trio.sleep(0.01)


@pytest.fixture(params=["kafka", "tansu"])
def broker_kind(request: pytest.FixtureRequest) -> tuple[str, Broker]:
    fixture = "kafka_broker" if request.param == "kafka" else "tansu_broker"
    return request.param, request.getfixturevalue(fixture)


async def test_records_produced_behind_the_proxy_wake_a_held_fetch_through_list_offsets(
    broker_kind: tuple[str, Broker],
) -> None:
    kind, kafka_broker = broker_kind
    topic = create_topic(kafka_broker.bootstrap, "offset-watch", partitions=2)
    p0, p1 = (topic, 0), (topic, 1)
    address = Address(kafka_broker.host, kafka_broker.port)
    names, states, purgatory = TopicNames(), PartitionStates(), RecordingPurgatory()
    async with trio.open_nursery() as nursery:
        await nursery.start(purgatory.run)
        # The client's own connection (its fetches, its identity), and the watcher's.
        client = BrokerChannel(address, nursery, 5.0)
        watcher = OffsetWatcher(
            1,
            BrokerChannel(address, nursery, 5.0),
            states,
            names,
            purgatory,
            INTERVAL_MS,
            Metrics(MemoryPool(1000, 1000)),
        )
        nursery.start_soon(watcher.run)

        async def client_fetch() -> None:
            response = await client.request(_fetch(topic, {0: 0, 1: 0}), 12)
            assert isinstance(response, FetchResponse)
            learn(FetchResults.of(response), states, names, current_time_ms())

        await client_fetch()  # the client's first look: both partitions empty
        for key in (p0, p1):
            known = states.get(key)
            assert known is not None and known.high_watermark == 0
        held = DelayedFetch(30_000, states, [(p0, 0)], 0)
        other = DelayedFetch(30_000, states, [(p1, 0)], 0)
        for operation, key in ((held, p0), (other, p1)):
            assert not purgatory.try_complete_else_watch(operation, [key])
        watcher.want([p0, p1], current_time_ms() + 30_000)

        await trio.sleep(0.5)  # a few polls with nothing new: no wake, and the states are fresh
        assert purgatory.checked == [] and not held.is_completed
        await _fresh(states, p0, 0)
        assert await _latest(client, topic, 0) == 0

        assert await trio.to_thread.run_sync(_produce, kafka_broker.bootstrap, topic) == 0
        produced_s = trio.current_time()
        with trio.fail_after(5):
            await held.wait()
        assert trio.current_time() - produced_s < 1.0  # about one interval, not the 30 s deadline
        assert not held.expired and not other.is_completed
        assert purgatory.checked == [p0]  # only the partition that moved
        state = states.get(p0)
        assert state is not None and state.stale and state.high_watermark == 0

        # What the watcher saw. Tansu 0.6: the last batch's base offset + 1, whatever the
        # isolation level; a Kafka broker: the high watermark.
        latest = await _latest(client, topic, 0)
        assert latest == (1 if kind == "tansu" else RECORDS)
        assert await _latest(client, topic, 1) == latest

        # The woken fetch re-fetches on the client's connection: that learns the true end.
        await client_fetch()
        assert state.high_watermark == RECORDS and not state.stale
        again = DelayedFetch(30_000, states, [(p0, RECORDS)], 0)
        assert not purgatory.try_complete_else_watch(again, [p0])
        await trio.sleep(0.5)  # the watcher's unchanged answer (below the end on Tansu) is no news
        assert not again.is_completed and purgatory.checked == [p0]
        await _fresh(states, p0, RECORDS)
        nursery.cancel_scope.cancel()
