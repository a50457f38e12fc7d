# Strategy: the machinery every test-side TCP relay needs, written once. A relay listens,
# opens its own connection to an upstream per client connection, and pipes both directions
# while watching (or rewriting) the Kafka frames that pass (testbed/sasl_front.py's SecureFront
# is one). What they share lives here:
#
#   RelayThread  one background thread running its own `trio.run`, so synchronous tests
#                (kafka-python, subprocess fixtures) can use a relay without an event loop;
#                start() returns once clients can connect, stop() cancels and joins.
#                Errors are written by the relay thread and read by the test thread under
#                one threading.Lock.
#   relay()      one client connection: connect upstream, run the two directions until
#                either side closes (one cancel scope per connection), then close both.
#                Resets are ordinary; any other failure (a frame that does not decode, a
#                bug here) is recorded, so a relay bug cannot hide behind client retries.
#   map_frames   a direction forwarded frame by frame as a callback returns it.
"""A background-thread TCP relay for Kafka frames: lifecycle, connections and pipes."""

from __future__ import annotations

import abc
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable, Iterator

import trio

from wire.framing import CLOSED, NEED_DATA, FrameDecoder, size_prefix

__all__ = ["Pipe", "RelayThread", "map_frames"]

RECEIVE_BYTES = 65536
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0

#: One direction of a connection: (source, sink), returns when the source reaches EOF.
Pipe = Callable[[trio.SocketStream, trio.SocketStream], Awaitable[None]]


class RelayThread(abc.ABC):
    """Serves :meth:`_listen` in a background thread; subclasses say what to listen on.

    ``what`` names the relay in errors ("secure front"); ``thread_name`` names
    its thread.
    """

    def __init__(self, what: str, thread_name: str) -> None:
        self._what = what
        self._lock = threading.Lock()
        self._errors: list[str] = []
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._thread = threading.Thread(target=self._thread_main, name=thread_name, daemon=True)

    @property
    def errors(self) -> list[str]:
        """One line per connection dropped for a reason other than EOF or a reset."""
        with self._lock:
            return list(self._errors)

    def start(self) -> None:
        """Bind the listeners and start serving; returns once clients can connect."""
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            raise TimeoutError(f"{self._what} did not start within {START_TIMEOUT_S} s")
        if self._failure is not None:
            raise RuntimeError(f"{self._what} failed to start") from self._failure

    def stop(self) -> None:
        """Cancel every relay task and join the thread (idempotent)."""
        if self._token is not None and self._scope is not None and self._thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        if self._thread.ident is not None:
            self._thread.join(STOP_TIMEOUT_S)
            if self._thread.is_alive():
                raise RuntimeError(f"{self._what} thread still running after {STOP_TIMEOUT_S} s")

    def _record_error(self, line: str) -> None:
        with self._lock:
            self._errors.append(line)

    @abc.abstractmethod
    async def _listen(self, nursery: trio.Nursery) -> None:
        """Bind the listeners and start serving them in ``nursery``."""

    async def _relay(
        self,
        client: trio.SocketStream,
        upstream_address: tuple[str, int],
        requests: Pipe,
        responses: Pipe,
        *,
        where: str = "",
        unreachable_is_error: bool = True,
    ) -> None:
        """Pipe ``client`` <-> a new connection to ``upstream_address`` until either closes.

        An unreachable upstream closes the client at once (a refused connection one hop
        later); it is recorded unless ``unreachable_is_error`` is false. ``where`` prefixes
        recorded lines ("node 2: ").
        """
        try:
            upstream = await trio.open_tcp_stream(*upstream_address)
        except OSError as exc:
            if unreachable_is_error:
                self._record_error(f"{where}cannot reach {upstream_address}: {exc}")
            await trio.aclose_forcefully(client)
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_until_eof, requests, client, upstream, nursery.cancel_scope)
                nursery.start_soon(_until_eof, responses, upstream, client, nursery.cancel_scope)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # a peer reset or the upstream died: ordinary for clients and broker faults
        except* Exception as group:  # WireError, an unknown correlation id, or a bug
            for failure in group.exceptions:
                self._record_error(f"{where}dropped a connection: {failure!r}")
        finally:
            await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(client)

    def _thread_main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported to start() or, later, in errors
            self._failure = exc
            self._record_error(f"{self._what} thread died: {exc!r}")
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                await self._listen(nursery)
                self._started.set()


async def _until_eof(
    pipe: Pipe, source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope
) -> None:
    """Run one direction; its EOF ends the whole connection."""
    await pipe(source, sink)
    scope.cancel()


def _whole_frames(decoder: FrameDecoder) -> Iterator[memoryview]:
    while (frame := decoder.next_frame()) is not NEED_DATA and frame is not CLOSED:
        assert isinstance(frame, memoryview)
        yield frame


async def _map(
    show: Callable[[memoryview], bytes | bytearray | memoryview],
    source: trio.SocketStream,
    sink: trio.SocketStream,
) -> None:
    decoder = FrameDecoder()
    while True:
        data = await source.receive_some(RECEIVE_BYTES)
        decoder.receive_data(data)
        out: list[bytes | bytearray | memoryview] = []
        for frame in _whole_frames(decoder):
            shown = show(frame)
            out += (size_prefix(len(shown)), shown)
        if out:
            await sink.send_all(b"".join(out))
        if not data:
            return


def map_frames(show: Callable[[memoryview], bytes | bytearray | memoryview]) -> Pipe:
    """A direction that forwards whole frames only, each as ``show`` returns it (with its
    size), for relays that must rewrite what passes."""
    return functools.partial(_map, show)
