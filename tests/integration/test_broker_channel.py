"""The proxy's own multiplexed broker connection, against a real broker."""

from __future__ import annotations

import pytest
import trio

from proxy.address import Address
from proxy.errors import UpstreamUnavailable
from proxy.upstream.broker_channel import BrokerChannel
from testbed.kafka_cluster import running_kafka
from testbed.processes import Broker, free_port
from testbed.topics import create_topic
from wire.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
)
from wire.messages.fetch_request import FetchPartition, FetchTopic
from wire.messages.metadata_request import MetadataRequestTopic


def _topic(bootstrap: str) -> str:
    return create_topic(bootstrap, "chan")


def _api_versions() -> ApiVersionsRequest:
    """ApiVersions v3 as clients send it: Kafka refuses one without a software name and
    version (INVALID_REQUEST)."""
    return ApiVersionsRequest(client_software_name="channel-test", client_software_version="1")


def _long_poll(topic: str, wait_ms: int) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=wait_ms,
        min_bytes=1,
        session_epoch=-1,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)],
            )
        ],
    )


async def test_concurrent_requests_each_get_their_own_answer(kafka_broker: Broker) -> None:
    topic = _topic(kafka_broker.bootstrap)
    answers: dict[int, object] = {}
    async with trio.open_nursery() as nursery:
        channel = BrokerChannel(Address(kafka_broker.host, kafka_broker.port), nursery, 5.0)

        async def ask(i: int) -> None:
            if i % 2:
                answers[i] = await channel.request(_api_versions(), 3)
            else:
                request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)])
                answers[i] = await channel.request(request, 9)

        async with trio.open_nursery() as askers:
            for i in range(50):
                askers.start_soon(ask, i)
        await channel.aclose()
        nursery.cancel_scope.cancel()
    assert channel.connects == 1 and channel.requests_sent == 50
    for i, answer in answers.items():
        if i % 2:
            assert isinstance(answer, ApiVersionsResponse) and answer.error_code == 0
        else:
            assert isinstance(answer, MetadataResponse)
            assert [t.name for t in answer.topics] == [topic]


async def test_a_cancelled_request_does_not_desynchronise_the_channel(
    kafka_broker: Broker,
) -> None:
    topic = _topic(kafka_broker.bootstrap)
    async with trio.open_nursery() as nursery:
        channel = BrokerChannel(Address(kafka_broker.host, kafka_broker.port), nursery, 5.0)
        with trio.move_on_after(0.2) as gave_up:
            await channel.request(_long_poll(topic, 1500), 4)  # empty topic: waits 1.5 s
        assert gave_up.cancelled_caught
        # The late answer to the abandoned long-poll arrives first; it must be dropped.
        answer = await channel.request(_long_poll(topic, 1), 4)
        assert isinstance(answer, FetchResponse)
        assert answer.responses[0].partitions[0].error_code == 0
        await channel.aclose()
        nursery.cancel_scope.cancel()


async def test_broker_loss_fails_waiters_and_the_channel_reconnects() -> None:
    port = free_port()
    async with trio.open_nursery() as nursery:
        channel = BrokerChannel(Address("127.0.0.1", port), nursery, 2.0)
        with pytest.raises(UpstreamUnavailable):
            await channel.request(_api_versions(), 3)  # nobody listens yet
        with running_kafka(1, port=port) as broker:
            topic = _topic(broker.bootstrap())
            assert isinstance(await channel.request(_api_versions(), 3), ApiVersionsResponse)

            async def wait_then_lose() -> None:
                with pytest.raises(UpstreamUnavailable):
                    await channel.request(_long_poll(topic, 5000), 4)

            async with trio.open_nursery() as inner:
                inner.start_soon(wait_then_lose)
                await trio.sleep(0.3)
                await trio.to_thread.run_sync(broker.kill, 1)
        with running_kafka(1, port=port):
            answer = await channel.request(_api_versions(), 3)
            assert isinstance(answer, ApiVersionsResponse)
        assert channel.connects == 2
        await channel.aclose()
        nursery.cancel_scope.cancel()
