"""FrameDecoder's growing frames (``first_piece_bytes``): a large frame's buffer starts small
and doubles as its bytes arrive, so memory follows what was received (issue 29)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.errors import LocalProtocolError
from wire.framing import NEED_DATA, FrameDecoder, frame


def test_the_buffer_starts_at_the_first_piece_and_doubles_up_to_the_frame() -> None:
    decoder = FrameDecoder(1000, whole_frames=True, first_piece_bytes=64)
    data = frame(bytes(range(250)))
    decoder.receive_data(data[:4])
    assert decoder.next_frame() is NEED_DATA
    assert (decoder.pending_frame_size, decoder.capacity, decoder.next_capacity) == (250, 0, 64)
    capacities = []
    position = 4
    while decoder.missing_bytes:
        buffer = decoder.frame_buffer()
        if not len(buffer):
            del buffer  # (a view of the buffer would keep it from growing)
            decoder.grow_frame()
            continue
        capacities.append(decoder.capacity)
        buffer[:] = data[position : position + len(buffer)]
        position += len(buffer)
        decoder.frame_filled(len(buffer))
        del buffer
    assert capacities == [64, 128, 250]
    out = decoder.next_frame()
    assert isinstance(out, memoryview) and bytes(out) == data


def test_bytes_past_the_buffer_wait_in_the_decoder_and_move_in_when_it_grows() -> None:
    decoder = FrameDecoder(1000, whole_frames=True, first_piece_bytes=8)
    data = frame(b"0123456789abcdefghij") + frame(b"next")
    decoder.receive_data(data[:4])
    assert decoder.next_frame() is NEED_DATA
    assert len(decoder.frame_buffer()) == 8  # the buffer is made: 8 bytes of body
    decoder.receive_data(data[4:])  # the rest of this frame and the next one, at once
    assert decoder.missing_bytes == 0  # all in hand, but 12 bytes wait past the buffer
    assert decoder.next_frame() is NEED_DATA
    decoder.grow_frame()  # 16
    assert decoder.next_frame() is NEED_DATA
    decoder.grow_frame()  # 20: the whole frame
    with pytest.raises(LocalProtocolError):
        decoder.grow_frame()  # nothing left to grow
    first = decoder.next_frame()
    assert isinstance(first, memoryview) and bytes(first) == frame(b"0123456789abcdefghij")
    second = decoder.next_frame()  # small: complete in hand, made at once
    assert isinstance(second, memoryview) and bytes(second) == frame(b"next")


def test_small_frames_never_grow() -> None:
    decoder = FrameDecoder(1000, whole_frames=True, first_piece_bytes=64)
    decoder.receive_data(frame(b"x" * 64)[:4])
    assert decoder.next_frame() is NEED_DATA
    assert decoder.next_capacity == 64
    assert len(decoder.frame_buffer()) == 64


def test_a_first_piece_needs_whole_frames() -> None:
    with pytest.raises(LocalProtocolError):
        FrameDecoder(1000, first_piece_bytes=64)


@given(
    st.lists(st.binary(max_size=300), max_size=8),
    st.lists(st.integers(1, 700), min_size=1, max_size=20),
    st.integers(1, 100),
    st.randoms(use_true_random=False),
)
def test_growing_frames_come_out_whole_however_they_are_fed(
    bodies: list[bytes], chunks: list[int], first_piece: int, rng: random.Random
) -> None:
    """Receives into the buffer, receive_data of any piece and growth in any order give every
    frame once, whole, in order; the buffer never holds more than twice the body received
    plus the first piece."""
    stream = b"".join(frame(body) for body in bodies)
    decoder = FrameDecoder(1000, whole_frames=True, first_piece_bytes=first_piece)
    got, position, turn = [], 0, 0
    while position < len(stream) or decoder.pending_frame_size is not None:
        step = chunks[turn % len(chunks)]
        turn += 1
        size = decoder.pending_frame_size
        if size is not None and decoder.capacity:
            received = size - decoder.missing_bytes
            assert decoder.capacity <= max(first_piece, 2 * received)
        if size is not None and rng.random() < 0.5:
            buffer = decoder.frame_buffer()
            taken = min(step, len(buffer), len(stream) - position)
            buffer[:taken] = stream[position : position + taken]
            del buffer
            if taken:
                decoder.frame_filled(taken)
            elif decoder.capacity < size:  # the buffer is full, the frame is not
                decoder.grow_frame()
        elif position < len(stream):
            taken = min(step, len(stream) - position)
            decoder.receive_data(stream[position : position + taken])
        elif decoder.capacity < (size or 0):
            decoder.grow_frame()  # everything is in hand: only growth is left
            taken = 0
        else:
            taken = 0
        position += taken
        while isinstance(out := decoder.next_frame(), memoryview):
            got.append(bytes(out))
    assert got == [frame(body) for body in bodies]
    assert decoder.buffered_bytes == 0
