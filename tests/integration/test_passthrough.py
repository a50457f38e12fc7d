# Strategy: passthrough mode (issue 16) against Apache Kafka's own security, no test front
# (issues 29 and 30: a result that holds on Tansu proves nothing about Kafka). One KRaft node:
#
#   SASL_SSL        TLS requiring the proxy's client certificate (KIP-684: on a SASL_SSL
#                   listener only the listener's own ssl.client.auth counts), then SASL; no
#                   session lifetime. The `gateway` proxy reaches the cluster here.
#   SASL_PLAINTEXT  sessions of LIFETIME_MS (KIP-368): the broker closes a connection that
#                   sends a request after its session expired. The `reauth_gateway` proxy.
#   authorizer      StandardAuthorizer, admin the super user, no ACL means no access. As an
#                   operator would (docs/security.md), through the Admin API: User:proxy, a
#                   SCRAM-SHA-512 user of its own with Describe on every topic; alice may
#                   create, read and write topics named alice-* and read groups named
#                   group-alice-*; bob may do nothing.
#
# Clients log in to the proxy's plaintext listener with SCRAM-SHA-512 as themselves; the proxy
# relays their SASL on their own upstream connections and uses its own identity only for its
# metadata refresher and offset watcher.
#
# Who fetched what is the broker's word: Kafka's request log names, for every request it
# completed, the principal, the connection and (Fetch) the record bytes of each partition of
# the answer. Closes are the broker's too: kafka.network.Processor at DEBUG names each
# connection it closed for an expired session, and org.apache.kafka.common.network.Selector
# at INFO each failed authentication and why.
"""Passthrough (the gateway): each client's own SASL login and Kafka's ACLs decide what it gets.

The rule under test: every record a client receives was fetched on a connection the cluster
authenticated as that client; the proxy's own identity never sends a data plane request.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
import scramp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    ResourcePattern,
    ResourceType,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.record import MemoryRecords

from testbed.kafka_cluster import USERS, KafkaCluster, running_kafka
from testbed.processes import free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat._tls import ClientSasl, kafka_python_options, librdkafka_config
from tests.integration._kafka_raw import metric_value
from tests.support.group_round_trip import group_round_trip
from tests.support.raw_tls_client import RawKafka, closed_by_peer, log_lines_about
from tests.support.secure_kafka import expired_channels, proxy_env, sasl_options
from wire.apis import ApiKey, response_header_version
from wire.codec import decode_response
from wire.headers import parse_response_header
from wire.messages import (
    ApiVersionsRequest,
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
PROXY_USER, PROXY_PASSWORD = "proxy", "proxy-identity-password"
ALICE = ClientSasl("alice", USERS["alice"], MECHANISM)
BOB = ClientSasl("bob", USERS["bob"], MECHANISM)
#: alice's topics and groups (prefixed ACLs).
ALICE_TOPICS, ALICE_GROUPS = "alice-", "group-alice-"
#: The session lifetime on the SASL_PLAINTEXT listener.
LIFETIME_MS = 4000
FETCH_VERSION = 11
TOPIC_AUTHORIZATION_FAILED = 29
SASL_AUTHENTICATION_FAILED = 58
#: All the proxy's own identity may send (docs/security.md): no records, writes, group work
#: or admin. (Its SaslHandshake and SaslAuthenticate are the broker's authenticator's, never
#: in the request log.)
PROXY_IDENTITY_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.LIST_OFFSETS})
#: Short group sessions, so a group's first assignment comes quickly.
GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


# --- the cluster, set up as an operator would ----------------------------------------------


def _acl(user: str, operation: ACLOperation, kind: ResourceType, name: str) -> ACL:
    pattern_type = (
        ACLResourcePatternType.LITERAL if name == "*" else ACLResourcePatternType.PREFIXED
    )
    pattern = ResourcePattern(kind, name, pattern_type)
    return ACL(f"User:{user}", "*", operation, ACLPermissionType.ALLOW, pattern)


def _set_up(cluster: KafkaCluster) -> None:
    """The proxy's user and everyone's ACLs, and the broker loggers the tests read."""
    admin = KafkaAdminClient(
        bootstrap_servers=cluster.bootstrap("SASL_PLAINTEXT"),
        request_timeout_ms=30_000,
        **sasl_options("PLAIN"),
    )
    try:
        sha512 = ScramMechanism.SCRAM_SHA_512
        upsert = UserScramCredentialUpsertion(PROXY_USER, sha512, PROXY_PASSWORD)
        assert admin.alter_user_scram_credentials([upsert]) == {PROXY_USER: None}
        topics = [ACLOperation.CREATE, ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE]
        acls = [
            _acl(PROXY_USER, ACLOperation.DESCRIBE, ResourceType.TOPIC, "*"),
            *(_acl("alice", operation, ResourceType.TOPIC, ALICE_TOPICS) for operation in topics),
            _acl("alice", ACLOperation.READ, ResourceType.GROUP, ALICE_GROUPS),
        ]
        result = admin.create_acls(acls)
        assert not result["failed"], result
        loggers = {
            "kafka.network.Processor": "DEBUG",
            "org.apache.kafka.common.network.Selector": "INFO",
        }
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, "1", loggers)])
    finally:
        admin.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    listener_settings = {
        "listener.name.sasl_ssl.ssl.client.auth": "required",
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(LIFETIME_MS),
    }
    with running_kafka(
        listeners=("SASL_SSL", "SASL_PLAINTEXT"),
        ssl_client_auth="required",
        authorizer=True,
        request_log=True,
        extra=listener_settings,
    ) as running:
        _set_up(running)
        yield running


@dataclass
class Gateway:
    cluster: KafkaCluster
    proxy: ProxyProcess
    #: HOST:PORT of the proxy's /metrics.
    metrics: str


@contextlib.contextmanager
def _gateway(cluster: KafkaCluster, listener: str, folder: Path) -> Iterator[Gateway]:
    """A passthrough proxy before ``listener``: TLS with its certificate on SASL_SSL, and its
    own SCRAM identity for its own connections."""
    pki = cluster.pki if listener == "SASL_SSL" else None
    env = proxy_env(
        MECHANISM,
        folder,
        pki=pki,
        client_certificate=True,
        user=PROXY_USER,
        password=PROXY_PASSWORD,
    )
    env["PURGATORY_PROXY_PROXY__CLIENT_AUTH"] = "passthrough"
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(cluster.bootstrap(listener), "--metrics", metrics, env=env) as proxy:
        yield Gateway(cluster, proxy, metrics)


def _refuses_tls_without_a_certificate(cluster: KafkaCluster) -> bool:
    """Whether the SASL_SSL listener refuses a client that shows no certificate (its own
    ssl.client.auth took), so a proxy that gets through showed its own."""
    assert cluster.pki is not None
    context = ssl.create_default_context(cafile=str(cluster.pki.ca))
    host, _, port = cluster.bootstrap("SASL_SSL").rpartition(":")
    try:
        with (
            socket.create_connection((host, int(port)), timeout=10) as plain,
            context.wrap_socket(plain, server_hostname=host) as tls,
        ):
            RawKafka(tls).send(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
            return closed_by_peer(tls)  # TLS 1.3: the refusal shows at the first read
    except (ssl.SSLError, ConnectionError):
        return True


@pytest.fixture(scope="module")
def gateway(cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    assert _refuses_tls_without_a_certificate(cluster)
    with _gateway(cluster, "SASL_SSL", tmp_path_factory.mktemp("gateway")) as running:
        yield running


@pytest.fixture(scope="module")
def reauth_gateway(
    cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    with _gateway(cluster, "SASL_PLAINTEXT", tmp_path_factory.mktemp("reauth")) as running:
        yield running


# --- what the broker saw --------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """One request the broker completed, from its request log."""

    api_key: int
    #: "alice" for User:alice.
    user: str
    #: The broker's channel id: broker address, client address, processor, index.
    connection: str
    client_id: str
    total_ms: float
    #: Fetch: each partition of the answer as (error code, record bytes).
    partitions: tuple[tuple[int, int], ...]

    @property
    def record_bytes(self) -> int:
        return sum(size for _, size in self.partitions)


def _served(entry: dict[str, Any]) -> Served:
    header = entry["requestHeader"]
    partitions: list[tuple[int, int]] = []
    if header["requestApiKey"] == ApiKey.FETCH:
        partitions = [
            (partition["errorCode"], partition.get("recordsSizeInBytes", 0))
            for topic in entry["response"]["responses"]
            for partition in topic["partitions"]
        ]
    return Served(
        api_key=header["requestApiKey"],
        user=entry["principal"].removeprefix("User:"),
        connection=entry["connection"],
        client_id=header.get("clientId") or "",
        total_ms=entry["totalTimeMs"],
        partitions=tuple(partitions),
    )


def _requests(cluster: KafkaCluster) -> list[Served]:
    return [_served(entry) for entry in cluster.requests(1)]


def _assert_records_only_on_own_connections(cluster: KafkaCluster, user: str, since: int) -> None:
    """Every Fetch answer with records went to ``user`` (and, from ``since`` on, some did), on
    a connection that served no one else; the proxy's identity sent only what it may."""
    served = _requests(cluster)
    carried = [s for s in served if s.record_bytes]
    assert [s for s in served[since:] if s.record_bytes], "no Fetch answer carried records"
    assert {s.user for s in carried} == {user}, carried
    owners: dict[str, set[str]] = {}
    for s in served:
        owners.setdefault(s.connection, set()).add(s.user)
    assert all(owners[s.connection] == {user} for s in carried), owners
    proxy_sent = Counter(ApiKey(s.api_key).name for s in served if s.user == PROXY_USER)
    assert proxy_sent, "the proxy's own identity never reached the cluster"
    allowed = {ApiKey(key).name for key in PROXY_IDENTITY_APIS}
    assert set(proxy_sent) <= allowed, f"the proxy's identity sent {proxy_sent}"


