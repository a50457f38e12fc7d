# Strategy: isolation between identities (issue 29) against Apache Kafka's own security, not a
# test front: one KRaft node with a SASL_PLAINTEXT listener and the StandardAuthorizer (admin
# is the super user; no ACL means no access). The proxy runs in client_auth = "passthrough"
# in front of it. Set up as an operator would, through the Admin API:
#
#   User:proxy   a SCRAM-SHA-512 user of its own, allowed DESCRIBE on every topic: its
#                metadata refresher needs nothing, its offset watcher's ListOffsets needs
#                Describe (docs/security.md); it may read no records
#   User:alice   READ and DESCRIBE on topic A
#   User:bob     nothing on A
#
# Clients are raw connections through the proxy's plaintext listener (the project's wire
# codec and the proxy's own sans-I/O SASL client for SCRAM), on the broker's proxy port where
# fetches are held, so each request and answer is exactly what the test says. Asserted:
#   - bob never receives A's records, high watermark, log start or offsets (Fetch, also in a
#     fetch session, ListOffsets), while alice's fetches on A are held and woken by records
#     written behind the proxy's back; and bob's denials neither wake alice's held fetches
#     nor enter what the proxy knows (on main they did: each was a re-fetch as alice);
#   - alice's READ revoked mid-session: her next fetch that reaches the cluster is denied,
#     and from then on she is never answered "nothing new" from what another identity's
#     reads taught the proxy (on main she was, with offsets learnt from admin's read); the
#     records written after the revocation never reach her.
"""Passthrough against Apache Kafka's ACLs: alice may read topic A, bob may not (issue 29)."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from proxy.security.sasl_client import (
    AUTHENTICATE_VERSION,
    HANDSHAKE_VERSION,
    SaslClient,
    SaslCredentials,
)
from testbed.kafka_cluster import USERS, KafkaCluster, running_kafka
from testbed.processes import free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.integration._kafka_raw import metric_value
from tests.support.fetch_requests import fetch_partitions
from tests.support.raw_tls_client import RawKafka
from wire.apis import ApiKey, response_header_version
from wire.codec import decode_response
from wire.headers import parse_response_header
from wire.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)
from wire.messages.fetch_response import PartitionData
from wire.messages.list_offsets_request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from wire.messages.list_offsets_response import ListOffsetsResponse

LISTENER = "SASL_PLAINTEXT"
MECHANISM = "SCRAM-SHA-512"
PROXY_USER, PROXY_PASSWORD = "proxy", "proxy-identity-secret"
TOPIC_AUTHORIZATION_FAILED = 29
FETCH_VERSION = 12  # topic names, flexible
REFETCHES = "purgatory_proxy_upstream_fetches_total"


@dataclass
class Gateway:
    cluster: KafkaCluster
    proxy: ProxyProcess
    metrics: str
    topic: str
    broker_port: int

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(**_sasl_options(self.cluster, "admin"), request_timeout_ms=30_000)


def _sasl_options(cluster: KafkaCluster, user: str) -> dict[str, object]:
    """kafka-python's settings to reach the cluster itself (not the proxy) as ``user``."""
    return {"bootstrap_servers": cluster.bootstrap(LISTENER), **_login_options(user)}


