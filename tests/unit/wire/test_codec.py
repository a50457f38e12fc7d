"""wire.codec: round trips, byte fidelity, agreement with kafka-python and kio, and errors.

Every supported (message, version) is exercised against the independent codecs that know
it: kafka-python 3.0.12 (its own compiled codec over its copy of the JSON schemas) and kio
0.6.5 (independently generated classes, Rust decoder). Each direction is checked: wire
encodes and the other library decodes to the same field values, and the other library
encodes to the very bytes wire produces (so wire decodes them back to the same message).
Versions neither library knows are checked against bytes Kafka itself wrote
(test_kafka_bytes.py); test_every_version_has_an_independent_check proves none is left out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.wire import bridges
from tests.unit.wire.kafka_bytes import KAFKA_SAMPLES
from tests.unit.wire.strategies import ALL_VERSIONS, message, message_and_version
from wire import codec
from wire._struct import Message, Struct
from wire.errors import LocalProtocolError, MalformedMessage, UnknownApiKey, UnsupportedVersion
from wire.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from wire.messages import api_versions_response as av
from wire.messages import fetch_request as freq
from wire.messages import fetch_response as fr
from wire.messages import metadata_request as mreq
from wire.messages import metadata_response as mr
from wire.messages import produce_request as preq
from wire.messages import produce_response as pr


def _examples(n: int) -> settings:
    """n examples; big nested messages are slow to generate, which is fine here."""
    return settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _strip_raw_tags(value: Any) -> Any:
    """The same message without raw tagged fields (other libraries drop or reject them)."""
    if isinstance(value, list):
        return [_strip_raw_tags(v) for v in value]
    if isinstance(value, Struct):
        changes = {
            f.name: _strip_raw_tags(getattr(value, f.name))
            for f in dataclasses.fields(value)  # type: ignore[arg-type]
            if f.name != "raw_tagged_fields"
        }
        return dataclasses.replace(value, raw_tagged_fields=(), **changes)  # type: ignore[type-var]
    return value


# --------------------------------------------------------------------- every version


@pytest.mark.parametrize(
    ("cls", "version"), ALL_VERSIONS, ids=[f"{c.__name__}-v{v}" for c, v in ALL_VERSIONS]
)
def test_every_version_against_kafka_python_and_kio(cls: type[Message], version: int) -> None:
    @_examples(12)
    @given(message(cls, version, override=bridges.kio_safe))
    def check(msg: Message) -> None:
        body = codec.encode(msg, version)
        decoded = codec.decode(cls, body, version)
        assert decoded == msg
        assert codec.encode(decoded, version) == body  # byte fidelity, raw tags included

        plain = _strip_raw_tags(msg)
        body = codec.encode(plain, version)
        if bridges.kafka_python_knows(cls, version):
            assert bridges.kafka_python_decode(cls, body, version) == plain
            assert bridges.kafka_python_encode(plain, version) == body
        if bridges.kio_knows(cls, version):
            assert bridges.kio_decode(cls, body, version) == plain
            assert bridges.kio_encode(plain, version) == body

    check()


def test_every_version_has_an_independent_check() -> None:
    """Each (message, version) wire decodes is checked against kafka-python, kio, or bytes
    captured from Kafka (tests/unit/wire/kafka_bytes.json)."""
    captured = {(sample.message, sample.version) for sample in KAFKA_SAMPLES}
    unchecked = [
        f"{cls.__name__} v{version}"
        for cls, version in ALL_VERSIONS
        if not bridges.kafka_python_knows(cls, version)
        and not bridges.kio_knows(cls, version)
        and (cls.__name__, version) not in captured
    ]
    assert unchecked == []


@_examples(400)
@given(message_and_version())
def test_round_trip_and_byte_fidelity(msg_version: tuple[Message, int]) -> None:
    """Unconstrained values (any int16 error code, any tag numbers): decode(encode(m)) == m
    and encode(decode(b)) == b."""
    msg, version = msg_version
    body = codec.encode(msg, version)
    decoded = codec.decode(type(msg), body, version)
    assert decoded == msg
    assert codec.encode(decoded, version) == body
    assert b"".join(codec.encode_parts(decoded, version)) == body


# ---------------------------------------------------------------------- golden bytes

# (message, version, body): written from the protocol guide, not from any codec.
GOLDEN: list[tuple[Message, int, bytes]] = [
    # MetadataRequest v0: topics ["t"] (INT32 count, INT16 string).
    (MetadataRequest(topics=[mreq.MetadataRequestTopic(name="t")]), 0, b"\0\0\0\x01\0\x01t"),
    # v1: null topics = all topics.
    (MetadataRequest(topics=None), 1, b"\xff\xff\xff\xff"),
    # v9 (flexible): compact array of 1, compact string, tag buffers, three booleans
    # after it (v9: allow auto creation, include cluster ops, include topic ops).
    (
        MetadataRequest(topics=[mreq.MetadataRequestTopic(name="t")]),
        9,
        b"\x02\x02t\x00\x01\x00\x00\x00",
    ),
    # ApiVersionsRequest v3: client software name/version as compact strings.
    (
        ApiVersionsRequest(client_software_name="a", client_software_version="1"),
        3,
        b"\x02a\x021\x00",
    ),
    # ApiVersionsResponse v0: error 35, one api key range.
    (
        ApiVersionsResponse(
            error_code=35, api_keys=[av.ApiVersion(api_key=18, min_version=0, max_version=3)]
        ),
        0,
        b"\x00\x23\x00\x00\x00\x01\x00\x12\x00\x00\x00\x03",
    ),
    # ApiVersionsResponse v3 with the FinalizedFeaturesEpoch tag (1) = 5.
    (
        ApiVersionsResponse(finalized_features_epoch=5),
        3,
        b"\x00\x00\x01\x00\x00\x00\x00" + b"\x01\x01\x08" + (5).to_bytes(8, "big"),
    ),
    # ProduceRequest v3: null transactional id, acks -1, timeout 1000, t/0 -> b"xyz".
    (
        ProduceRequest(
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                preq.TopicProduceData(
                    name="t", partition_data=[preq.PartitionProduceData(index=0, records=b"xyz")]
                )
            ],
        ),
        3,
        b"\xff\xff\xff\xff\x00\x00\x03\xe8\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01"
        b"\x00\x00\x00\x00\x00\x00\x00\x03xyz",
    ),
]


@pytest.mark.parametrize(("msg", "version", "body"), GOLDEN)
def test_golden_bytes(msg: Message, version: int, body: bytes) -> None:
    assert codec.encode(msg, version) == body
    assert codec.decode(type(msg), body, version) == msg


def test_unknown_tags_with_multibyte_varints_survive() -> None:
    raw = ((5, b"a"), (300, b"b" * 200))
    msg = ApiVersionsRequest(client_software_name="x", raw_tagged_fields=raw)
    body = codec.encode(msg, 3)
    # count 2 | tag 5, size 1, "a" | tag 300 = ac 02, size 200 = c8 01, ...
    assert body.endswith(b"\x02\x05\x01a\xac\x02\xc8\x01" + b"b" * 200)
    assert codec.decode(ApiVersionsRequest, body, 3).raw_tagged_fields == raw


def test_a_known_tag_carrying_its_default_is_kept_byte_for_byte() -> None:
    # Java would never write FinalizedFeaturesEpoch = -1 (the default), but a peer may.
    body = b"\x00\x00\x01\x00\x00\x00\x00" + b"\x01\x01\x08" + (-1).to_bytes(8, "big", signed=True)
    msg = codec.decode(ApiVersionsResponse, body, 3)
    assert msg.finalized_features_epoch == -1
    assert codec.encode(msg, 3) == body
    # Setting the field replaces the kept bytes instead of duplicating the tag.
    msg.finalized_features_epoch = 9
    assert codec.decode(ApiVersionsResponse, codec.encode(msg, 3), 3).finalized_features_epoch == 9
    assert codec.encode(msg, 3).count(b"\x01\x01\x08") == 1


# ------------------------------------------------------------------- proxy use cases


def test_kip951_fields_of_produce_and_fetch_responses_can_be_rewritten() -> None:
    produce = ProduceResponse(
        responses=[
            pr.TopicProduceResponse(
                name="t",
                partition_responses=[
                    pr.PartitionProduceResponse(
                        index=0,
                        error_code=6,
                        current_leader=pr.LeaderIdAndEpoch(leader_id=2, leader_epoch=7),
                    )
                ],
            )
        ],
        node_endpoints=[pr.NodeEndpoint(node_id=2, host="kafka-2", port=9092, rack="a")],
    )
    decoded = codec.decode(ProduceResponse, codec.encode(produce, 10), 10)
    assert decoded.responses[0].partition_responses[0].current_leader.leader_id == 2
    decoded.node_endpoints[0].host, decoded.node_endpoints[0].port = "proxy", 19092
    again = codec.decode(ProduceResponse, codec.encode(decoded, 10), 10)
    assert (again.node_endpoints[0].host, again.node_endpoints[0].port) == ("proxy", 19092)

    fetch = FetchResponse(
        node_endpoints=[fr.NodeEndpoint(node_id=3, host="kafka-3", port=9092)],
        responses=[
            fr.FetchableTopicResponse(
                topic_id=uuid.UUID(int=7),
                partitions=[
                    fr.PartitionData(
                        partition_index=1,
                        current_leader=fr.LeaderIdAndEpoch(leader_id=3, leader_epoch=1),
                        records=None,
                    )
                ],
            )
        ],
    )
    decoded_fetch = codec.decode(FetchResponse, codec.encode(fetch, 16), 16)
    assert decoded_fetch == fetch


def test_fetch_request_session_forgotten_topics_and_rack() -> None:
    request = FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        isolation_level=1,
        session_id=42,
        session_epoch=3,
        topics=[
            freq.FetchTopic(
                topic_id=uuid.UUID(int=1),
                partitions=[freq.FetchPartition(partition=0, fetch_offset=10)],
            )
        ],
        forgotten_topics_data=[freq.ForgottenTopic(topic_id=uuid.UUID(int=2), partitions=[4])],
        rack_id="rack-a",
    )
    decoded = codec.decode_request(1, 13, codec.encode(request, 13))
    assert decoded == request


def test_records_decode_as_views_of_the_input_and_encode_uncopied() -> None:
    records = bytes(range(256)) * 64  # 16 KiB: above the pass-through threshold
    request = ProduceRequest(
        acks=1,
        topic_data=[
            preq.TopicProduceData(
                name="t", partition_data=[preq.PartitionProduceData(index=0, records=records)]
            )
        ],
    )
    body = codec.encode(request, 9)
    decoded = codec.decode(ProduceRequest, body, 9)
    view = decoded.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview)
    assert view.obj is body  # zero copy
    parts = codec.encode_parts(decoded, 9)
    assert any(p is view for p in parts)  # passed through, not copied into a buffer
    assert b"".join(parts) == body


def test_metadata_response_brokers_can_be_rewritten() -> None:
    response = MetadataResponse(
        brokers=[mr.MetadataResponseBroker(node_id=111, host="127.0.0.1", port=9092)],
        topics=[mr.MetadataResponseTopic(name="t", partitions=[mr.MetadataResponsePartition()])],
    )
    for version in range(MetadataResponse.VERSIONS[0], MetadataResponse.VERSIONS[1] + 1):
        decoded = codec.decode_response(3, version, codec.encode(response, version))
        decoded.brokers[0].host = "proxy.local"
        assert codec.decode_response(3, version, codec.encode(decoded, version)).brokers == [
            mr.MetadataResponseBroker(node_id=111, host="proxy.local", port=9092)
        ]


def test_api_versions_response_falls_back_to_v0_like_the_java_client() -> None:
    v0_body = codec.encode(ApiVersionsResponse(error_code=35, api_keys=[]), 0)
    with pytest.raises(MalformedMessage):
        codec.decode(ApiVersionsResponse, v0_body, 3)
    msg, used = codec.decode_api_versions_response(v0_body, 3)
    assert (msg.error_code, used) == (35, 0)
    assert codec.decode_api_versions_response(codec.encode(msg, 3), 3)[1] == 3


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"\0\0\0\x01\0\x05ab", "string runs past the end"),
        (b"\0\0\0\x01\0\x01t\0", "trailing byte"),
        (b"\x7f\xff\xff\xff", "count larger than the bytes left"),
        (b"\0\0\0", "truncated count"),
        (b"\0\0\0\x01\xff\xff", "null topic name in v0"),
        (b"\0\0\0\x01\0\x02\xc3\x28", "invalid UTF-8"),
    ],
)
def test_malformed_v0_metadata_requests(body: bytes, why: str) -> None:
    with pytest.raises(MalformedMessage):
        codec.decode(MetadataRequest, body, 0)


@pytest.mark.parametrize(
    "body",
    [
        b"\x02\x02t\x00\x01\x00\x00",  # missing last boolean
        b"\x02\x02t\x00\x01\x00\x00\x00\x00",  # trailing byte
        b"\x02\x02t\x00\x01\x00\x00\x02\x05\x01a",  # 2 tags announced, 1 present
        b"\x02\x02t\x00\x01\x00\x00\x01\x05\x09a",  # tag longer than the message
        b"\xff\xff\xff\xff\xff\x01",  # varint longer than 5 bytes
        b"\x80\x80\x80\x80\x08",  # varint beyond int32
    ],
)
def test_malformed_flexible_metadata_requests(body: bytes) -> None:
    with pytest.raises(MalformedMessage):
        codec.decode(MetadataRequest, body, 9)


def test_versions_outside_the_schema() -> None:
    with pytest.raises(UnsupportedVersion):
        codec.decode(ProduceRequest, b"", 2)
    with pytest.raises(UnsupportedVersion):
        codec.decode_request(1, 99, b"")
    with pytest.raises(UnsupportedVersion):
        codec.decode_request(11, 0, b"")  # JoinGroup: known, forwarded, not decoded
    with pytest.raises(UnknownApiKey):
        codec.decode_request(999, 0, b"")
    with pytest.raises(LocalProtocolError):
        codec.encode(ProduceRequest(), 2)


@pytest.mark.parametrize(
    ("msg", "version", "why"),
    [
        (MetadataRequest(topics=None), 0, "null topics before v1"),
        (MetadataRequest(allow_auto_topic_creation=False), 3, "non-ignorable field v3 lacks"),
        (ProduceRequest(acks=1 << 15), 3, "int16 overflow"),
        (ProduceRequest(topic_data=[preq.TopicProduceData(name=None)]), 3, "null topic name"),  # type: ignore[arg-type]
        (MetadataRequest(topics=[mreq.MetadataRequestTopic(name="x" * 40000)]), 0, "too long"),
        (FetchRequest(topics=[freq.FetchTopic(topic_id="x")]), 13, "not a UUID"),  # type: ignore[arg-type]
        (ApiVersionsRequest(raw_tagged_fields=((1, b"x"),)), 2, "tags before flexible v3"),
    ],
)
def test_encode_refuses_what_the_version_cannot_express(
    msg: Message, version: int, why: str
) -> None:
    with pytest.raises(LocalProtocolError):
        codec.encode(msg, version)


def test_ignorable_fields_are_dropped_silently() -> None:
    # MetadataResponseTopic.topic_id is ignorable; v9 has no topic ids.
    msg = MetadataResponse(topics=[mr.MetadataResponseTopic(name="t", topic_id=uuid.uuid4())])
    decoded = codec.decode(MetadataResponse, codec.encode(msg, 9), 9)
    assert decoded.topics[0].topic_id == uuid.UUID(int=0)


@given(st.binary(max_size=64))
def test_decode_raises_only_wire_errors_on_random_bodies(body: bytes) -> None:
    with contextlib.suppress(MalformedMessage):
        codec.decode(FetchRequest, body, 12)


def test_struct_error_is_translated() -> None:
    with pytest.raises(MalformedMessage) as info:
        codec.decode(ProduceRequest, b"\xff\xff\x00", 3)
    assert isinstance(info.value.__cause__, struct.error)


def test_precompile_compiles_every_version_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    codec.precompile(FetchResponse)

    def refuse(cls: type[Message], version: int) -> None:
        raise AssertionError(f"compiled {cls.__name__} v{version} on first use")

    monkeypatch.setattr(codec._compiler, "compile_decoder", refuse)
    monkeypatch.setattr(codec._compiler, "compile_encoder", refuse)
    lo, hi = FetchResponse.VERSIONS
    for version in range(lo, hi + 1):
        body = codec.encode(FetchResponse(), version)
        assert codec.decode(FetchResponse, body, version) == FetchResponse()
