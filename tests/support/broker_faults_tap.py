# Strategy: a passive TCP tap between the proxy and one broker that writes down every Produce
# answer the broker gave, so a broker-fault scenario can tell the proxy's promise ("a produce
# is acknowledged to a client only after the upstream acknowledged it", DESIGN) apart from the
# broker's own promise ("what I acknowledged, I have").
#
# Why it is needed (measured, tansu 0.6.0): after a kill -9 and restart on `s3://` storage, or
# after a SIGSTOP long enough for librdkafka to re-send, Tansu answers an idempotent producer's
# re-sent batch DUPLICATE_SEQUENCE_NUMBER with base offset -1, and librdkafka reports its
# records delivered at offsets -1, 0, 1 ..., which belong to other records; after a restart
# some of those batches are not in the topic at all. The same happens with the client talking
# to Tansu directly, without the proxy. Without a record of what the broker said, such an
# acknowledgement cannot be told from one the proxy made up.
#
# The tap is the broker's advertised address (FaultyBroker starts Tansu with
# `--advertised-listener-url` pointing here), so every connection to the broker - the proxy's
# and a direct read-back's - goes through it. Bytes are forwarded exactly as received; a
# FrameDecoder runs alongside each direction and only Produce requests and responses are
# decoded (wire.codec, any version): from the request the record count of each partition's
# batches, from the response each partition's error code and base offset. Either side closing
# ends the connection; a broker that is down makes the tap close the incoming connection at
# once, exactly like a refused connection one hop later.
#
# Threading: like tests/support/cluster_relay.py, the tap runs `trio.run` in one background
# thread; answers and errors are shared with the test thread under one threading.Lock.
"""A passive tap in front of one broker that records every Produce answer."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import trio

from wire.apis import response_header_version
from wire.codec import decode_request, decode_response
from wire.framing import CLOSED, NEED_DATA, FrameDecoder
from wire.headers import (
    parse_request_header,
    parse_response_header,
    peek_request_header,
    peek_response_correlation_id,
)
from wire.messages.produce_request import ProduceRequest
from wire.messages.produce_response import ProduceResponse
from wire.records import scan_batches

__all__ = ["ProduceAnswer", "ProduceTap", "running_tap"]

_PRODUCE = 0
_RECEIVE_BYTES = 65536
_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ProduceAnswer:
    """What the broker answered for one partition of one Produce request."""

    topic: str
    partition: int
    error_code: int
    base_offset: int
    record_count: int
    answered_s: float

    def covers(self, offset: int) -> bool:
        return self.base_offset <= offset < self.base_offset + self.record_count


class ProduceTap:
    """Listen on ``listen_port``, forward to ``upstream_port`` and record Produce answers.

    Use :func:`running_tap`; it starts the thread and always stops it.
    """

    def __init__(self, listen_port: int, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.host, self.listen_port, self.upstream_port = host, listen_port, upstream_port
        self._lock = threading.Lock()
        self._answers: list[ProduceAnswer] = []
        self._errors: list[str] = []
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._thread = threading.Thread(target=self._thread_main, name="produce-tap", daemon=True)

    @property
    def answers(self) -> list[ProduceAnswer]:
        with self._lock:
            return list(self._answers)

    @property
    def errors(self) -> list[str]:
        """Connections dropped because a frame could not be decoded (a bug here or a broken
        peer); empty in a good run. Resets and refused connections are not errors."""
        with self._lock:
            return list(self._errors)

    def start(self) -> None:
        self._thread.start()
        if not self._started.wait(_START_TIMEOUT_S) or self._failure is not None:
            raise RuntimeError("the produce tap did not start") from self._failure

    def stop(self) -> None:
        if self._token is not None and self._scope is not None and self._thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        if self._thread.ident is not None:
            self._thread.join(_STOP_TIMEOUT_S)
            if self._thread.is_alive():
                raise RuntimeError(f"tap thread still running after {_STOP_TIMEOUT_S} s")

    def _thread_main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:
            self._failure = exc
            self._error(f"tap thread died: {exc!r}")
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        listeners = await trio.open_tcp_listeners(self.listen_port, host=self.host)
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.serve_listeners, self._connection, listeners)
                self._started.set()

    async def _connection(self, client: trio.SocketStream) -> None:
        try:
            upstream = await trio.open_tcp_stream(self.host, self.upstream_port)
        except OSError:
            await trio.aclose_forcefully(client)  # broker down: refuse, one hop later
            return
        pending: dict[int, tuple[int, dict[tuple[str, int], int]] | None] = {}
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._requests, client, upstream, pending, nursery)
                nursery.start_soon(self._responses, client, upstream, pending, nursery)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # a peer reset or the broker died: ordinary in these scenarios
        except* Exception as group:
            for failure in group.exceptions:
                self._error(f"dropped a connection: {failure!r}")
        finally:
            await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(client)

    async def _requests(
        self,
        client: trio.SocketStream,
        upstream: trio.SocketStream,
        pending: dict[int, tuple[int, dict[tuple[str, int], int]] | None],
        nursery: trio.Nursery,
    ) -> None:
        decoder = FrameDecoder()
        while True:
            data = await client.receive_some(_RECEIVE_BYTES)
            decoder.receive_data(data)
            while (frame := decoder.next_frame()) is not NEED_DATA and frame is not CLOSED:
                assert isinstance(frame, memoryview)
                api_key, api_version, correlation_id = peek_request_header(frame)
                pending[correlation_id] = (
                    (api_version, _record_counts(frame)) if api_key == _PRODUCE else None
                )
            if not data:
                nursery.cancel_scope.cancel()
                return
            await upstream.send_all(data)

    async def _responses(
        self,
        client: trio.SocketStream,
        upstream: trio.SocketStream,
        pending: dict[int, tuple[int, dict[tuple[str, int], int]] | None],
        nursery: trio.Nursery,
    ) -> None:
        decoder = FrameDecoder()
        while True:
            data = await upstream.receive_some(_RECEIVE_BYTES)
            decoder.receive_data(data)
            while (frame := decoder.next_frame()) is not NEED_DATA and frame is not CLOSED:
                assert isinstance(frame, memoryview)
                produce = pending.pop(peek_response_correlation_id(frame), None)
                if produce is not None:
                    self._record(frame, *produce)
            if not data:
                nursery.cancel_scope.cancel()
                return
            await client.send_all(data)

    def _record(self, frame: memoryview, version: int, counts: dict[tuple[str, int], int]) -> None:
        _, length = parse_response_header(frame, response_header_version(_PRODUCE, version))
        response = decode_response(_PRODUCE, version, frame[length:])
        assert isinstance(response, ProduceResponse)
        now = time.monotonic()
        answers = [
            ProduceAnswer(
                topic.name,
                p.index,
                p.error_code,
                p.base_offset,
                counts.get((topic.name, p.index), 0),
                now,
            )
            for topic in response.responses
            for p in topic.partition_responses
        ]
        with self._lock:
            self._answers += answers

    def _error(self, line: str) -> None:
        with self._lock:
            self._errors.append(line)


def _record_counts(frame: memoryview) -> dict[tuple[str, int], int]:
    """Records per (topic, partition) in a Produce request frame."""
    header, length = parse_request_header(frame)
    request = decode_request(_PRODUCE, header.api_version, frame[length:])
    assert isinstance(request, ProduceRequest)
    return {
        (topic.name, p.index): scan_batches(p.records).record_count
        for topic in request.topic_data
        for p in topic.partition_data
    }


@contextlib.contextmanager
def running_tap(listen_port: int, upstream_port: int) -> Iterator[ProduceTap]:
    """A ProduceTap for the block; its thread is stopped and joined however the block ends."""
    tap = ProduceTap(listen_port, upstream_port)
    tap.start()
    try:
        yield tap
    finally:
        tap.stop()
