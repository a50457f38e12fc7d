"""client_auth = "passthrough" in process (serve() against a scripted broker that speaks SASL
PLAIN, virtual time): what is answered before the cluster accepted a client, that records
reach a client only through its own identity, that a denied client learns nothing from what
others fetched, KIP-368 session expiry and re-authentication. Also, with the proxy's identity:
an idle consumer keeps no upstream connection of its own."""

from __future__ import annotations

import trio
import trio.testing

from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import broker_with_topic, fetch
from tests.support.passthrough_clients import (
    PASSTHROUGH,
    accepted_client,
    broker_with_accounts,
    login,
    only_partition,
)
from tests.support.scripted_broker import TOPIC_AUTHORIZATION_FAILED
from wire.apis import ApiKey
from wire.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslHandshakeRequest,
)


async def test_before_the_cluster_accepts_a_client_only_api_versions_is_rewritten_and_a_fetch_goes_as_it_is(  # noqa: E501
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        client = await proxy.client()
        await client.send(ApiVersionsRequest(), 3)
        _, versions, _ = await client.receive()
        ranges = {entry.api_key: entry for entry in versions.api_keys}
        assert ApiKey.SASL_AUTHENTICATE in ranges
        assert ranges[ApiKey.SASL_HANDSHAKE].min_version == 1  # v0's raw tokens cannot pass
        sent = trio.current_time()
        correlation_id = await client.send(fetch(max_wait_ms=500), 12)
        _, response, at = await client.receive()
        # Not held, not answered from the proxy's knowledge: the cluster answered the client
        # as who it is (nobody), at once.
        assert only_partition(response).error_code == TOPIC_AUTHORIZATION_FAILED
        assert round(at - sent, 6) == 0.0
        [asked] = broker.fetch_log
        assert (asked.principal, asked.correlation_id) == (None, correlation_id)


async def test_records_reach_a_client_only_through_its_own_identity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        alice = await accepted_client(proxy, "alice", "alice-secret")
        sent = trio.current_time()
        await alice.send(fetch(max_wait_ms=5000), 12)
        await trio.sleep(1.0)
        broker.append("t", 0, b"behind the proxy's back")
        _, response, at = await alice.receive()
        assert bytes(only_partition(response).records) == b"behind the proxy's back"
        # Woken by the offset watcher (ListOffsets every 100 ms), not by the deadline.
        assert 1.0 <= round(at - sent, 6) <= 1.2
        assert broker.list_offsets_requests
        assert broker.fetch_log and all(f.principal == "alice" for f in broker.fetch_log)
        # The reads were the proxy's own requests on alice's connection.
        assert all(f.correlation_id < 0 for f in broker.fetch_log)


async def test_a_client_the_cluster_denies_learns_nothing_from_what_others_fetched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    broker.append("t", 0, b"abc")
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        alice = await accepted_client(proxy, "alice", "alice-secret")
        await alice.send(fetch(max_wait_ms=500), 12)
        _, response, _ = await alice.receive()
        assert only_partition(response).high_watermark == 1
        bob = await accepted_client(proxy, "bob", "bob-secret")
        # The proxy knows the partition ends at 1 and nothing is new: for alice it would not
        # ask the broker. Bob has not read it himself, so the broker is asked, as bob.
        await bob.send(fetch(offset=1, max_wait_ms=500), 12)
        _, response, _ = await bob.receive()
        partition = only_partition(response)
        assert partition.error_code == TOPIC_AUTHORIZATION_FAILED
        assert partition.high_watermark == -1 and not partition.records
        assert [f.principal for f in broker.fetch_log] == ["alice", "bob"]


async def test_a_wrong_password_is_the_clusters_answer_and_the_connection_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        mallory = await proxy.client()
        assert await login(mallory, "alice", "guess") == 58  # SASL_AUTHENTICATION_FAILED
        assert await mallory.closed()
        alice = await accepted_client(proxy, "alice", "alice-secret")
        await alice.send(fetch(max_wait_ms=100), 12)
        _, response, _ = await alice.receive()
        assert only_partition(response).error_code == 0


async def test_a_sasl_handshake_v0_closes_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with proxy_in_process(broker_with_accounts(), proxy=PASSTHROUGH) as proxy:
        client = await proxy.client()
        await client.send(SaslHandshakeRequest(mechanism="PLAIN"), 0)
        assert await client.closed()


async def test_an_expired_session_is_not_answered_from_proxy_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    broker.session_lifetime_ms = 2000
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        alice = await accepted_client(proxy, "alice", "alice-secret")
        await alice.send(fetch(max_wait_ms=500), 12)
        _, response, _ = await alice.receive()
        assert only_partition(response).error_code == 0
        await trio.sleep(2.0)
        # Past the lifetime the fetch goes to the cluster as it is, which ends the
        # connection (KIP-368); the proxy did not answer it from what it knows.
        correlation_id = await alice.send(fetch(max_wait_ms=500), 12)
        assert await alice.closed()
        assert broker.requests[-1][0] == ApiKey.FETCH
        assert correlation_id not in {f.correlation_id for f in broker.fetch_log}


async def test_a_client_that_re_authenticates_in_time_keeps_being_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    broker.session_lifetime_ms = 2000
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        alice = await accepted_client(proxy, "alice", "alice-secret")
        for _ in range(3):  # 4.5 s in all (a re-authentication every 1.5 s): past two lifetimes
            await trio.sleep(1.0)
            assert await login(alice, "alice", "alice-secret") == 0
            sent = trio.current_time()
            await alice.send(fetch(max_wait_ms=500), 12)
            _, response, at = await alice.receive()
            assert only_partition(response).error_code == 0
        # The last fetch was held by the proxy (its whole max wait), so trust was back.
        assert round(at - sent, 3) >= 0.5


async def test_an_idle_consumer_keeps_no_upstream_connection_of_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, connections={"upstream_idle_timeout_ms": 1000}) as proxy:
        upstream_open = proxy.running.services.metrics.upstream_open
        client = await proxy.client()
        await client.send(MetadataRequest(topics=None), 12)
        await client.receive()
        assert upstream_open._value.get() == 1
        for _ in range(6):  # 3 s of long-polls: they go on the proxy's shared channels
            await client.send(fetch(max_wait_ms=500), 12)
            await client.receive()
        assert upstream_open._value.get() == 0
        await client.send(MetadataRequest(topics=None), 12)  # opened again on need
        _, metadata, _ = await client.receive()
        assert metadata.topics and upstream_open._value.get() == 1