def _request_count(cluster: KafkaCluster) -> int:
    return len(cluster.requests(1))


def _broker_log_since(cluster: KafkaCluster, offset: int) -> str:
    return cluster.nodes[0].log_text()[offset:]


def _broker_log_size(cluster: KafkaCluster) -> int:
    return len(cluster.nodes[0].log_text())


# --- raw frames -----------------------------------------------------------------------------


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


def _logged_in(address: str, sasl: ClientSasl) -> tuple[RawKafka, SaslAuthenticateResponse]:
    raw = _connect(address)
    assert raw.api_versions().error_code == 0
    answer = _login(raw, sasl)
    assert answer.error_code == 0, answer
    return raw, answer


def _produce_as_alice(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """``values`` to partition 0 of ``topic`` as alice (aiokafka, acks=all), in order."""

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", **kafka_python_options(None, ALICE)
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
    client, _ = _logged_in(bootstrap, ALICE)
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


def _fetch_request(
    topic: str,
    *,
    offset: int = 0,
    max_wait_ms: int = 500,
    session_id: int = 0,
    session_epoch: int = -1,
) -> FetchRequest:
    partition = FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[FetchTopic(topic=topic, partitions=[partition])],
    )


def _fetch(raw: RawKafka, topic: str, **shape: int) -> FetchResponse:
    """A Fetch v11 of ``topic``'s partition 0 (``shape``: see _fetch_request), answered."""
    answer = raw.call(ApiKey.FETCH, FETCH_VERSION, _fetch_request(topic, **shape))
    assert isinstance(answer, FetchResponse), "connection closed on Fetch"
    return answer


