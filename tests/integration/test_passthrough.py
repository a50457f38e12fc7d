"""Passthrough mode (issue 16): each client's own SASL login reaches the cluster.

Real pieces only: Tansu, and before it testbed/sasl_front.SecureFront as the secured
Kafka listener (TLS requiring the proxy's client certificate, then SCRAM-SHA-512 with the
accounts alice, bob and proxy); a proxy process with ``client_auth = "passthrough"``, upstream
TLS and its own identity ``proxy``; clients on the proxy's plaintext listener with SASL.

The rule under test: every record a client receives was fetched on its own authenticated
connection. The front denies Fetch to ``proxy`` (and to ``bob``) with
TOPIC_AUTHORIZATION_FAILED, so a record fetched with the proxy's identity could not reach a
client, and the front's audit (per connection: principal, api keys, Fetch record bytes)
shows who fetched what.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import confluent_kafka
import pytest
import scramp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Consumer, KafkaError, Producer
from kafka.record import MemoryRecords

from testbed.certs import Pki, make_pki
from testbed.processes import Broker, free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.sasl_front import ConnectionAudit, SaslPolicy, SecureFront
from tests.compat._tls import ClientSasl, kafka_python_options, librdkafka_config
from tests.integration._kafka_raw import metric_value
from tests.support.group_round_trip import group_round_trip
from tests.support.raw_tls_client import RawKafka, closed_by_peer, log_lines_about
from wire.apis import ApiKey
from wire.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from wire.messages.fetch_request import FetchPartition, FetchTopic
from wire.messages.metadata_request import MetadataRequestTopic

MECHANISM = "SCRAM-SHA-512"
PROXY_PASSWORD = "proxy-identity-password"
ALICE = ClientSasl("alice", "alice-password", MECHANISM)
BOB = ClientSasl("bob", "bob-password", MECHANISM)
TOPIC_AUTHORIZATION_FAILED = 29
SASL_AUTHENTICATION_FAILED = 58
#: What the proxy's own identity must never send: records, writes, group work, admin.
DATA_PLANE_APIS = {
    0: "Produce",
    1: "Fetch",
    8: "OffsetCommit",
    9: "OffsetFetch",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    19: "CreateTopics",
    22: "InitProducerId",
}
#: Short group sessions: Tansu holds a JoinGroup for about half the session.
GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


def _aiokafka_sasl(sasl: ClientSasl) -> dict[str, object]:
    """aiokafka's settings to log in to the proxy's plaintext listener as ``sasl``."""
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": sasl.mechanism,
        "sasl_plain_username": sasl.username,
        "sasl_plain_password": sasl.password,
    }


@dataclass
class Gateway:
    front: SecureFront
    proxy: ProxyProcess
    #: HOST:PORT of the proxy's /metrics.
    metrics: str


def _policy(lifetime_ms: int = 0) -> SaslPolicy:
    return SaslPolicy(
        password=PROXY_PASSWORD,
        mechanisms=(MECHANISM,),
        users={ALICE.username: ALICE.password, BOB.username: BOB.password},
        fetch_denied=frozenset({"proxy", BOB.username}),
        session_lifetime_ms=lifetime_ms,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@contextlib.contextmanager
def _gateway(broker: Broker, pki: Pki, lifetime_ms: int = 0) -> Iterator[Gateway]:
    """A front (TLS + SCRAM before Tansu) and a passthrough proxy before it; both stopped."""
    front = SecureFront(
        (broker.host, broker.port),
        tls=pki.server_context(require_client_cert=True),
        sasl=_policy(lifetime_ms),
    )
    front.start()
    env = {
        "PURGATORY_PROXY_PROXY__CLIENT_AUTH": "passthrough",
        "PURGATORY_PROXY_UPSTREAM__TLS__ENABLED": "true",
        "PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(pki.ca),
        "PURGATORY_PROXY_UPSTREAM__TLS__CERT_FILE": str(pki.client.cert),
        "PURGATORY_PROXY_UPSTREAM__TLS__KEY_FILE": str(pki.client.key),
        "PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM": MECHANISM,
        "PURGATORY_PROXY_UPSTREAM__SASL__USERNAME": "proxy",
        "PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD": PROXY_PASSWORD,
    }
    metrics = f"127.0.0.1:{free_port()}"
    try:
        with running_proxy(front.bootstrap, "--metrics", metrics, env=env) as proxy:
            yield Gateway(front, proxy, metrics)
    finally:
        front.stop()


@pytest.fixture(scope="module")
def gateway(kafka_broker: Broker, pki: Pki) -> Iterator[Gateway]:
    with _gateway(kafka_broker, pki) as running:
        yield running


# --- what the front saw -------------------------------------------------------------------


def _fetches_with_records(connections: list[ConnectionAudit]) -> list[tuple[int, str | None]]:
    """(connection, principal at the time) of every Fetch answer that carried records."""
    return [
        (c.number, entry.username)
        for c in connections
        for entry in c.requests
        if entry.record_bytes
    ]


def _assert_records_only_on_own_connections(front: SecureFront, user: str) -> None:
    connections = front.audit.connections()
    carried = _fetches_with_records(connections)
    assert carried, "no Fetch answer carried records"
    assert {principal for _, principal in carried} == {user}, carried
    owners = {c.number: c.username for c in connections}
    assert {owners[number] for number, _ in carried} == {user}
    assert front.audit.by_user("proxy"), "the proxy's own identity never logged in"
    for connection in front.audit.by_user("proxy"):
        sent = {k: DATA_PLANE_APIS[k] for k in connection.api_keys() if k in DATA_PLANE_APIS}
        assert sent == {}, f"the proxy's identity sent {sent} on connection {connection.number}"


# --- raw frames ---------------------------------------------------------------------------


def _connect(address: str) -> RawKafka:
    host, _, port = address.rpartition(":")
    return RawKafka(socket.create_connection((host, int(port)), timeout=30))


def _login(raw: RawKafka, sasl: ClientSasl) -> SaslAuthenticateResponse:
    """SaslHandshake v1 + SCRAM SaslAuthenticate v2; the last SaslAuthenticate answer."""
    handshake = raw.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=sasl.mechanism))
    assert isinstance(handshake, SaslHandshakeResponse)
    assert handshake.error_code == 0
    client = scramp.ScramClient([sasl.mechanism], sasl.username, sasl.password)
    first = SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode())
    answer = raw.call(ApiKey.SASL_AUTHENTICATE, 2, first)
    assert isinstance(answer, SaslAuthenticateResponse)
    if answer.error_code:
        return answer
    client.set_server_first(bytes(answer.auth_bytes).decode())
    final = SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode())
    answer = raw.call(ApiKey.SASL_AUTHENTICATE, 2, final)
    assert isinstance(answer, SaslAuthenticateResponse)
    if answer.error_code == 0:
        client.set_server_final(bytes(answer.auth_bytes).decode())
    return answer


def _logged_in(address: str, sasl: ClientSasl) -> RawKafka:
    raw = _connect(address)
    assert raw.api_versions().error_code == 0
    answer = _login(raw, sasl)
    assert answer.error_code == 0, answer
    return raw


def _produce_as_alice(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """``values`` to partition 0 of ``topic`` as alice (aiokafka, acks=all), in order."""

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", **_aiokafka_sasl(ALICE)
        )
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()

    asyncio.run(produce())


def _leader_of(bootstrap: str, topic: str) -> str:
    """The proxy port of ``topic``'s partition 0 leader, asked as alice."""
    client = _logged_in(bootstrap, ALICE)
    with client.sock:
        return _leader(client, topic)


