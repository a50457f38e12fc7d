"""proxy/framed.FrameReader: wire's FrameDecoder on a trio stream, prefix first, then the body."""

from __future__ import annotations

import math
import ssl

import pytest
import trio
import trio.testing

from proxy.primitives.framed import FrameReader, PeerClosed
from proxy.primitives.stream_deadlines import ReadTimeouts
from proxy.primitives.stream_writer import StreamWriter
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


async def _socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    left, right = trio.socket.socketpair()
    return trio.SocketStream(left), trio.SocketStream(right)


@pytest.mark.parametrize("read_ahead", [0, 7, 16 * 1024])
async def test_a_socket_is_read_straight_from_its_descriptor(read_ahead: int) -> None:
    ours, theirs = await _socket_pair()
    frames = [
        frame(b""),
        frame(b"abc"),
        frame(b"y" * 100_000),
        *(frame(b"z" * n) for n in range(40)),
    ]
    reader = FrameReader(ours, 200_000, read_ahead=read_ahead)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(theirs.send_all, b"".join(frames))
        for expected in frames:
            size = await reader.next_size()
            assert size == len(expected) - 4
            assert await reader.finish() == expected
    await theirs.aclose()
    assert await reader.next_size() is None


async def test_the_writer_waits_for_room_and_writes_everything() -> None:
    ours, theirs = await _socket_pair()
    data = bytes(range(256)) * 20_000  # more than the socket buffers hold
    received = bytearray()

    async def drain() -> None:
        while len(received) < len(data):
            await trio.sleep(0.001)
            received.extend(await theirs.receive_some(65536))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        await StreamWriter(ours).send_all(data)
    assert received == data


@pytest.mark.skipif(not hasattr(trio.socket, "TCP_NOTSENT_LOWAT"), reason="Linux/macOS only")
async def test_the_writer_lifts_trios_unsent_data_limit_on_tcp() -> None:
    # trio's SocketStream caps unsent data at 16 KiB; a writer that owns the socket's writes
    # gives the system's setting back (0), so one writev hands the kernel a whole answer.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    client = await trio.testing.open_stream_to_socket_listener(listeners[0])
    option = (trio.socket.IPPROTO_TCP, trio.socket.TCP_NOTSENT_LOWAT)
    assert client.socket.getsockopt(*option) == 16 * 1024
    StreamWriter(client)
    assert client.socket.getsockopt(*option) == 0
    await client.aclose()
    await listeners[0].aclose()


@pytest.mark.skipif(not hasattr(trio.socket, "TCP_NOTSENT_LOWAT"), reason="Linux/macOS only")
async def test_the_writer_lifts_the_limit_under_tls_too() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    client = await trio.testing.open_stream_to_socket_listener(listeners[0])
    option = (trio.socket.IPPROTO_TCP, trio.socket.TCP_NOTSENT_LOWAT)
    StreamWriter(trio.SSLStream(client, ssl.create_default_context(), server_hostname="x"))
    assert client.socket.getsockopt(*option) == 0
    await client.aclose()
    await listeners[0].aclose()


async def test_a_closed_socket_is_refused() -> None:
    ours, _theirs = await _socket_pair()
    await ours.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await StreamWriter(ours).send_all(b"x")
    with pytest.raises(trio.ClosedResourceError):
        await FrameReader(ours).next_size()


@pytest.mark.parametrize("sent", [b"", b"\x00\x00", b"\x00\x00\x00\x09abc"])
async def test_deadlines_are_armed_only_while_waiting(
    sent: bytes, autojump_clock: trio.testing.MockClock
) -> None:
    """Idle deadline while waiting for a prefix, frame deadline while waiting for a body;
    infinite otherwise."""
    ours, theirs = await _socket_pair()
    scope = trio.CancelScope()
    timeouts = ReadTimeouts(scope, idle_s=10.0, frame_s=3.0)
    reader = FrameReader(ours, 1000, read_ahead=64, timeouts=timeouts)
    await theirs.send_all(frame(b"abc") + sent)
    started = trio.current_time()
    with scope:
        assert await reader.next_frame() == frame(b"abc")
        assert scope.deadline == math.inf
        await reader.next_frame()
    assert scope.cancelled_caught
    waited = trio.current_time() - started
    if len(sent) > 4:
        assert waited == pytest.approx(3.0)  # the frame deadline is exact
    else:
        assert 10.0 <= waited <= 11.25  # the idle one never early, at most 12.5 % late