def _fetch_answer(raw: RawKafka) -> FetchResponse:
    """The answer to a Fetch sent earlier with ``raw.send``."""
    frame = raw.read_frame()
    assert frame is not None, "connection closed on Fetch"
    _, start = parse_response_header(frame, response_header_version(ApiKey.FETCH, FETCH_VERSION))
    answer = decode_response(ApiKey.FETCH, FETCH_VERSION, frame[start:])
    assert isinstance(answer, FetchResponse)
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
    """A new topic ``<prefix>-<random>``, created through the proxy as ``sasl``'s user."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_python_options(None, sasl))
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


# --- the tests ------------------------------------------------------------------------------


def test_alice_round_trip_with_a_waiting_consumer_fetches_only_as_alice(
    gateway: Gateway,
) -> None:
    """aiokafka as alice: produce, consume in a group, then the consumer's long-poll is held
    when the producer sends more. Every record came over alice's own connections."""
    bootstrap = gateway.proxy.bootstrap
    since = _request_count(gateway.cluster)
    options = kafka_python_options(None, ALICE)
    topic = _create_topic(bootstrap, ALICE, "alice-round-trip")
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
    _assert_records_only_on_own_connections(gateway.cluster, ALICE.username, since)
    assert "internal error" not in gateway.proxy.log_text()


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
        assert "invalid credentials" in (answer.error_message or "")
    assert gateway.proxy.alive()
    group_round_trip(
        gateway.proxy.bootstrap, kafka_python_options(None, ALICE), count=5, prefix="alice"
    )


