"""serve() in process: a Kafka 4 API the proxy rewrites (ShareFetch) reaches the client with
the proxy's addresses, a share session keeps its upstream connection, and an API newer than
wire/'s tables closes its connection only, with one log line (tests/support/inprocess.py)."""

from __future__ import annotations

import logging
import uuid

import pytest
import trio
import trio.testing

from tests.support.inprocess import proxy_in_process
from tests.support.scripted_broker import BROKER, NODE_ID, ScriptedBroker, _Session
from wire.apis import API_BY_KEY, ApiKey
from wire.headers import RequestHeader, encode_request_header, parse_request_header
from wire.messages import MetadataRequest, MetadataResponse, ShareFetchRequest, ShareFetchResponse
from wire.messages import share_fetch_response as sfr

_LOGGER = "purgatory_proxy.connection.client"
NOT_LEADER_OR_FOLLOWER = 6


class ShareBroker(ScriptedBroker):
    """The scripted broker, also answering ShareFetch as a broker that is not the partition's
    leader does (Kafka 4.4, KIP-932): NOT_LEADER_OR_FOLLOWER, naming the leader's endpoint."""

    def __init__(self) -> None:
        super().__init__()
        #: (api key, the upstream connection it came on) of every request a client sent.
        self.connections: list[tuple[int, _Session]] = []

    async def _answer(self, body: memoryview, session: _Session) -> bytes | None:
        header, _ = parse_request_header(body)
        if header.client_id == "wire-client":  # not the proxy's own requests
            self.connections.append((header.api_key, session))
        if header.api_key != ApiKey.SHARE_FETCH:
            return await super()._answer(body, session)
        self.requests.append((header.api_key, trio.current_time()))
        partition = sfr.PartitionData(
            partition_index=0,
            error_code=NOT_LEADER_OR_FOLLOWER,
            current_leader=sfr.LeaderIdAndEpoch(leader_id=NODE_ID, leader_epoch=3),
            records=b"",
        )
        response = ShareFetchResponse(
            responses=[
                sfr.ShareFetchableTopicResponse(topic_id=uuid.UUID(int=5), partitions=[partition])
            ],
            node_endpoints=[sfr.NodeEndpoint(node_id=NODE_ID, host=BROKER.host, port=BROKER.port)],
        )
        return self._frame(header.correlation_id, header.api_key, header.api_version, response)


async def test_a_share_fetch_answer_names_the_proxy_not_the_broker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with proxy_in_process(ShareBroker()) as proxy:
        client = await proxy.client()
        await client.send(MetadataRequest(topics=[]), 12)
        _, metadata, _ = await client.receive()
        assert isinstance(metadata, MetadataResponse)
        (broker,) = metadata.brokers
        assert (broker.host, broker.port) != (BROKER.host, BROKER.port)

        await client.send(ShareFetchRequest(group_id="g", member_id="m"), 2)
        _, answer, _ = await client.receive()
    assert isinstance(answer, ShareFetchResponse)
    (endpoint,) = answer.node_endpoints
    assert (endpoint.node_id, endpoint.host, endpoint.port) == (NODE_ID, broker.host, broker.port)
    assert answer.responses[0].partitions[0].current_leader.leader_id == NODE_ID


async def test_a_share_session_keeps_its_upstream_connection_past_the_idle_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A broker drops a member's share session when the connection that opened it closes
    (KIP-932), so the upstream connection of a client that share-fetched is never closed for
    idleness; one that only asked for metadata is, as before."""
    broker = ShareBroker()
    async with proxy_in_process(broker, connections={"upstream_idle_timeout_ms": 1000}) as proxy:
        member, other = await proxy.client(), await proxy.client()
        for _ in range(2):
            await member.send(ShareFetchRequest(group_id="g", member_id="m"), 2)
            await other.send(MetadataRequest(topics=[]), 12)
            await member.receive()
            await other.receive()
            await trio.sleep(10)  # ten idle timeouts
    share = [conn for api_key, conn in broker.connections if api_key == ApiKey.SHARE_FETCH]
    metadata = [conn for api_key, conn in broker.connections if api_key == ApiKey.METADATA]
    assert len(share) == len(metadata) == 2
    assert share[0] is share[1]
    assert metadata[0] is not metadata[1]


async def test_an_api_newer_than_the_tables_closes_only_its_connection_with_one_log_line(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=_LOGGER)
    newer = max(API_BY_KEY) + 1
    async with proxy_in_process(ScriptedBroker()) as proxy:
        other = await proxy.client()
        client = await proxy.client()
        header = RequestHeader(api_key=newer, api_version=0, correlation_id=1, client_id="c")
        body = encode_request_header(header, header_version=2) + b"\x00"
        await client.stream.send_all(len(body).to_bytes(4, "big") + body)
        assert await client.closed()

        await other.send(MetadataRequest(topics=[]), 12)  # another client is still served
        _, metadata, _ = await other.receive()
        assert isinstance(metadata, MetadataResponse)
        await trio.sleep(1)
    closing = [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if record.name == _LOGGER and "closed client connection" in record.getMessage()
    ]
    assert len(closing) == 1, closing
    level, message = closing[0]
    assert level == logging.WARNING
    assert f"unknown API key {newer}" in message