def _leader(raw: RawKafka, topic: str) -> str:
    """HOST:PORT of partition 0's leader as the proxy advertises it."""
    request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)])
    answer = raw.call(ApiKey.METADATA, 9, request)
    assert isinstance(answer, MetadataResponse)
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in answer.brokers}
    (found,) = [t for t in answer.topics if t.name == topic]
    leader = next(p.leader_id for p in found.partitions if p.partition_index == 0)
    return brokers[leader]


def _fetch(
    raw: RawKafka,
    topic: str,
    *,
    max_wait_ms: int = 500,
    session_id: int = 0,
    session_epoch: int = -1,
) -> FetchResponse:
    partition = FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    request = FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[FetchTopic(topic=topic, partitions=[partition])],
    )
    answer = raw.call(ApiKey.FETCH, 11, request)
    assert isinstance(answer, FetchResponse), "connection closed on Fetch"
    return answer


def _values(answer: FetchResponse) -> list[bytes]:
    values: list[bytes] = []
    for topic in answer.responses:
        for partition in topic.partitions:
            records = MemoryRecords(bytes(partition.records or b""))
            while (batch := records.next_batch()) is not None:
                values.extend(record.value for record in batch)
    return values


def _create_topic(bootstrap: str, sasl: ClientSasl, prefix: str) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **_aiokafka_sasl(sasl))
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()

    asyncio.run(create())
    return topic