#: The broker's Selector closing a connection before its login completed: a refused login
#: (INFO) or a request it cannot take before one (WARN, the exception on the next line).
_SELECTOR = r" \(org\.apache\.kafka\.common\.network\.Selector\)"
_REFUSED = re.compile(
    rf"Failed authentication with /127\.0\.0\.1 \(channelId=\S+\) \((?P<failed>.*)\){_SELECTOR}$"
    rf"|Unexpected error from /127\.0\.0\.1 \(channelId=\S+\); closing connection{_SELECTOR}"
    r"\n\S+: (?P<error>.*)$",
    re.MULTILINE,
)


def _refused_logins(cluster: KafkaCluster, offset: int) -> list[str]:
    """Why the broker closed each connection before its login completed, since ``offset`` in
    its log (its Selector's words)."""
    log = _broker_log_since(cluster, offset)
    return [found["failed"] or found["error"] for found in _REFUSED.finditer(log)]


def test_after_a_refused_login_the_client_connection_is_closed(gateway: Gateway) -> None:
    """Kafka closes a connection whose authentication failed (here the client's own upstream
    connection); the proxy closes the client's side too instead of leaving it open with no
    authenticated upstream behind it."""
    log_offset = _broker_log_size(gateway.cluster)
    raw = _connect(gateway.proxy.bootstrap)
    port = raw.local_port
    with raw.sock:
        answer = _login(raw, ClientSasl(ALICE.username, "not-her-password", MECHANISM))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert closed_by_peer(raw.sock)
    # The broker refused this one login (on the client's connection, not the proxy's).
    refused = _refused_logins(gateway.cluster, log_offset)
    invalid = f"invalid credentials with SASL mechanism {MECHANISM}"
    assert refused == [f"Authentication failed during authentication due to {invalid}"], refused
    # And the proxy closed the client's side for that reason, in one line.
    gateway.proxy.wait_for_log(
        rf"closed client connection <ClientConnection #\d+ 127\.0\.0\.1:{port} -> bootstrap>: "
        r"the cluster refused the client's SASL authentication \(error 58\)"
    )
    assert len(log_lines_about(gateway.proxy.log_text(), port)) == 1
    assert gateway.proxy.alive()


def test_before_authentication_only_api_versions_is_answered(gateway: Gateway) -> None:
    log_offset = _broker_log_size(gateway.cluster)
    raw = _connect(gateway.proxy.bootstrap)
    port = raw.local_port
    with raw.sock:
        keys = {api.api_key for api in raw.api_versions().api_keys}
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.FETCH} <= keys
        answer = raw.call(ApiKey.METADATA, 9, MetadataRequest(topics=None))
        assert answer is None  # not answered from proxy state: closed
        assert closed_by_peer(raw.sock)
    # It went to the cluster on the client's own connection, which closed it as Kafka does.
    refused = _refused_logins(gateway.cluster, log_offset)
    assert refused == ["Unexpected Kafka request of type METADATA during SASL handshake."], refused
    # The proxy closed the client because the cluster did, not on its own.
    gateway.proxy.wait_for_log(
        rf"(?m)closed client connection <ClientConnection #\d+ 127\.0\.0\.1:{port} -> "
        r"bootstrap>: upstream broker closed the connection$"
    )
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
            assert partition.high_watermark == -1, partition
            assert not partition.records


def _await_offset_watch(gateway: Gateway, since: int) -> None:
    """Until the proxy's offset watcher has asked the cluster (ListOffsets as the proxy) since
    request ``since`` of the log: a fetch held from then on, the proxy knows its partition's
    end first-hand, fresh. At most 10 s (the watcher asks every 100 ms while one is held)."""
    deadline = time.monotonic() + 10
    while not any(
        s.api_key == ApiKey.LIST_OFFSETS and s.user == PROXY_USER
        for s in _requests(gateway.cluster)[since:]
    ):
        assert time.monotonic() < deadline, "the proxy's offset watcher never asked"
        time.sleep(0.05)


