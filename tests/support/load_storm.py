# Strategy: a connection storm is many short-lived connections opened and closed as fast as
# ``concurrency`` workers can, each one ending at a different point of the proxy's connection
# life cycle, because that is where per-connection resources leak: a close that races the
# proxy's upstream connect, a close inside a frame, a reset with a request still owed. The
# workers take kinds in turn:
#
#   kind       what the storm connection does                  path it exercises
#   ---------  ----------------------------------------------  ------------------------------
#   close      connect, close at once                          close during upstream connect
#   request    ApiVersions, read the answer, close             the whole request/response path
#   partial    half a frame (size and a few bytes), close      close inside a frame (lease held)
#   abandon    Metadata, reset (SO_LINGER 0) without reading   reset while a response is owed
#
# A failure of one storm connection (refused, reset by the proxy) is counted, not raised: the
# storm measures the proxy, and a refused connection under a storm is information.
"""A connection storm: short-lived raw connections of four kinds, at full speed."""

from __future__ import annotations

import socket
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import trio

from tests.support.load_wire import KafkaWire
from wire.messages.api_versions_request import ApiVersionsRequest
from wire.messages.metadata_request import MetadataRequest

__all__ = ["KINDS", "StormResult", "storm"]

KINDS = ("close", "request", "partial", "abandon")
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


@dataclass
class StormResult:
    opened: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.opened.values())

    @property
    def per_second(self) -> float:
        return self.total / self.seconds if self.seconds else 0.0


async def storm(host: str, port: int, connections: int, concurrency: int) -> StormResult:
    """Open and close ``connections`` connections to ``host:port``, ``concurrency`` at a time."""
    result = StormResult()
    numbers = iter(range(connections))
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(_worker, host, port, numbers, result)
    result.seconds = trio.current_time() - start
    return result


async def _worker(host: str, port: int, numbers: Iterator[int], result: StormResult) -> None:
    for number in numbers:
        kind = KINDS[number % len(KINDS)]
        result.opened[kind] += 1
        try:
            await _one(host, port, kind, number)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, EOFError) as error:
            result.failed[f"{kind}: {type(error).__name__}"] += 1


async def _one(host: str, port: int, kind: str, number: int) -> None:
    wire = await KafkaWire.connect(host, port, f"storm-{number}")
    try:
        if kind == "request":
            await wire.send(ApiVersionsRequest(), 0)
            await wire.receive()
        elif kind == "partial":
            await wire.send_raw(struct.pack(">i", 100) + b"\x00\x12\x00")
        elif kind == "abandon":
            await wire.send(MetadataRequest(topics=None), 8)
            wire.stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    finally:
        await wire.aclose()