def _login_options(user: str) -> dict[str, object]:
    return {
        "security_protocol": LISTENER,
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def _create_topic(cluster: KafkaCluster, topic: str) -> None:
    """Create ``topic`` as admin and wait until its leader serves it."""
    create_topic(cluster.bootstrap(LISTENER), name=topic, **_login_options("admin"))


def _acl(user: str, operation: ACLOperation, topic: str) -> ACL:
    pattern = ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
    return ACL(f"User:{user}", "*", operation, ACLPermissionType.ALLOW, pattern)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with running_kafka(listeners=(LISTENER,), authorizer=True) as cluster:
        topic = f"a-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(**_sasl_options(cluster, "admin"), request_timeout_ms=30_000)
        try:
            upsert = UserScramCredentialUpsertion(PROXY_USER, ScramMechanism.SCRAM_SHA_512,
                                                  PROXY_PASSWORD)  # fmt: skip
            assert admin.alter_user_scram_credentials([upsert]) == {PROXY_USER: None}
            acls = [
                _acl(PROXY_USER, ACLOperation.DESCRIBE, "*"),  # the literal "*": every topic
                _acl("alice", ACLOperation.READ, topic),
                _acl("alice", ACLOperation.DESCRIBE, topic),
            ]
            result = admin.create_acls(acls)
            assert not result["failed"], result
        finally:
            admin.close()
        _create_topic(cluster, topic)
        _produce(cluster, topic, b"first", b"second")
        folder = tmp_path_factory.mktemp("gateway")
        (folder / "password").write_text(PROXY_PASSWORD)
        config = folder / "proxy.toml"
        config.write_text(
            '[proxy]\nclient_auth = "passthrough"\n'
            f'[upstream.sasl]\nmechanism = "{MECHANISM}"\nusername = "{PROXY_USER}"\n'
            f'password_file = "{folder / "password"}"\n'
        )
        metrics = f"127.0.0.1:{free_port()}"
        with running_proxy(
            cluster.bootstrap(LISTENER), "--config", str(config), "--metrics", metrics
        ) as proxy:
            yield Gateway(cluster, proxy, metrics, topic, _broker_port(proxy))


def _produce(cluster: KafkaCluster, topic: str, *values: bytes) -> None:
    """Write records as admin, straight to the cluster (behind the proxy's back)."""
    producer = KafkaProducer(**_sasl_options(cluster, "admin"), acks="all")
    for value in values:
        producer.send(topic, value).get(timeout=30)
    producer.close()


def _login(raw: RawKafka, user: str, password: str) -> None:
    """SCRAM through the proxy (relayed to the cluster), then a Metadata request: its answer
    is the cluster's word that the client is accepted (proxy/connection/client_auth.py)."""
    sasl = SaslClient(SaslCredentials(MECHANISM, user, password))
    request = sasl.start()
    answer = raw.call(ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION, request)
    assert isinstance(answer, SaslHandshakeResponse)
    step = sasl.receive(answer)
    while step is not None:
        reply = raw.call(ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSION, step)
        assert isinstance(reply, SaslAuthenticateResponse)
        step = sasl.receive(reply)
    assert isinstance(raw.call(ApiKey.METADATA, 12, MetadataRequest(topics=[])), MetadataResponse)


def _broker_port(proxy: ProxyProcess) -> int:
    """The proxy's port for the (one) broker, from its rewritten Metadata, as alice."""
    with _connect(proxy.host, proxy.port, "alice") as raw:
        metadata = raw.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
    assert isinstance(metadata, MetadataResponse)
    [broker] = metadata.brokers
    return int(broker.port)


class _Client(RawKafka):
    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def _connect(host: str, port: int, user: str) -> _Client:
    client = _Client(socket.create_connection((host, port), timeout=30))
    _login(client, user, USERS[user])
    return client


def _client(gateway: Gateway, user: str) -> _Client:
    """``user`` logged in on the broker's proxy port, where fetches are held."""
    return _connect(gateway.proxy.host, gateway.broker_port, user)


def _fetch(
    topic: str, offset: int, max_wait_ms: int, session: tuple[int, int] = (0, -1)
) -> FetchRequest:
    return fetch_partitions({topic: (0,)}, offset=offset, max_wait_ms=max_wait_ms, session=session)


def _partition(response: object) -> PartitionData | None:
    """The one partition of a Fetch answer (None: an incremental answer with none)."""
    assert isinstance(response, FetchResponse) and response.error_code == 0, response
    parts = [p for topic in response.responses for p in topic.partitions]
    if not parts:
        return None
    [part] = parts
    return part


def _fetched(client: _Client, topic: str, offset: int, max_wait_ms: int) -> PartitionData | None:
    """A sessionless fetch of ``topic``'s partition 0 from ``offset``, and its answer."""
    return _partition(client.call(ApiKey.FETCH, FETCH_VERSION, _fetch(topic, offset, max_wait_ms)))


def _read(client: _Client) -> PartitionData | None:
    frame = client.read_frame()
    assert frame is not None, "the proxy closed the connection"
    _, start = parse_response_header(frame, response_header_version(ApiKey.FETCH, FETCH_VERSION))
    return _partition(decode_response(ApiKey.FETCH, FETCH_VERSION, frame[start:]))


def _assert_denied(part: PartitionData | None) -> None:
    """An answer about A that tells nothing of it."""
    assert part is not None
    assert part.error_code == TOPIC_AUTHORIZATION_FAILED
    assert (part.high_watermark, part.last_stable_offset) == (-1, -1)
    assert part.log_start_offset == -1 and not part.records


def _refetches(gateway: Gateway) -> float:
    return metric_value(gateway.metrics, REFETCHES, kind="refetch")


def test_bob_learns_nothing_of_topic_a_and_wakes_none_of_alices_held_fetches(
    gateway: Gateway,
) -> None:
    topic = gateway.topic
    with _client(gateway, "alice") as alice, _client(gateway, "bob") as bob:
        part = _fetched(alice, topic, 0, 500)
        assert part is not None and part.error_code == 0 and part.records
        end = part.high_watermark

        # Alice waits at the end of A; bob asks about A over and over meanwhile.
        before = _refetches(gateway)
        sent = time.monotonic()
        alice.send(ApiKey.FETCH, FETCH_VERSION, _fetch(topic, end, 4000))
        for offset in (0, end, end):
            _assert_denied(_fetched(bob, topic, offset, 100))
        # In a fetch session of his own, full and then incremental.
        full = bob.call(ApiKey.FETCH, FETCH_VERSION, _fetch(topic, 0, 100, session=(0, 0)))
        assert isinstance(full, FetchResponse)
        _assert_denied(_partition(full))
        assert full.session_id  # the proxy keeps the session; its next fetch is incremental
        incremental = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=1 << 20,
                                   session_id=full.session_id, session_epoch=1)  # fmt: skip
        _assert_denied(_partition(bob.call(ApiKey.FETCH, FETCH_VERSION, incremental)))
        offsets = bob.call(ApiKey.LIST_OFFSETS, 6, ListOffsetsRequest(
            replica_id=-1,
            topics=[ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsPartition(partition_index=0, timestamp=-1)])],
        ))  # fmt: skip
        assert isinstance(offsets, ListOffsetsResponse)
        [[listed]] = [t.partitions for t in offsets.topics]
        assert listed.error_code == TOPIC_AUTHORIZATION_FAILED and listed.offset == -1
        held = _read(alice)
        assert held is not None and held.error_code == 0 and not held.records
        assert time.monotonic() - sent >= 3.5  # held for its max wait: nothing was new
        # Bob's five denials woke nothing of alice's (each would have been a re-fetch).
        assert _refetches(gateway) == before

        # Alice waits again; records come behind the proxy's back and wake her; bob, asking
        # all the while, still learns nothing.
        alice.send(ApiKey.FETCH, FETCH_VERSION, _fetch(topic, end, 10_000))
        _assert_denied(_fetched(bob, topic, end, 100))
        _produce(gateway.cluster, topic, b"third")
        for _ in range(5):
            _assert_denied(_fetched(bob, topic, end, 200))
        woken = _read(alice)
        assert woken is not None and woken.error_code == 0 and woken.records
        assert woken.high_watermark == end + 1
        _assert_denied(_fetched(bob, topic, end, 100))