def _fetch_metric(gateway: Gateway, name: str) -> float:
    return metric_value(gateway.metrics, name, operation="fetch")


def _held_fetches(gateway: Gateway) -> float:
    return _fetch_metric(gateway, "purgatory_proxy_purgatory_pending")


async def _take(consumer: AIOKafkaConsumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < count and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            values += [record.value for record in records]
    return values


# --- the tests ----------------------------------------------------------------------------


def test_alice_round_trip_with_a_waiting_consumer_fetches_only_as_alice(
    gateway: Gateway,
) -> None:
    """aiokafka as alice: produce, consume in a group, then the consumer's long-poll is held
    when the producer sends more. Every record came over alice's own connections."""
    bootstrap = gateway.proxy.bootstrap
    options = _aiokafka_sasl(ALICE)
    topic = _create_topic(bootstrap, ALICE, "passthrough-alice")
    first = [f"first-{i}".encode() for i in range(20)]
    later = [f"later-{i}".encode() for i in range(20)]

    async def scenario() -> tuple[list[bytes], list[bytes], tuple[bool, float, bool]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **options)
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"group-{topic}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            # Each Fetch may wait 20 s: the proxy holds it until data arrives.
            fetch_max_wait_ms=20_000,
            **GROUP,
            **options,
        )
        await producer.start()
        await consumer.start()
        try:
            for value in first:
                await producer.send_and_wait(topic, value)
            got_first = await _take(consumer, len(first))
            await consumer.commit()
            # The consumer waits (its next Fetch is held) before anything more is sent.
            waiting = asyncio.ensure_future(_take(consumer, len(later)))
            await asyncio.sleep(1.0)
            held = (not waiting.done(), _held_fetches(gateway))
            completed_before = _fetch_metric(gateway, "purgatory_proxy_purgatory_completions_total")
            for value in later:
                await producer.send_and_wait(topic, value)
            got_later = await asyncio.wait_for(waiting, timeout=90)
            await consumer.commit()
            # The held fetch was completed by the new data (not by its deadline).
            woken = (
                _fetch_metric(gateway, "purgatory_proxy_purgatory_completions_total")
                > completed_before
            )
            return got_first, got_later, (*held, woken)
        finally:
            await consumer.stop()
            await producer.stop()

    got_first, got_later, (still_waiting, pending, woken) = asyncio.run(scenario())
    assert got_first == first
    assert still_waiting
    assert pending >= 1  # the consumer's Fetch was held in the proxy's purgatory
    assert woken  # and completed by the new data, not by its deadline
    assert got_later == later
    assert gateway.proxy.alive()
    _assert_records_only_on_own_connections(gateway.front, ALICE.username)
    assert gateway.front.errors == []


def test_wrong_password_fails_with_an_authentication_error_and_alice_is_unaffected(
    gateway: Gateway,
) -> None:
    errors: list[KafkaError] = []
    wrong = ClientSasl(ALICE.username, "not-her-password", MECHANISM)
    config: dict[str, object] = {"bootstrap.servers": gateway.proxy.bootstrap}
    config |= librdkafka_config(None, wrong)
    config["error_cb"] = errors.append
    producer = Producer(config)
    with contextlib.suppress(Exception):
        producer.list_topics(timeout=10)
    producer.poll(0.5)
    del producer  # librdkafka would go on retrying the login in the background
    codes = {error.code() for error in errors}
    assert KafkaError._AUTHENTICATION in codes, [str(e) for e in errors]
    # A raw client sees the cluster's own refusal, error 58, as it was sent.
    raw = _connect(gateway.proxy.bootstrap)
    with raw.sock:
        answer = _login(raw, wrong)
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
    assert gateway.proxy.alive()
    group_round_trip(gateway.proxy.bootstrap, kafka_python_options(None, ALICE), count=5)


