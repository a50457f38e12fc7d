"""Kafka 4 APIs through the rewriter: KIP-932 node endpoints, FindCoordinator of every key
type, and the ApiVersions policy (which APIs are kept, clamped, refused).

Responses are encoded by kio (a codec independent of wire/), passed through
``rewrite_response`` as a broker's response frame would be, and decoded by kio again. The
ApiVersions policy is checked on what a Kafka 4.4 broker really answered
(tests/unit/wire/kafka_bytes.json).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

from proxy.address import Address
from proxy.routing.rewrite import LOOKED_INSIDE, RequestPlan, plan_request, rewrite_response
from tests.support.directory_double import PROXY_HOST, Directory
from tests.unit.wire.kafka_bytes import KAFKA_SAMPLES
from wire.apis import API_BY_KEY, ApiKey, response_header_version
from wire.errors import UnknownApiKey, UnsupportedVersion
from wire.headers import RequestHeader, encode_request_header

NOT_LEADER_OR_FOLLOWER = ErrorCode.not_leader_or_follower
UNSUPPORTED_VERSION = 35


def _kio(api_key: int, version: int, name: str) -> Any:
    return getattr(load_payload_module(api_key, version, EntityType.response), name)


def _encode(message: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(message))(out, message)
    return out.getvalue()


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    """A response frame body as a broker sends it: correlation id, header tags, body."""
    header = struct.pack(">i", 7)
    if response_header_version(api_key, version) >= 1:
        header += b"\x00"
    return header + body


def _plan(api_key: int, version: int, *, client_sasl: bool = False) -> RequestPlan:
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=7)
    return RequestPlan(header, True, True, client_sasl=client_sasl)


def _through_proxy(message: Any, directory: Directory) -> Any:
    """``message`` (a kio response) as a client of the proxy reads it."""
    api_key, version = int(message.__api_key__), int(message.__version__)
    frame = _frame(api_key, version, _encode(message))
    out = bytes(rewrite_response(_plan(api_key, version), frame, directory))
    assert out[:4] == frame[:4]
    decoded, size = entity_reader(type(message))(out[5:], 0)
    assert size == len(out) - 5
    return decoded


def _share_fetch(version: int, endpoints: tuple[tuple[int, str, int], ...]) -> Any:
    module = load_payload_module(ApiKey.SHARE_FETCH, version, EntityType.response)
    partition = module.PartitionData(
        partition_index=i32(0),
        error_code=NOT_LEADER_OR_FOLLOWER,
        acknowledge_error_code=i16(0),
        current_leader=module.LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(5)),
        records=b"",
        acquired_records=(
            module.AcquiredRecords(first_offset=i64(3), last_offset=i64(4), delivery_count=i16(1)),
        ),
    )
    return module.ShareFetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        acquisition_lock_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        responses=(
            module.ShareFetchableTopicResponse(topic_id=uuid.uuid4(), partitions=(partition,)),
        ),
        node_endpoints=tuple(
            module.NodeEndpoint(node_id=i32(n), host=host, port=i32(port), rack="r1")
            for n, host, port in endpoints
        ),
    )


def _share_acknowledge(version: int, endpoints: tuple[tuple[int, str, int], ...]) -> Any:
    module = load_payload_module(ApiKey.SHARE_ACKNOWLEDGE, version, EntityType.response)
    partition = module.PartitionData(
        partition_index=i32(0),
        error_code=NOT_LEADER_OR_FOLLOWER,
        current_leader=module.LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(5)),
    )
    since_v2 = {"acquisition_lock_timeout": i32Timedelta.parse(datetime.timedelta(seconds=30))}
    return module.ShareAcknowledgeResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        responses=(
            module.ShareAcknowledgeTopicResponse(topic_id=uuid.uuid4(), partitions=(partition,)),
        ),
        node_endpoints=tuple(
            module.NodeEndpoint(node_id=i32(n), host=host, port=i32(port), rack=None)
            for n, host, port in endpoints
        ),
        **(since_v2 if version >= 2 else {}),
    )


# ------------------------------------------------------------- KIP-932 node endpoints

_BROKERS = ((2, "kafka-2.internal", 9092), (3, "kafka-3.internal", 9093))


@pytest.mark.parametrize("build", [_share_fetch, _share_acknowledge], ids=["fetch", "ack"])
@pytest.mark.parametrize("version", [1, 2])
def test_share_node_endpoints_point_at_the_proxy(build: Any, version: int) -> None:
    directory = Directory()
    message = build(version, _BROKERS)
    out = _through_proxy(message, directory)
    assert [(e.node_id, e.host, e.port) for e in out.node_endpoints] == [
        (2, PROXY_HOST, 20002),
        (3, PROXY_HOST, 20003),
    ]
    assert directory.upstream == {n: Address(host, port) for n, host, port in _BROKERS}
    # Nothing but the addresses changed: the rest is what the broker sent.
    assert dataclasses.replace(out, node_endpoints=message.node_endpoints) == message


@pytest.mark.parametrize("build", [_share_fetch, _share_acknowledge], ids=["fetch", "ack"])
def test_share_answers_naming_no_broker_pass_through_as_the_same_bytes(build: Any) -> None:
    message = build(2, ())
    frame = _frame(int(message.__api_key__), 2, _encode(message))
    assert rewrite_response(_plan(int(message.__api_key__), 2), frame, Directory()) is frame


# ----------------------------------------------------- FindCoordinator, every key type


def test_find_coordinator_answers_for_groups_transactions_and_share_state() -> None:
    """One FindCoordinator v6 answer per key type, with the key as each type writes it
    (0: a group id, 1: a transactional id, 2: "group:topic id:partition", KIP-932)."""
    module = load_payload_module(ApiKey.FIND_COORDINATOR, 6, EntityType.response)
    keys = {0: "orders", 1: "txn-7", 2: "orders:J4AeazrAQ5iCplYFItuiOA:0"}
    for key_type, key in keys.items():
        node_id = 1 + key_type
        coordinator = module.Coordinator(
            key=key,
            node_id=i32(node_id),
            host=f"kafka-{node_id}.internal",
            port=i32(9092),
            error_code=ErrorCode.none,
            error_message=None,
        )
        message = module.FindCoordinatorResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), coordinators=(coordinator,)
        )
        (out,) = _through_proxy(message, Directory()).coordinators
        assert (out.key, out.node_id, out.host, out.port) == (
            key,
            node_id,
            PROXY_HOST,
            20000 + node_id,
        ), key_type


# ------------------------------------------------------------------ ApiVersions policy


def _kafka_4_4_answer() -> bytes:
    """The body a Kafka 4.4 broker sent a client for ApiVersions v5 (captured)."""
    return next(
        s.body
        for s in KAFKA_SAMPLES
        if s.message == "ApiVersionsResponse" and s.version == 5 and s.kafka_json["errorCode"] == 0
    )


def _advertised(body: bytes, version: int, *, client_sasl: bool) -> dict[int, tuple[int, int]]:
    frame = _frame(ApiKey.API_VERSIONS, version, body)
    plan = _plan(ApiKey.API_VERSIONS, version, client_sasl=client_sasl)
    out = bytes(rewrite_response(plan, frame, Directory()))
    kio_cls = _kio(ApiKey.API_VERSIONS, min(version, 4), "ApiVersionsResponse")
    answer, _ = entity_reader(kio_cls)(out[4:], 0)
    return {int(e.api_key): (int(e.min_version), int(e.max_version)) for e in answer.api_keys}


def _broker_ranges(body: bytes) -> dict[int, tuple[int, int]]:
    # Read with kio at v4: v5 adds nothing to the response body.
    answer, _ = entity_reader(_kio(ApiKey.API_VERSIONS, 4, "ApiVersionsResponse"))(body, 0)
    return {int(e.api_key): (int(e.min_version), int(e.max_version)) for e in answer.api_keys}


@pytest.mark.parametrize("client_sasl", [False, True], ids=["client_auth-none", "passthrough"])
def test_every_api_of_kafka_4_4_is_advertised_and_only_looked_inside_ones_clamped(
    client_sasl: bool,
) -> None:
    body = _kafka_4_4_answer()
    broker = _broker_ranges(body)
    ours = _advertised(body, 4, client_sasl=client_sasl)
    sasl = {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
    refused = set() if client_sasl else sasl
    assert set(ours) == set(broker) - refused  # nothing else dropped
    for api_key, (low, high) in broker.items():
        if api_key in refused:
            continue
        spec = API_BY_KEY[api_key]
        if api_key == ApiKey.SASL_HANDSHAKE:
            expected = (max(low, 1), high)  # v0's unframed tokens cannot pass
        elif api_key == ApiKey.PRODUCE:
            expected = (low, min(high, spec.max_version))  # KAFKA-18659: v0 stays
        elif api_key in LOOKED_INSIDE:
            expected = (max(low, spec.min_version), min(high, spec.max_version))
        else:
            expected = (low, high)
        assert ours[api_key] == expected, spec.name
    assert ours[ApiKey.PRODUCE][0] == 0  # what Kafka 4.4 advertises, kept


def test_looked_inside_ranges_wider_than_the_tables_are_clamped_and_unknown_keys_dropped() -> None:
    module = load_payload_module(ApiKey.API_VERSIONS, 3, EntityType.response)
    entries = {
        ApiKey.FETCH: (0, 99),  # looked inside: clamped to the tables
        ApiKey.SHARE_FETCH: (1, 9),  # looked inside: clamped to the tables
        ApiKey.LIST_OFFSETS: (0, 99),  # only forwarded: the cluster's range stays
        ApiKey.JOIN_GROUP: (0, 99),
        ApiKey.DESCRIBE_CLUSTER: (7, 9),  # looked inside, no version in common: dropped
        31999: (0, 1),  # not in the tables: dropped
    }
    message = module.ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=tuple(
            module.ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
            for k, (lo, hi) in entries.items()
        ),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
    )
    ours = _advertised(_encode(message), 3, client_sasl=False)
    fetch, share_fetch = API_BY_KEY[ApiKey.FETCH], API_BY_KEY[ApiKey.SHARE_FETCH]
    assert ours == {
        ApiKey.FETCH: (fetch.min_version, fetch.max_version),
        ApiKey.SHARE_FETCH: (share_fetch.min_version, share_fetch.max_version),
        ApiKey.LIST_OFFSETS: (0, 99),
        ApiKey.JOIN_GROUP: (0, 99),
    }


def test_a_brokers_v0_unsupported_version_answer_is_passed_on_as_v0() -> None:
    """A client asks ApiVersions v5 through the proxy of a broker that knows v0-v4 only (Kafka
    3.9): the broker answers a v0 body (KIP-511), which must reach the client as it is, so
    the client retries with v4."""
    body = next(
        s.body for s in KAFKA_SAMPLES if s.kafka_json.get("errorCode") == UNSUPPORTED_VERSION
    )
    frame = _frame(ApiKey.API_VERSIONS, 5, body)
    out = bytes(rewrite_response(_plan(ApiKey.API_VERSIONS, 5), frame, Directory()))
    answer, size = entity_reader(_kio(ApiKey.API_VERSIONS, 0, "ApiVersionsResponse"))(out[4:], 0)
    assert size == len(out) - 4
    assert answer.error_code == UNSUPPORTED_VERSION
    assert [(e.api_key, e.min_version, e.max_version) for e in answer.api_keys] == [(18, 0, 5)]


# ------------------------------------------------------------------- request planning


def _request(api_key: int, version: int, body: bytes = b"") -> bytes:
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=9, client_id="t")
    return encode_request_header(header) + body


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (ApiKey.SHARE_GROUP_HEARTBEAT, 1),
        (ApiKey.CONSUMER_GROUP_HEARTBEAT, 1),
        (ApiKey.STREAMS_GROUP_HEARTBEAT, 0),
        (ApiKey.CREATE_DELEGATION_TOKEN, 3),
        (ApiKey.PUSH_TELEMETRY, 0),
        (ApiKey.LIST_OFFSETS, 0),  # older than the tables, Kafka 3.9 serves it: forwarded
        (ApiKey.JOIN_GROUP, 99),  # newer than the tables: forwarded as bytes
    ],
)
def test_apis_the_proxy_does_not_look_inside_are_forwarded_at_any_version(
    api_key: int, version: int
) -> None:
    plan = plan_request(_request(api_key, version), Directory())
    assert isinstance(plan, RequestPlan)
    assert (plan.expects_response, plan.rewrite) == (True, False)


@pytest.mark.parametrize("api_key", [ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE])
def test_share_requests_are_forwarded_and_their_answers_rewritten(api_key: int) -> None:
    for version in (1, 2):
        plan = plan_request(_request(api_key, version), Directory())
        assert isinstance(plan, RequestPlan)
        assert plan.rewrite is True
    with pytest.raises(UnsupportedVersion):  # a version we could not read addresses in
        plan_request(_request(api_key, 3), Directory())


def test_an_api_key_newer_than_the_tables_is_refused() -> None:
    newest = max(API_BY_KEY)
    with pytest.raises(UnknownApiKey):
        plan_request(struct.pack(">hhih", newest + 1, 0, 9, -1), Directory())