def test_alice_revoked_mid_session_is_denied_and_not_answered_from_what_others_read(
    gateway: Gateway,
) -> None:
    topic = f"revoked-{uuid.uuid4().hex[:8]}"
    _create_topic(gateway.cluster, topic)
    admin = gateway.admin()
    try:
        assert not admin.create_acls(
            [_acl("alice", ACLOperation.READ, topic), _acl("alice", ACLOperation.DESCRIBE, topic)]
        )["failed"]
    finally:
        admin.close()
    _produce(gateway.cluster, topic, b"before")
    with _client(gateway, "alice") as alice:
        deadline = time.monotonic() + 30  # ACLs reach the broker within moments
        while True:
            part = _fetched(alice, topic, 0, 100)
            if part is not None and part.error_code == 0 and part.records:
                break
            assert time.monotonic() < deadline, part
            time.sleep(0.2)
        end = part.high_watermark
        part = _fetched(alice, topic, end, 500)
        assert part is not None and part.error_code == 0

        admin = gateway.admin()
        try:
            read = ACLFilter("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                             ResourcePatternFilter(ResourceType.TOPIC, topic,
                                                   ACLResourcePatternType.LITERAL))  # fmt: skip
            admin.delete_acls([read])
        finally:
            admin.close()
        # Her next fetch the proxy takes to the cluster is denied (it is taken there once the
        # proxy's knowledge of A is not current: nothing has been held on A for a moment).
        deadline = time.monotonic() + 30
        while True:
            time.sleep(1.0)
            part = _fetched(alice, topic, end, 100)
            if part is not None and part.error_code == TOPIC_AUTHORIZATION_FAILED:
                break
            assert time.monotonic() < deadline, "the revocation never reached the cluster"
        _assert_denied(part)

        # Another identity reads A through the proxy and waits there: the proxy knows A's
        # end and that nothing is new, fresh. Not for alice: the cluster denied her.
        with _client(gateway, "admin") as reader:
            reader.send(ApiKey.FETCH, FETCH_VERSION, _fetch(topic, end, 8000))
            time.sleep(1.0)
            for _ in range(3):
                _assert_denied(_fetched(alice, topic, end, 500))
            # Records written now reach the reader, never alice.
            _produce(gateway.cluster, topic, b"after")
            woken = _read(reader)
            assert woken is not None and woken.records
            _assert_denied(_fetched(alice, topic, end, 500))
    assert gateway.proxy.alive()
