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
# Threading: like tests/support/cluster_relay.py, the tap is a relay_core.RelayThread: it runs
# `trio.run` in one background thread; answers and errors are shared with the test thread
# under one threading.Lock.
"""A passive tap in front of one broker that records every Produce answer."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import trio

from testbed.relay_core import RelayThread, tee_frames
from wire.apis import response_header_version
from wire.codec import decode_request, decode_response
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


class ProduceTap(RelayThread):
    """Listen on ``listen_port``, forward to ``upstream_port`` and record Produce answers.

    Use :func:`running_tap`; it starts the thread and always stops it.
    """

    def __init__(self, listen_port: int, upstream_port: int, host: str = "127.0.0.1") -> None:
        super().__init__("produce tap", "produce-tap")
        self.host, self.listen_port, self.upstream_port = host, listen_port, upstream_port
        self._answers: list[ProduceAnswer] = []

    @property
    def answers(self) -> list[ProduceAnswer]:
        with self._lock:
            return list(self._answers)

    @property
    def errors(self) -> list[str]:
        """Connections dropped because a frame could not be decoded (a bug here or a broken
        peer); empty in a good run. Resets and refused connections are not errors."""
        return super().errors

    async def _listen(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(self.listen_port, host=self.host)
        nursery.start_soon(trio.serve_listeners, self._connection, listeners)

    async def _connection(self, client: trio.SocketStream) -> None:
        # correlation id -> (version, records per partition) of a Produce request, else None
        pending: dict[int, tuple[int, dict[tuple[str, int], int]] | None] = {}

        def request(frame: memoryview) -> None:
            api_key, api_version, correlation_id = peek_request_header(frame)
            pending[correlation_id] = (
                (api_version, _record_counts(frame)) if api_key == _PRODUCE else None
            )

        def response(frame: memoryview) -> None:
            produce = pending.pop(peek_response_correlation_id(frame), None)
            if produce is not None:
                self._record(frame, *produce)

        await self._relay(
            client,
            (self.host, self.upstream_port),
            tee_frames(request),
            tee_frames(response),
            unreachable_is_error=False,  # broker down: refuse, one hop later
        )

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