async def test_an_idle_deadline_stands_between_waits_and_a_frame_deadline_does_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scope = trio.CancelScope()
    timeouts = ReadTimeouts(scope, idle_s=100.0, frame_s=3.0)
    timeouts.arm(timeouts.idle_s)
    standing = scope.deadline
    assert 100.0 <= standing - trio.current_time() <= 112.5
    timeouts.piece_done()
    assert scope.deadline == standing  # not moved back to infinity
    await trio.sleep(1.0)
    timeouts.arm(timeouts.idle_s)
    assert scope.deadline == standing  # still 100 s ahead or more: reused
    timeouts.piece_done()
    await trio.sleep(10.0)
    timeouts.arm(timeouts.idle_s)
    assert scope.deadline > standing  # too close now: moved
    timeouts.piece_done()
    timeouts.arm(timeouts.frame_s)
    assert scope.deadline - trio.current_time() == pytest.approx(3.0)
    timeouts.piece_done()
    assert scope.deadline == math.inf
    timeouts.arm(timeouts.idle_s)
    timeouts.stand_down()
    assert scope.deadline == math.inf and not timeouts.armed


async def test_a_reader_that_never_waits_still_yields_and_can_be_cancelled() -> None:
    ours, theirs = await _socket_pair()
    reader = FrameReader(ours, 1000, read_ahead=16 * 1024)
    await theirs.send_all(frame(b"x") * 1000)
    read = 0
    with trio.CancelScope() as scope:
        scope.cancel()
        while True:
            await reader.next_frame()
            read += 1
    assert 0 < read < 100  # cancelled at the first checkpoint, not after the whole backlog


@pytest.mark.parametrize("socket", [True, False])
async def test_deferred_writes_go_out_in_order_with_the_next_write(socket: bool) -> None:
    if socket:
        ours, theirs = await _socket_pair()
    else:
        ours, theirs = trio.testing.memory_stream_pair()  # type: ignore[assignment]
    writer = StreamWriter(ours)
    big = b"b" * 3_000_000  # more than the socket takes at once: a partial writev
    parts = [b"one", bytearray(b"two"), memoryview(b"three"), big, *([b"x"] * 600)]
    for part in parts:
        writer.defer(part)
    assert writer.pending_bytes == sum(len(p) for p in parts)
    expected = b"".join(parts) + b"last"
    received = bytearray()

    async def drain() -> None:
        while len(received) < len(expected):
            received.extend(await theirs.receive_some(1 << 20))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        await writer.send_all(b"last")
    assert received == expected
    assert writer.pending_bytes == 0 and writer.pending_count == 0


async def test_a_cancelled_flush_keeps_what_it_did_not_write() -> None:
    ours, theirs = await _socket_pair()
    writer = StreamWriter(ours)
    data = bytes(range(256)) * 40_000
    writer.defer(data)
    with trio.move_on_after(0.05):
        await writer.flush()  # nobody reads: the socket fills up
    assert 0 < writer.pending_bytes < len(data)
    received = bytearray()

    async def drain() -> None:
        while len(received) < len(data):
            received.extend(await theirs.receive_some(1 << 20))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        await writer.flush()
    assert received == data


async def test_a_reader_writes_its_partners_deferred_data_before_it_waits() -> None:
    """The request pump defers a request while the next one is in hand; once the reader must
    wait for the client, the deferred requests must already be upstream."""
    client, client_peer = await _socket_pair()
    upstream, upstream_peer = await _socket_pair()
    writer = StreamWriter(upstream)
    reader = FrameReader(client, 1000, read_ahead=1024, flush=writer)
    await client_peer.send_all(frame(b"a") + frame(b"b"))
    assert await reader.next_frame() == frame(b"a")
    assert reader.frame_in_hand()
    writer.defer(frame(b"a"))
    assert await reader.next_frame() == frame(b"b")
    assert not reader.frame_in_hand()
    writer.defer(frame(b"b"))
    with trio.move_on_after(0.05):
        await reader.next_frame()  # waits for the client: writes first
    assert writer.pending_bytes == 0
    assert await upstream_peer.receive_some(100) == frame(b"a") + frame(b"b")


@pytest.mark.parametrize("socket", [True, False])
async def test_parts_are_written_in_order_after_what_was_deferred(socket: bool) -> None:
    if socket:
        ours, theirs = await _socket_pair()
    else:
        ours, theirs = trio.testing.memory_stream_pair()  # type: ignore[assignment]
    writer = StreamWriter(ours)
    writer.defer(b"first ")
    await writer.send_parts([b"size", bytearray(b" header "), memoryview(b"records")])
    assert await theirs.receive_some(100) == b"first size header records"
