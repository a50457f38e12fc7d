"""The tests' front's additions for passthrough tests (testbed/sasl_server.py, fetch_acl.py,
front_audit.py), driven in-process.

Several accounts, the session's principal (and Kafka's refusal to change it on
re-authentication), the ACL denial of Fetch answered with wire's FetchResponse, the Fetch
record-byte count, and the thread-safe audit. The SASL client side is scramp's own client, so
the server logic is checked against an independent implementation.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
import scramp

from testbed.fetch_acl import denied_fetch_answer, fetch_record_bytes
from testbed.front_audit import AuditEntry, FrontAudit
from testbed.sasl_server import CloseConnection, SaslPolicy, SaslSession
from wire.apis import ApiKey, response_header_version
from wire.codec import decode_response, encode
from wire.headers import (
    RequestHeader,
    ResponseHeader,
    encode_request_header,
    encode_response_header,
    parse_response_header,
)
from wire.messages import (
    FetchRequest,
    FetchResponse,
    Message,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from wire.messages.fetch_request import FetchPartition, FetchTopic
from wire.messages.fetch_response import FetchableTopicResponse, PartitionData

USERS = {"alice": "alice-secret", "bob": "bob-secret"}

Authenticate = Callable[[SaslSession, str, str], None]


def _body(api_key: int, version: int, message: Message, correlation_id: int = 7) -> bytes:
    head = encode_request_header(RequestHeader(api_key, version, correlation_id, "unit"))
    return head + encode(message, version)


def _answer(api_key: int, version: int, frame: bytes) -> Message:
    size = int.from_bytes(frame[:4], "big")
    assert size == len(frame) - 4
    _, start = parse_response_header(frame[4:], response_header_version(api_key, version))
    return decode_response(api_key, version, frame[4 + start :])


def _clock() -> float:
    return 0.0


def _authenticate_plain(session: SaslSession, user: str, password: str) -> None:
    session.handle(_body(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")))
    token = f"\0{user}\0{password}".encode()
    session.handle(_body(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token)))


def _authenticate_scram(session: SaslSession, user: str, password: str) -> None:
    mechanism = "SCRAM-SHA-512"
    session.handle(_body(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism)))
    client = scramp.ScramClient([mechanism], user, password)
    first = SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode())
    answer = _answer(ApiKey.SASL_AUTHENTICATE, 2, session.handle(_body(36, 2, first)))
    assert isinstance(answer, SaslAuthenticateResponse)
    assert answer.error_code == 0
    client.set_server_first(bytes(answer.auth_bytes).decode())
    final = SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode())
    answer = _answer(ApiKey.SASL_AUTHENTICATE, 2, session.handle(_body(36, 2, final)))
    assert isinstance(answer, SaslAuthenticateResponse)
    assert answer.error_code == 0
    client.set_server_final(bytes(answer.auth_bytes).decode())


@pytest.mark.parametrize("authenticate", [_authenticate_plain, _authenticate_scram])
@pytest.mark.parametrize("user", ["alice", "bob", "proxy"])
def test_every_account_logs_in_as_itself(authenticate: Authenticate, user: str) -> None:
    policy = SaslPolicy(users=USERS)
    session = SaslSession(policy, _clock)
    assert session.username is None
    authenticate(session, user, policy.accounts()[user])
    assert session.username == user
    assert session.authentications == 1
    session.check(ApiKey.METADATA)  # allowed now


@pytest.mark.parametrize("authenticate", [_authenticate_plain, _authenticate_scram])
@pytest.mark.parametrize(("user", "password"), [("alice", "bob-secret"), ("mallory", "x")])
def test_wrong_password_or_unknown_user_is_refused_and_closed(
    authenticate: Authenticate, user: str, password: str
) -> None:
    session = SaslSession(SaslPolicy(users=USERS), _clock)
    with pytest.raises(CloseConnection) as closed:
        authenticate(session, user, password)
    answer = _answer(ApiKey.SASL_AUTHENTICATE, 2, closed.value.answer)
    assert isinstance(answer, SaslAuthenticateResponse)
    assert answer.error_code == 58
    assert session.username is None
    assert not session.authenticated


def test_single_password_policy_still_works_as_before() -> None:
    session = SaslSession(SaslPolicy(password="only-one"), _clock)
    _authenticate_scram(session, "proxy", "only-one")
    assert session.username == "proxy"


def test_non_sasl_request_before_authentication_closes_but_api_versions_is_answered() -> None:
    session = SaslSession(SaslPolicy(users=USERS), _clock)
    session.check(ApiKey.API_VERSIONS)
    with pytest.raises(CloseConnection, match="before authentication"):
        session.check(ApiKey.METADATA)
    with pytest.raises(CloseConnection, match="before authentication"):
        session.check(ApiKey.FETCH)


def test_reauthentication_keeps_the_principal_and_counts() -> None:
    session = SaslSession(SaslPolicy(users=USERS), _clock)
    _authenticate_scram(session, "alice", "alice-secret")
    _authenticate_scram(session, "alice", "alice-secret")
    assert (session.username, session.authentications) == ("alice", 2)


def test_reauthentication_as_another_principal_is_refused() -> None:
    session = SaslSession(SaslPolicy(users=USERS), _clock)
    _authenticate_plain(session, "alice", "alice-secret")
    with pytest.raises(CloseConnection, match="re-authentication as bob") as closed:
        _authenticate_plain(session, "bob", "bob-secret")
    answer = _answer(ApiKey.SASL_AUTHENTICATE, 2, closed.value.answer)
    assert isinstance(answer, SaslAuthenticateResponse)
    assert answer.error_code == 58
    assert session.username == "alice"


def _fetch_request(version: int) -> FetchRequest:
    topic_id = uuid.uuid4()
    return FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic="t1" if version < 13 else "",
                topic_id=topic_id if version >= 13 else uuid.UUID(int=0),
                partitions=[
                    FetchPartition(partition=0, fetch_offset=3, partition_max_bytes=1 << 20),
                    FetchPartition(partition=2, fetch_offset=0, partition_max_bytes=1 << 20),
                ],
            ),
            FetchTopic(
                topic="t2" if version < 13 else "",
                topic_id=uuid.uuid4() if version >= 13 else uuid.UUID(int=0),
                partitions=[FetchPartition(partition=1, partition_max_bytes=1 << 20)],
            ),
        ],
    )


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16])
def test_denied_fetch_answers_topic_authorization_failed_for_every_partition(
    version: int,
) -> None:
    request = _fetch_request(version)
    frame = denied_fetch_answer(_body(ApiKey.FETCH, version, request, correlation_id=42))
    _, start = parse_response_header(frame[4:], response_header_version(ApiKey.FETCH, version))
    assert int.from_bytes(frame[4:8], "big") == 42
    answer = decode_response(ApiKey.FETCH, version, frame[4 + start :])
    assert isinstance(answer, FetchResponse)
    asked = [(t.topic, t.topic_id, p.partition) for t in request.topics for p in t.partitions]
    answered = [
        (t.topic, t.topic_id, p.partition_index) for t in answer.responses for p in t.partitions
    ]
    assert answered == asked
    for topic in answer.responses:
        for partition in topic.partitions:
            assert partition.error_code == 29
            assert partition.high_watermark == -1
            assert not partition.records
    assert fetch_record_bytes(version, frame[4:]) == 0


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_fetch_record_bytes_sums_every_partition(version: int) -> None:
    response = FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic="t",
                topic_id=uuid.uuid4() if version >= 13 else uuid.UUID(int=0),
                partitions=[
                    PartitionData(partition_index=0, high_watermark=9, records=b"x" * 70),
                    PartitionData(partition_index=1, high_watermark=0, records=None),
                    PartitionData(partition_index=2, high_watermark=4, records=b"y" * 5),
                ],
            )
        ]
    )
    head = encode_response_header(ResponseHeader(3), response_header_version(1, version))
    assert fetch_record_bytes(version, head + encode(response, version)) == 75


def test_audit_is_consistent_under_concurrent_writers_and_readers() -> None:
    audit = FrontAudit()
    numbers = [audit.open(f"127.0.0.1:{port}") for port in range(4)]
    session = SaslSession(SaslPolicy(users=USERS), _clock)
    _authenticate_plain(session, "alice", "alice-secret")
    snapshots: list[int] = []

    def write(number: int) -> None:
        for _ in range(500):
            audit.record(number, AuditEntry(ApiKey.FETCH, 11, "alice", record_bytes=2), session)

    def read() -> None:
        for _ in range(200):
            snapshots.append(sum(len(c.requests) for c in audit.connections()))

    threads = [threading.Thread(target=write, args=(n,)) for n in numbers]
    threads.append(threading.Thread(target=read))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    connections = audit.connections()
    assert [c.number for c in connections] == numbers
    assert all(len(c.requests) == 500 for c in connections)
    assert all(c.fetched_bytes() == 1000 for c in connections)
    assert [c.username for c in audit.by_user("alice")] == ["alice"] * 4
    assert snapshots == sorted(snapshots)  # readers never see a write undone