async def test_a_client_that_leaves_ends_its_connection_at_once_upstream_open_or_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker) as proxy:  # upstream_idle_timeout_ms: 30 s
        metrics = proxy.running.services.metrics
        client = await proxy.client()
        await client.send(MetadataRequest(topics=None), 12)
        await client.receive()
        assert metrics.upstream_open._value.get() == 1
        await client.stream.aclose()
        with trio.fail_after(1):  # not after the upstream's idle timeout
            while metrics.connections_open._value.get():
                await trio.sleep(0.01)
        assert metrics.upstream_open._value.get() == 0


async def test_a_refused_login_closes_the_connection_with_one_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with proxy_in_process(broker_with_accounts(), proxy=PASSTHROUGH) as proxy:
        metrics = proxy.running.services.metrics
        client = await proxy.client()
        assert await login(client, "alice", "guess") == 58
        with trio.fail_after(1):  # at once, not on the client's next request
            assert await client.closed()
            while metrics.connections_open._value.get():
                await trio.sleep(0.01)
        closed = metrics.connections_closed.labels("authentication_failed")
        assert closed._value.get() == 1


async def test_api_versions_of_reconnecting_clients_open_no_upstream_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_topic()
    async with proxy_in_process(broker, upstream={"metadata_refresh_ms": 1000}) as proxy:
        upstream_open = proxy.running.services.metrics.upstream_open
        first, second = await proxy.client(), await proxy.client()
        await first.send(ApiVersionsRequest(), 3)
        _, forwarded, _ = await first.receive()
        assert upstream_open._value.get() == 1

        await second.send(ApiVersionsRequest(), 3)  # answered from the first answer
        _, known, _ = await second.receive()
        await second.send(ApiVersionsRequest(), 0)  # at its own version
        _, known_v0, _ = await second.receive()
        assert known.api_keys == forwarded.api_keys == known_v0.api_keys
        # The second client's requests never needed an upstream connection of its own.
        assert upstream_open._value.get() == 1
        await trio.sleep(1.5)  # older than the metadata refresh period: asked again
        await second.send(ApiVersionsRequest(), 3)
        await second.receive()
        assert upstream_open._value.get() == 2  # forwarded on its own connection


async def test_passthrough_forwards_every_api_versions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        for _ in range(2):
            client = await proxy.client()
            await client.send(ApiVersionsRequest(), 3)
            await client.receive()
        assert [key for key, _ in broker.requests].count(ApiKey.API_VERSIONS) == 2
