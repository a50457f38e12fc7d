"""wire.headers: golden bytes, header versions from the tables, correlation-id rewriting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.errors import LocalProtocolError, MalformedMessage, UnknownApiKey, UnsupportedVersion
from wire.headers import (
    RequestHeader,
    ResponseHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
    peek_request_header,
    peek_response_correlation_id,
    replace_request_correlation_id,
    replace_response_correlation_id,
    request_header_version,
    response_header_version,
    set_request_correlation_id,
    set_response_correlation_id,
)

# (header, header version, bytes), written from RequestHeader.json by hand.
REQUEST_GOLDEN = [
    # Metadata v1 (header v1): key 3, version 1, correlation 7, client id "ab".
    (RequestHeader(api_key=3, api_version=1, correlation_id=7, client_id="ab"), 1,
     b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x02ab"),
    # Null client id.
    (RequestHeader(api_key=0, api_version=3, correlation_id=-1, client_id=None), 1,
     b"\x00\x00\x00\x03\xff\xff\xff\xff\xff\xff"),
    # Fetch v12 (header v2): the client id keeps its INT16 length, then a tag buffer.
    (RequestHeader(api_key=1, api_version=12, correlation_id=1, client_id="c"), 2,
     b"\x00\x01\x00\x0c\x00\x00\x00\x01\x00\x01c\x00"),
    # Header v2 with one unknown tag.
    (RequestHeader(api_key=1, api_version=12, correlation_id=1, client_id="",
                   raw_tagged_fields=((3, b"zz"),)), 2,
     b"\x00\x01\x00\x0c\x00\x00\x00\x01\x00\x00\x01\x03\x02zz"),
]  # fmt: skip


@pytest.mark.parametrize(("header", "version", "data"), REQUEST_GOLDEN)
def test_request_header_golden(header: RequestHeader, version: int, data: bytes) -> None:
    assert request_header_version(header.api_key, header.api_version) == version
    assert encode_request_header(header) == data
    body = b"BODY"
    assert parse_request_header(data + body) == (header, len(data))
    parsed, offset = parse_request_header(memoryview(data + body))
    assert parsed == header and offset == len(data)


def test_response_headers() -> None:
    assert encode_response_header(ResponseHeader(correlation_id=5), 0) == b"\0\0\0\x05"
    assert encode_response_header(ResponseHeader(correlation_id=5), 1) == b"\0\0\0\x05\0"
    assert parse_response_header(b"\0\0\0\x05body", 0) == (ResponseHeader(correlation_id=5), 4)
    header = ResponseHeader(correlation_id=5, raw_tagged_fields=((0, b"x"),))
    data = encode_response_header(header, 1)
    assert parse_response_header(data + b"body", 1) == (header, len(data))


@pytest.mark.parametrize(
    ("api_key", "version", "request_v", "response_v"),
    [
        (0, 8, 1, 0),  # Produce: flexible from v9
        (0, 9, 2, 1),
        (1, 11, 1, 0),  # Fetch: flexible from v12
        (1, 12, 2, 1),
        (3, 9, 2, 1),  # Metadata
        (18, 2, 1, 0),  # ApiVersions v2
        (18, 3, 2, 0),  # ApiVersions v3+: flexible body, but response header v0 (KIP-511)
        (18, 4, 2, 0),
        (60, 0, 2, 1),  # DescribeCluster is flexible from v0
        (17, 1, 1, 0),  # SaslHandshake never became flexible
        (0, 2, 1, 0),  # removed in Kafka 4, but its header is still known
        (1, 40, 2, 1),  # newer than the tables: flexible versions stay flexible
    ],
)
def test_header_versions_come_from_the_tables(
    api_key: int, version: int, request_v: int, response_v: int
) -> None:
    assert request_header_version(api_key, version) == request_v
    assert response_header_version(api_key, version) == response_v


def test_unknown_api_keys_and_negative_versions() -> None:
    with pytest.raises(UnknownApiKey):
        request_header_version(7, 0)  # ControlledShutdown: gone from Kafka 4's tables
    with pytest.raises(UnknownApiKey):
        parse_request_header(b"\x7f\xff\x00\x00\x00\x00\x00\x01\x00\x00")
    with pytest.raises(UnsupportedVersion):
        response_header_version(0, -1)
    # peek needs no table, and an explicit header version parses any API.
    frame = b"\x7f\xff\x00\x05\x00\x00\x00\x09\x00\x01x"
    assert peek_request_header(frame) == (0x7FFF, 5, 9)
    header, offset = parse_request_header(frame, header_version=1)
    assert (header.client_id, offset) == ("x", 11)


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x03\x00\x01\x00\x00",  # shorter than 8 bytes
        b"\x00\x03\x00\x01\x00\x00\x00\x07\x00",  # half a client id length
        b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x05ab",  # client id past the end
        b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x01\xff",  # client id not UTF-8
        b"\x00\x01\x00\x0c\x00\x00\x00\x01\x00\x00",  # v2 without its tag buffer
        b"\x00\x01\x00\x0c\x00\x00\x00\x01\x00\x00\x01\x03\x09zz",  # tag past the end
    ],
)
def test_malformed_request_headers(frame: bytes) -> None:
    with pytest.raises(MalformedMessage):
        parse_request_header(frame)


def test_malformed_response_headers() -> None:
    with pytest.raises(MalformedMessage):
        parse_response_header(b"\0\0\0", 0)
    with pytest.raises(MalformedMessage):
        parse_response_header(b"\0\0\0\x01", 1)


def test_encode_errors() -> None:
    with pytest.raises(LocalProtocolError):
        encode_request_header(RequestHeader(api_key=0, api_version=3, correlation_id=1 << 31))
    with pytest.raises(LocalProtocolError):
        encode_response_header(ResponseHeader(correlation_id=1 << 31), 0)


def test_correlation_id_rewrites_touch_only_their_four_bytes() -> None:
    request = (
        encode_request_header(
            RequestHeader(api_key=1, api_version=12, correlation_id=1, client_id="c")
        )
        + b"body" * 100
    )
    replaced = replace_request_correlation_id(memoryview(request), 0x01020304)
    assert replaced == request[:4] + b"\x01\x02\x03\x04" + request[8:]
    assert peek_request_header(replaced)[2] == 0x01020304

    writable = bytearray(request)
    view = memoryview(writable)
    set_request_correlation_id(view, -5)
    assert peek_request_header(writable)[2] == -5
    assert writable[8:] == request[8:] and writable[:4] == request[:4]

    response = b"\0\0\0\x07" + b"rest"
    assert replace_response_correlation_id(response, 9) == b"\0\0\0\x09rest"
    buf = bytearray(response)
    set_response_correlation_id(buf, 10)
    assert peek_response_correlation_id(buf) == 10 and buf[4:] == b"rest"


def test_correlation_id_rewrite_errors() -> None:
    with pytest.raises(LocalProtocolError):
        set_request_correlation_id(memoryview(b"\0" * 12), 1)  # read-only
    with pytest.raises(MalformedMessage):
        replace_request_correlation_id(b"\0" * 7, 1)
    with pytest.raises(MalformedMessage):
        set_response_correlation_id(bytearray(3), 1)
    with pytest.raises(LocalProtocolError):
        replace_response_correlation_id(b"\0" * 4, 1 << 31)


@given(
    api_key=st.sampled_from([0, 1, 2, 3, 10, 18, 60]),
    api_version=st.integers(0, 20),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.one_of(st.none(), st.text(max_size=40)),
    raw=st.lists(st.tuples(st.integers(0, 300), st.binary(max_size=5)), unique_by=lambda t: t[0]),
)
def test_request_header_round_trip(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    raw: list[tuple[int, bytes]],
) -> None:
    flexible = request_header_version(api_key, api_version) == 2
    header = RequestHeader(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
        raw_tagged_fields=tuple(sorted(raw)) if flexible else (),
    )
    data = encode_request_header(header)
    assert parse_request_header(data) == (header, len(data))
