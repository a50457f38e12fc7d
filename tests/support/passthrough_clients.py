"""Passthrough clients for the in-process tests: a scripted broker with SASL PLAIN accounts
and per-principal fetch denials, and a client that logs in through the proxy."""

from __future__ import annotations

from tests.support.inprocess import InProcessProxy, WireClient
from tests.support.one_partition import broker_with_topic
from tests.support.scripted_broker import ScriptedBroker
from wire.messages import MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest
from wire.messages.fetch_response import PartitionData

__all__ = ["PASSTHROUGH", "accepted_client", "broker_with_accounts", "login", "only_partition"]

PASSTHROUGH = {"client_auth": "passthrough"}


def broker_with_accounts() -> ScriptedBroker:
    """Alice may read; bob and the anonymous principal (the proxy's own connections) may not."""
    broker = broker_with_topic()
    broker.users = {"alice": "alice-secret", "bob": "bob-secret"}
    broker.fetch_denied = {None, "bob"}
    return broker


async def login(client: WireClient, user: str, password: str) -> int:
    """PLAIN through the proxy; the SaslAuthenticate answer's error code."""
    await client.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    _, handshake, _ = await client.receive()
    assert handshake.error_code == 0
    await client.send(
        SaslAuthenticateRequest(auth_bytes=b"\0" + user.encode() + b"\0" + password.encode()), 1
    )
    _, answer, _ = await client.receive()
    return int(answer.error_code)


async def accepted_client(proxy: InProcessProxy, user: str, password: str) -> WireClient:
    """A client on the broker's port, logged in, whose Metadata the cluster has answered."""
    client = await proxy.client()
    assert await login(client, user, password) == 0
    await client.send(MetadataRequest(topics=None), 12)
    await client.receive()
    return client


def only_partition(response: object) -> PartitionData:
    [topic] = response.responses  # type: ignore[attr-defined]
    [partition] = topic.partitions
    assert isinstance(partition, PartitionData)
    return partition