def test_bob_is_denied_a_partition_alice_just_read_through_the_same_proxy(
    gateway: Gateway,
) -> None:
    bootstrap = gateway.proxy.bootstrap
    since = _request_count(gateway.cluster)
    topic = _create_topic(bootstrap, ALICE, "alice-acl")
    sent = [f"secret-{i}".encode() for i in range(10)]
    _produce_as_alice(bootstrap, topic, sent)
    leader = _leader_of(bootstrap, topic)
    alice, _ = _logged_in(leader, ALICE)
    with alice.sock:
        # Alice reads the partition (sessionless, then in a fetch session the proxy keeps),
        # then waits at its end: held, so the proxy's knowledge of it is current.
        read = _fetch(alice, topic)
        assert _values(read) == sent
        opened = _fetch(alice, topic, session_epoch=0)
        assert _values(opened) == sent
        end = len(sent)
        waits_from = _request_count(gateway.cluster)
        at_end = _fetch_request(topic, offset=end, max_wait_ms=20_000)
        alice.send(ApiKey.FETCH, FETCH_VERSION, at_end)
        _await_offset_watch(gateway, waits_from)
        bob, _ = _logged_in(leader, BOB)
        with bob.sock:
            _assert_denied(_fetch(bob, topic))
            _assert_denied(_fetch(bob, topic, max_wait_ms=2000))
            # At the end alice waits at, where the proxy knows that nothing is new, again and
            # again (a denial must not teach his connection that it may be answered there).
            for _ in range(3):
                _assert_denied(_fetch(bob, topic, offset=end, max_wait_ms=2000))
            # In a fetch session of his own: first the full fetch, then an incremental one.
            full = _fetch(bob, topic, session_epoch=0)
            _assert_denied(full)
            assert full.session_id  # the proxy keeps the session; the next is incremental
            _assert_denied(_fetch(bob, topic, session_id=full.session_id, session_epoch=1))
        # Alice's held fetch is answered with what she writes next, and only that.
        _produce_as_alice(bootstrap, topic, [b"secret-next"])
        assert _values(_fetch_answer(alice)) == [b"secret-next"]
    served = _requests(gateway.cluster)[since:]
    bob_fetches = [s for s in served if s.user == BOB.username and s.api_key == ApiKey.FETCH]
    # Each of bob's seven fetches reached the cluster on his connection, and was denied there.
    assert len(bob_fetches) >= 7, bob_fetches
    denied = [(TOPIC_AUTHORIZATION_FAILED, 0)]
    assert all(list(s.partitions) == denied for s in bob_fetches), bob_fetches
    _assert_records_only_on_own_connections(gateway.cluster, ALICE.username, since)


def _outlived_three_lifetimes(
    early: list[Served], late: list[Served], final: list[Served], user: str
) -> set[str]:
    """``user``'s connections that served requests before ``early`` was read and a request
    received after ``late`` was read, when ``late`` was read more than three lifetimes (and a
    second) after ``early``: each re-authenticated at least three times, since the broker
    closes a connection whose session expired at its next request. (A request completed
    after ``late`` within a second of work was received after it, to within the second.)"""
    before = {s.connection for s in early if s.user == user}
    after = {s.connection for s in final[len(late) :] if s.user == user and s.total_ms < 1000}
    return before & after


