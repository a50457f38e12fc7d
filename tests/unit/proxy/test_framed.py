"""proxy/framed.FrameReader: wire's FrameDecoder on a trio stream, prefix first, then the body."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from proxy.framed import FrameReader, PeerClosed
from wire.errors import FrameTooLarge
from wire.framing import frame


async def test_frames_of_any_size_come_whole_with_their_prefix() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    reader = FrameReader(ours, 1000)
    await theirs.send_all(frame(b"") + frame(b"abc") + frame(b"x" * 999))
    assert await reader.next_frame() == frame(b"")
    assert await reader.next_size() == 3
    assert await reader.finish() == frame(b"abc")
    assert await reader.next_frame() == frame(b"x" * 999)
    await theirs.aclose()
    assert await reader.next_size() is None


async def test_the_size_is_known_before_any_body_byte_is_read() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    reader = FrameReader(ours, 1000)
    await theirs.send_all(frame(b"body"))
    assert await reader.next_size() == 4
    assert await ours.receive_some(100) == b"body"  # the reader left the body in the stream


@pytest.mark.parametrize(("sent", "received"), [(2, 2), (6, 2)])
async def test_an_end_inside_a_piece_says_how_far_it_got(sent: int, received: int) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    reader = FrameReader(ours, 1000)
    await theirs.send_all(frame(b"abcd")[:sent])
    await theirs.aclose()
    with pytest.raises(PeerClosed) as closed:
        await reader.next_frame()
    assert closed.value.received == received


async def test_a_size_above_the_limit_is_refused_before_the_body() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    await theirs.send_all(frame(b"x" * 11))
    with pytest.raises(FrameTooLarge):
        await FrameReader(ours, 10).next_size()