def test_after_a_refused_login_the_client_connection_is_closed(gateway: Gateway) -> None:
    """Kafka closes a connection whose authentication failed (the front does, on the client's
    own upstream connection); the proxy closes the client's side too instead of leaving it
    open with no authenticated upstream behind it."""
    raw = _connect(gateway.proxy.bootstrap)
    closes_before = len(gateway.front.closes)
    with raw.sock:
        answer = _login(raw, ClientSasl(ALICE.username, "not-her-password", MECHANISM))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        new = gateway.front.closes[closes_before:]
        assert any(reason.startswith("authentication failed") for reason in new), new
        assert closed_by_peer(raw.sock)
    assert gateway.proxy.alive()


def test_before_authentication_only_api_versions_is_answered(gateway: Gateway) -> None:
    raw = _connect(gateway.proxy.bootstrap)
    closes_before = len(gateway.front.closes)
    with raw.sock:
        keys = {api.api_key for api in raw.api_versions().api_keys}
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.FETCH} <= keys
        answer = raw.call(ApiKey.METADATA, 9, MetadataRequest(topics=None))
        assert answer is None  # not answered from proxy state: closed
        assert closed_by_peer(raw.sock)
    # It went to the cluster on the client's own connection, which closed it as Kafka does.
    new = gateway.front.closes[closes_before:]
    assert any("api 3 before authentication" in reason for reason in new), new
    assert gateway.proxy.alive()