def test_client_reauthentication_is_forwarded_across_several_session_lifetimes(
    reauth_gateway: Gateway,
) -> None:
    """KIP-368 with 4 s sessions: librdkafka (>= 2.2 re-authenticates) produces and consumes
    for 18 s through the proxy. The broker closes any connection whose session expired, and
    closes none; alice's connections (and the proxy's own) served across three lifetimes."""
    # KIP-368 re-authentication is in librdkafka from 2.2.0 on.
    assert confluent_kafka.libversion()[1] >= 0x020200FF, confluent_kafka.libversion()
    gateway = reauth_gateway
    cluster = gateway.cluster
    since = _request_count(cluster)
    expired_before = expired_channels(cluster)
    bootstrap = gateway.proxy.bootstrap
    topic = _create_topic(bootstrap, ALICE, "alice-reauth")
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

    # What the broker had served once records flowed (`early`), and three lifetimes later.
    early: list[Served] = []
    late: list[Served] = []
    try:
        start = time.monotonic()
        early_at = 0.0
        while time.monotonic() - start < 18:
            value = f"v{len(sent)}".encode()
            producer.produce(topic, value)
            producer.flush(10)
            sent.append(value)
            poll()
            elapsed = time.monotonic() - start
            if not early and received:
                early, early_at = _requests(cluster), elapsed
            if early and not late and elapsed > early_at + 3 * LIFETIME_MS / 1000 + 1:
                late = _requests(cluster)
        deadline = time.monotonic() + 30
        while len(received) < len(sent) and time.monotonic() < deadline:
            poll()
    finally:
        consumer.close()
        producer.flush(10)
    assert failures == []
    assert received == sent
    assert early and late
    final = _requests(cluster)
    # The producer's and the consumer's connections at least, each re-authenticated by
    # the client through the proxy; and the proxy's own (its offset watcher) by the proxy.
    assert len(_outlived_three_lifetimes(early, late, final, ALICE.username)) >= 2
    assert _outlived_three_lifetimes(early, late, final, PROXY_USER)
    # The broker closed no connection for an expired session: not alice's, not the proxy's.
    expired = {a: c for a, c in expired_channels(cluster).items() if a not in expired_before}
    assert expired == {}
    assert gateway.proxy.alive()
    _assert_records_only_on_own_connections(cluster, ALICE.username, since)


def test_past_the_session_lifetime_without_reauthentication_nothing_comes_from_proxy_state(
    reauth_gateway: Gateway,
) -> None:
    """A raw client logs in (4 s sessions), reads, then lets its session expire without
    re-authenticating. Its next Fetch, at the end of the partition while another connection
    of alice's waits there (so the proxy knows, fresh, that nothing is new), must go to the
    cluster, which closes the connection as Kafka does on an expired session; it must not be
    answered from what the proxy knows."""
    gateway = reauth_gateway
    bootstrap = gateway.proxy.bootstrap
    topic = _create_topic(bootstrap, ALICE, "alice-expiry")
    sent = [f"before-expiry-{i}".encode() for i in range(5)]
    _produce_as_alice(bootstrap, topic, sent)
    leader = _leader_of(bootstrap, topic)
    alice, login = _logged_in(leader, ALICE)
    assert login.session_lifetime_ms == LIFETIME_MS  # the broker's lifetime, relayed
    with alice.sock:
        # The first read is the cluster's word that she is in; the second, taken by the
        # proxy on her connection, teaches it that this connection may read the partition.
        for _ in range(2):
            assert _values(_fetch(alice, topic)) == sent
        time.sleep(LIFETIME_MS / 1000 + 1)  # past the session, no re-authentication
        waiter, _ = _logged_in(leader, ALICE)
        with waiter.sock:
            assert _values(_fetch(waiter, topic)) == sent  # (the cluster's word: accepted)
            waits_from = _request_count(gateway.cluster)
            waiting = _fetch_request(topic, offset=len(sent), max_wait_ms=3000)
            waiter.send(ApiKey.FETCH, FETCH_VERSION, waiting)
            _await_offset_watch(gateway, waits_from)
            expired_before = expired_channels(gateway.cluster)
            at_end = _fetch_request(topic, offset=len(sent), max_wait_ms=1000)
            correlation_id = alice.send(ApiKey.FETCH, FETCH_VERSION, at_end)
            assert correlation_id > 0
            assert alice.read_frame() is None  # closed, not answered from proxy state
            # The waiter, in its session, is answered: nothing new at its max wait.
            assert _values(_fetch_answer(waiter)) == []
    # The broker closed it: the client's own connection, its Fetch the request it refused.
    expired = {
        address: client_id
        for address, client_id in expired_channels(gateway.cluster).items()
        if address not in expired_before
    }
    assert list(expired.values()) == ["raw-security-test"], expired
    assert gateway.proxy.alive()
