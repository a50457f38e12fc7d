"""FrameDecoder's whole-frame mode: frames with their size prefix, received into one buffer."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.errors import FrameTooLarge, LocalProtocolError, TruncatedFrame
from wire.framing import CLOSED, NEED_DATA, FrameDecoder, frame

FRAMES = [frame(b"abc"), frame(b""), frame(b"x" * 300)]
STREAM = b"".join(FRAMES)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 64, len(STREAM)])
def test_any_chunking_gives_whole_frames_prefix_included(chunk: int) -> None:
    decoder = FrameDecoder(1000, whole_frames=True)
    got = []
    for start in range(0, len(STREAM), chunk):
        decoder.receive_data(STREAM[start : start + chunk])
        while isinstance(out := decoder.next_frame(), memoryview):
            got.append(bytes(out))
    decoder.receive_data(b"")
    assert decoder.next_frame() is CLOSED
    assert got == FRAMES


def test_the_body_can_be_received_into_the_frame_buffer() -> None:
    decoder = FrameDecoder(1000, whole_frames=True)
    data = frame(b"hello world")
    decoder.receive_data(data[:4])
    assert decoder.next_frame() is NEED_DATA
    assert decoder.pending_frame_size == 11
    buffer = decoder.frame_buffer()
    assert len(buffer) == 11
    buffer[:5] = b"hello"
    decoder.frame_filled(5)
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered_bytes == 5
    decoder.frame_buffer()[:6] = b" world"
    decoder.frame_filled(6)
    out = decoder.next_frame()
    assert isinstance(out, memoryview) and not out.readonly and bytes(out) == data


def test_misuse_and_bad_input_fail_as_in_the_default_mode() -> None:
    decoder = FrameDecoder(10, whole_frames=True)
    with pytest.raises(LocalProtocolError):
        decoder.frame_buffer()
    decoder.receive_data(frame(b"x" * 3)[:5])
    assert decoder.next_frame() is NEED_DATA
    with pytest.raises(LocalProtocolError):
        decoder.frame_filled(3)  # only 2 bytes are missing
    decoder.receive_data(b"")
    with pytest.raises(TruncatedFrame):
        decoder.next_frame()
    too_large = FrameDecoder(10, whole_frames=True)
    too_large.receive_data(frame(b"x" * 11))
    with pytest.raises(FrameTooLarge):
        too_large.next_frame()


def test_reading_a_size_commits_no_memory_to_the_body() -> None:
    """KIP-72: the caller reserves pool memory after the size and before the body, and may wait
    muted in between; a waiting connection must not already hold its frame's buffer."""
    size = 8 * 1024 * 1024
    decoder = FrameDecoder(size, whole_frames=True)
    tracemalloc.start()
    try:
        decoder.receive_data(frame(b"")[:0] + size.to_bytes(4, "big"))
        assert decoder.next_frame() is NEED_DATA
        assert decoder.pending_frame_size == size
        held_bytes, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held_bytes < 64 * 1024
    buffer = decoder.frame_buffer()  # the body is asked for: now the frame exists
    assert len(buffer) == size
    buffer[:] = b"z" * size
    decoder.frame_filled(size)
    out = decoder.next_frame()
    assert isinstance(out, memoryview) and bytes(out[:5]) == size.to_bytes(4, "big") + b"z"


def test_a_read_ahead_past_a_prefix_commits_no_memory_before_the_body_is_asked_for() -> None:
    """A reader that reads ahead hands over part of a large body with its prefix: the frame's
    buffer still waits for frame_buffer() (after the caller's pool reservation)."""
    size = 8 * 1024 * 1024
    decoder = FrameDecoder(size, whole_frames=True)
    tracemalloc.start()
    try:
        decoder.receive_data(size.to_bytes(4, "big") + b"a" * 100)
        assert decoder.next_frame() is NEED_DATA
        assert decoder.pending_frame_size == size
        assert decoder.buffered_bytes == 100
        held_bytes, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held_bytes < 64 * 1024
    buffer = decoder.frame_buffer()  # the 100 bytes in hand are placed first
    assert len(buffer) == size - 100
    buffer[:] = b"b" * len(buffer)
    decoder.frame_filled(len(buffer))
    out = decoder.next_frame()
    assert isinstance(out, memoryview) and bytes(out[4:105]) == b"a" * 100 + b"b"


@given(
    st.lists(st.binary(max_size=300), max_size=8),
    st.lists(st.integers(1, 700), min_size=1, max_size=20),
    st.randoms(use_true_random=False),
)
def test_frames_come_out_whole_however_they_are_fed(
    bodies: list[bytes], chunks: list[int], rng: random.Random
) -> None:
    """Mixing receive_data of arbitrary pieces with receives straight into frame_buffer(), as a
    reader that reads ahead does, gives every frame once, whole, in order."""
    stream = b"".join(frame(body) for body in bodies)
    decoder = FrameDecoder(1000, whole_frames=True)
    got, position, turn = [], 0, 0
    while position < len(stream):
        step = chunks[turn % len(chunks)]
        turn += 1
        if decoder.pending_frame_size is not None and rng.random() < 0.5:
            buffer = decoder.frame_buffer()
            taken = min(step, len(buffer), len(stream) - position)
            buffer[:taken] = stream[position : position + taken]
            decoder.frame_filled(taken)
        else:
            taken = min(step, len(stream) - position)
            decoder.receive_data(stream[position : position + taken])
        position += taken
        while isinstance(out := decoder.next_frame(), memoryview):
            got.append(bytes(out))
    assert got == [frame(body) for body in bodies]
    assert decoder.buffered_bytes == 0