def test_sasl_handshake_v0_is_refused_with_one_log_line(gateway: Gateway) -> None:
    raw = _connect(gateway.proxy.bootstrap)
    port = raw.local_port
    with raw.sock:
        assert raw.api_versions().error_code == 0
        answer = raw.call(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
        assert answer is None
        assert closed_by_peer(raw.sock)
    gateway.proxy.wait_for_log(rf"127\.0\.0\.1:{port}\b")
    assert len(log_lines_about(gateway.proxy.log_text(), port)) == 1
    assert gateway.proxy.alive()


def _assert_denied(answer: FetchResponse) -> None:
    """No records and no high watermark with error 0, for every partition in the answer."""
    assert answer.error_code == 0 or answer.error_code == TOPIC_AUTHORIZATION_FAILED
    assert _values(answer) == []
    for topic in answer.responses:
        for partition in topic.partitions:
            assert partition.error_code == TOPIC_AUTHORIZATION_FAILED, partition
            assert not partition.records


def test_bob_is_denied_a_partition_alice_just_read_through_the_same_proxy(
    gateway: Gateway,
) -> None:
    bootstrap = gateway.proxy.bootstrap
    topic = _create_topic(bootstrap, ALICE, "passthrough-acl")
    sent = [f"secret-{i}".encode() for i in range(10)]
    _produce_as_alice(bootstrap, topic, sent)
    leader = _leader_of(bootstrap, topic)
    alice = _logged_in(leader, ALICE)
    with alice.sock:
        # Alice reads the partition (sessionless, then in a fetch session the proxy keeps).
        read = _fetch(alice, topic)
        assert _values(read) == sent
        opened = _fetch(alice, topic, session_epoch=0)
        assert _values(opened) == sent
        bob = _logged_in(leader, BOB)
        with bob.sock:
            _assert_denied(_fetch(bob, topic))
            _assert_denied(_fetch(bob, topic, max_wait_ms=2000))
            # In a fetch session of his own: first the full fetch, then an incremental one.
            full = _fetch(bob, topic, session_epoch=0)
            _assert_denied(full)
            if full.session_id:
                _assert_denied(_fetch(bob, topic, session_id=full.session_id, session_epoch=1))
    bob_fetches = [
        entry
        for connection in gateway.front.audit.by_user(BOB.username)
        for entry in connection.requests
        if entry.api_key == ApiKey.FETCH
    ]
    assert bob_fetches, "bob's Fetch never reached the cluster on his connection"
    assert all(entry.denied and not entry.record_bytes for entry in bob_fetches)
    _assert_records_only_on_own_connections(gateway.front, ALICE.username)


def test_client_reauthentication_is_forwarded_across_several_session_lifetimes(
    kafka_broker: Broker, pki: Pki
) -> None:
    """KIP-368 with 4 s sessions: librdkafka (>= 2.2 re-authenticates) produces and consumes for
    over 16 s through the proxy; the front closes any connection whose session expired (as
    Kafka does), and none is."""
    # KIP-368 re-authentication is in librdkafka from 2.2.0 on.
    assert confluent_kafka.libversion()[1] >= 0x020200FF, confluent_kafka.libversion()
    with _gateway(kafka_broker, pki, lifetime_ms=4000) as gateway:
        bootstrap = gateway.proxy.bootstrap
        topic = _create_topic(bootstrap, ALICE, "passthrough-reauth")
        sasl = librdkafka_config(None, ALICE)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **sasl})
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"group-{topic}",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                **sasl,
            }
        )
        consumer.subscribe([topic])
        sent: list[bytes] = []
        received: list[bytes] = []
        failures: list[str] = []

        def poll() -> None:
            for message in consumer.consume(num_messages=100, timeout=0.3):
                if message.error() is not None:
                    failures.append(str(message.error()))
                else:
                    received.append(message.value() or b"")

        try:
            start = time.monotonic()
            while time.monotonic() - start < 16:
                value = f"v{len(sent)}".encode()
                producer.produce(topic, value)
                producer.flush(10)
                sent.append(value)
                poll()
            deadline = time.monotonic() + 30
            while len(received) < len(sent) and time.monotonic() < deadline:
                poll()
        finally:
            consumer.close()
            producer.flush(10)
        assert failures == []
        assert received == sent
        policy = gateway.front.sasl
        assert policy is not None
        assert policy.expired_closes == 0
        # alice's long-lived connections re-authenticated through the proxy, more than once.
        most = max(c.authentications for c in gateway.front.audit.by_user(ALICE.username))
        assert most >= 3
        assert gateway.proxy.alive()
        _assert_records_only_on_own_connections(gateway.front, ALICE.username)


def test_past_the_session_lifetime_without_reauthentication_nothing_comes_from_proxy_state(
    kafka_broker: Broker, pki: Pki
) -> None:
    """A raw client logs in (4 s sessions), reads, then lets its session expire without
    re-authenticating: its next Fetch must go to the cluster (which closes the connection, as
    Kafka does on an expired session), not be answered from what the proxy knows."""
    with _gateway(kafka_broker, pki, lifetime_ms=4000) as gateway:
        bootstrap = gateway.proxy.bootstrap
        topic = _create_topic(bootstrap, ALICE, "passthrough-expiry")
        sent = [f"before-expiry-{i}".encode() for i in range(5)]
        _produce_as_alice(bootstrap, topic, sent)
        leader = _leader_of(bootstrap, topic)
        alice = _logged_in(leader, ALICE)
        with alice.sock:
            assert _values(_fetch(alice, topic)) == sent
            policy = gateway.front.sasl
            assert policy is not None
            expired_before = policy.expired_closes
            time.sleep(5.0)  # past the 4 s session, no re-authentication
            correlation_id = alice.send(
                ApiKey.FETCH,
                11,
                FetchRequest(
                    max_wait_ms=1000,
                    min_bytes=1,
                    topics=[
                        FetchTopic(
                            topic=topic,
                            partitions=[
                                FetchPartition(
                                    partition=0,
                                    fetch_offset=len(sent),
                                    partition_max_bytes=1 << 20,
                                )
                            ],
                        )
                    ],
                ),
            )
            assert correlation_id > 0
            assert alice.read_frame() is None  # closed, not answered from proxy state
        assert policy.expired_closes == expired_before + 1
        assert gateway.proxy.alive()
