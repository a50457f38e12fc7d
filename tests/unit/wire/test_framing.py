"""wire.framing: size checks, the incremental decoder, and the end-to-end chunking property."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.wire.strategies import message_and_version
from wire import codec
from wire._struct import Message
from wire.errors import (
    FrameTooLarge,
    LocalProtocolError,
    LooksLikeTLS,
    NegativeFrameSize,
    TruncatedFrame,
)
from wire.framing import (
    CLOSED,
    NEED_DATA,
    FrameDecoder,
    frame,
    read_frame_size,
    size_prefix,
)
from wire.headers import (
    RequestHeader,
    ResponseHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
    response_header_version,
)

MAX = 1 << 20


def drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while True:
        item = decoder.next_frame()
        if item is NEED_DATA or item is CLOSED:
            return frames
        assert isinstance(item, memoryview)
        frames.append(bytes(item))


# ---------------------------------------------------------------------- size prefix


def test_read_frame_size_accepts_sizes_up_to_the_limit() -> None:
    assert read_frame_size(b"\0\0\0\0", MAX) == 0
    assert read_frame_size(size_prefix(MAX), MAX) == MAX
    assert read_frame_size(b"\0\0\0\x05extra", MAX) == 5


def test_negative_size() -> None:
    with pytest.raises(NegativeFrameSize):
        read_frame_size(b"\xff\xff\xff\xff", MAX)
    with pytest.raises(NegativeFrameSize):
        read_frame_size(b"\x80\0\0\0", MAX)


def test_too_large() -> None:
    with pytest.raises(FrameTooLarge) as info:
        read_frame_size(size_prefix(MAX + 1), MAX)
    assert (info.value.size_bytes, info.value.max_frame_bytes) == (MAX + 1, MAX)
    assert info.value.error_code == 10  # MESSAGE_TOO_LARGE
    assert type(info.value) is FrameTooLarge


@pytest.mark.parametrize(
    "hello",
    [
        bytes.fromhex("1603010200"),  # TLS 1.0 record, the classic 369296129 read
        bytes.fromhex("16030300f0"),  # TLS 1.2 record header
        bytes.fromhex("1603000010"),  # SSL 3.0
    ],
)
def test_tls_client_hello_is_recognised(hello: bytes) -> None:
    assert int.from_bytes(hello[:4], "big") >= 369_295_360
    with pytest.raises(LooksLikeTLS):
        read_frame_size(hello, 100 * MAX)


def test_tls_pattern_within_the_limit_is_a_size() -> None:
    # A limit above 369 MB makes the same bytes a legal (if huge) frame size.
    assert read_frame_size(bytes.fromhex("16030102"), 400_000_000) == 0x16030102


def test_http_is_named_in_the_message() -> None:
    with pytest.raises(FrameTooLarge, match="HTTP"):
        read_frame_size(b"GET / HTTP/1.1\r\n", MAX)


def test_short_header_is_caller_error() -> None:
    with pytest.raises(LocalProtocolError):
        read_frame_size(b"\0\0", MAX)


def test_frame_helpers() -> None:
    assert frame(b"abc") == b"\0\0\0\x03abc"
    assert frame(b"ab", memoryview(b"cd")) == b"\0\0\0\x04abcd"
    with pytest.raises(LocalProtocolError):
        size_prefix(1 << 31)


# ------------------------------------------------------------------------- decoder


def test_frames_in_one_chunk_are_views_of_it() -> None:
    decoder = FrameDecoder(MAX)
    data = frame(b"one") + frame(b"") + frame(b"three")
    decoder.receive_data(data)
    first = decoder.next_frame()
    assert isinstance(first, memoryview)
    assert first.obj is data and first.readonly  # zero copy
    assert [bytes(first), *drain(decoder)] == [b"one", b"", b"three"]
    assert decoder.buffered_bytes == 0


def test_a_frame_spanning_chunks_is_assembled_once_and_writable() -> None:
    decoder = FrameDecoder(MAX)
    payload = bytes(range(200))
    data = frame(payload)
    decoder.receive_data(data[:2])
    assert decoder.next_frame() is NEED_DATA
    assert decoder.pending_frame_size is None  # the prefix is not complete yet
    decoder.receive_data(data[2:50])
    assert decoder.next_frame() is NEED_DATA
    assert decoder.pending_frame_size == 200  # known before the body (KIP-72)
    decoder.receive_data(bytearray(data[50:]))  # a mutable buffer is copied on receipt
    got = decoder.next_frame()
    assert isinstance(got, memoryview) and not got.readonly
    assert bytes(got) == payload
    assert decoder.pending_frame_size is None


def test_size_is_checked_before_the_body_arrives() -> None:
    decoder = FrameDecoder(100)
    decoder.receive_data(size_prefix(101))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()
    with pytest.raises(LocalProtocolError):  # the decoder stays failed
        decoder.next_frame()


def test_tls_on_the_decoder() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(bytes.fromhex("16030102000100"))
    with pytest.raises(LooksLikeTLS):
        decoder.next_frame()


def test_clean_eof_between_frames() -> None:
    decoder = FrameDecoder(MAX)
    decoder.receive_data(frame(b"x"))
    decoder.receive_data(b"")
    assert drain(decoder) == [b"x"]
    assert decoder.next_frame() is CLOSED
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"more")


@pytest.mark.parametrize("cut", [1, 3, 4, 6])
def test_eof_inside_a_frame(cut: int) -> None:
    decoder = FrameDecoder(MAX)
    decoder.receive_data(frame(b"abcdef")[:cut])
    decoder.receive_data(b"")
    with pytest.raises(TruncatedFrame):
        decoder.next_frame()


def test_many_small_frames_in_a_large_buffer_cost_linear_time() -> None:
    payloads = [bytes([i % 251]) * (i % 17) for i in range(20_000)]
    decoder = FrameDecoder(MAX)
    decoder.receive_data(b"".join(frame(p) for p in payloads))
    assert drain(decoder) == payloads


def test_negative_limit_is_refused() -> None:
    with pytest.raises(LocalProtocolError):
        FrameDecoder(-1)


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(0, 3000), max_size=20),
)
def test_any_chunking_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    data = b"".join(frame(p) for p in payloads)
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    decoder = FrameDecoder(MAX)
    got: list[bytes] = []
    for lo, hi in itertools.pairwise(bounds):
        decoder.receive_data(data[lo:hi])
        got += drain(decoder)
    decoder.receive_data(b"")
    got += drain(decoder)
    assert got == payloads
    assert decoder.next_frame() is CLOSED


# ---------------------------------------------------- the end-to-end property (issue 2)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    messages=st.lists(message_and_version(), min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 5000), max_size=12),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
)
def test_random_messages_survive_encode_chunking_framing_and_decode(
    messages: list[tuple[Message, int]], cuts: list[int], correlation_id: int
) -> None:
    """Random messages -> header + body -> frames -> arbitrary chunks -> FrameDecoder ->
    header parse -> body decode gives back every message."""
    stream = bytearray()
    for msg, version in messages:
        api_key = type(msg).API_KEY
        if type(msg).KIND == "request":
            header = encode_request_header(
                RequestHeader(
                    api_key=api_key,
                    api_version=version,
                    correlation_id=correlation_id,
                    client_id="c",
                )
            )
        else:
            header = encode_response_header(
                ResponseHeader(correlation_id=correlation_id),
                response_header_version(api_key, version),
            )
        stream += frame(header, *codec.encode_parts(msg, version))
    data = bytes(stream)
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    decoder = FrameDecoder(MAX)
    frames: list[memoryview] = []
    for lo, hi in itertools.pairwise(bounds):
        decoder.receive_data(data[lo:hi])
        while isinstance(item := decoder.next_frame(), memoryview):
            frames.append(item)
    assert len(frames) == len(messages)
    for got, (msg, version) in zip(frames, messages, strict=True):
        api_key = type(msg).API_KEY
        if type(msg).KIND == "request":
            request_header, offset = parse_request_header(got)
            assert (request_header.api_key, request_header.api_version) == (api_key, version)
            assert request_header.correlation_id == correlation_id
        else:
            response_header, offset = parse_response_header(
                got, response_header_version(api_key, version)
            )
            assert response_header.correlation_id == correlation_id
        assert codec.decode(type(msg), got[offset:], version) == msg
