# Strategy: the proxy needs three things from every Produce request it forwards: acks (whether
# a response is owed), timeout_ms (how long to hold it) and which partitions it writes to (to
# answer REQUEST_TIMED_OUT and to wake the fetches waiting on them). The generated decoder
# builds a dataclass per topic and partition and a memoryview per records blob to get them;
# this walk reads the same fields in the same order and only steps over the records by their
# length, so per request it allocates one tuple per topic. It accepts and rejects exactly what
# `wire.codec.decode(ProduceRequest, ...)` does (tests/unit/wire/test_produce_summary.py checks
# both on random valid requests and on their truncations and byte flips), so a malformed
# Produce still closes the connection before anything is forwarded.
#
# Responses: a Produce v10+ response names brokers only in KIP-951 tagged fields
# (current_leader per partition, node_endpoints at the top), which brokers send only with a
# leader error. `produce_response_has_no_tags` walks the response and says "certainly nothing
# to rewrite" when no tag section holds anything; any doubt (a tag, a truncation, bad UTF-8)
# sends the caller to the full decode, which judges it as before.
"""Produce fast paths: a request's acks, timeout and partitions; an untagged response."""

from __future__ import annotations

import struct
from typing import NamedTuple
from uuid import UUID

from wire._tags import read_uvarint
from wire.errors import MalformedMessage, UnsupportedVersion
from wire.messages import ProduceRequest, ProduceResponse

__all__ = ["ProduceSummary", "produce_response_has_no_tags", "summarize_produce"]

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_ACKS_TIMEOUT = struct.Struct(">hi").unpack_from
_FIRST_FLEXIBLE = ProduceRequest.FIRST_FLEXIBLE_VERSION or 0x7FFF
_TOPIC_IDS_SINCE = 13
_ZERO_UUID = UUID(int=0)
_FAULTS = (struct.error, IndexError, UnicodeDecodeError, ValueError)


class ProduceSummary(NamedTuple):
    """What the proxy reads from a Produce request: topics are (name, topic id, partitions)."""

    acks: int
    timeout_ms: int
    topics: tuple[tuple[str, UUID, tuple[int, ...]], ...]


def summarize_produce(body: bytes | bytearray | memoryview, version: int) -> ProduceSummary:
    """Read a Produce request body (the bytes after the request header).

    Raises:
        UnsupportedVersion: ``version`` is outside ``ProduceRequest.VERSIONS``.
        MalformedMessage: exactly where ``decode(ProduceRequest, body, version)`` would.
    """
    low, high = ProduceRequest.VERSIONS
    if not low <= version <= high:
        raise UnsupportedVersion(f"ProduceRequest v{version} is outside v{low}-v{high}")
    data = body if isinstance(body, memoryview) else memoryview(body)
    if data.ndim != 1 or data.itemsize != 1:
        data = data.cast("B")
    try:
        summary, pos = _walk(data, version)
    except MalformedMessage:
        raise
    except _FAULTS as exc:
        raise MalformedMessage(f"ProduceRequest v{version}: {exc}") from exc
    if pos != len(data):
        raise MalformedMessage(f"ProduceRequest v{version}: {len(data) - pos} trailing bytes")
    return summary


def _walk(data: memoryview, version: int) -> tuple[ProduceSummary, int]:
    flexible = version >= _FIRST_FLEXIBLE
    by_id = version >= _TOPIC_IDS_SINCE
    n = len(data)
    # transactional_id: a nullable string (compact when flexible)
    length, pos = _length(data, 0, flexible, string=True)
    if length >= 0:
        end = pos + length
        if end > n:
            raise MalformedMessage("transactional_id runs past the end of the message")
        str(data[pos:end], "utf-8")  # the decoder rejects bad UTF-8: so do we
        pos = end
    acks, timeout_ms = _ACKS_TIMEOUT(data, pos)
    pos += 6
    count, pos = _length(data, pos, flexible)
    if count < 0:
        raise MalformedMessage("array topic_data is null but not nullable")
    if count > n - pos:
        raise MalformedMessage("topic_data count exceeds the bytes left")
    topics = []
    for _ in range(count):
        name, topic_id = "", _ZERO_UUID
        if by_id:
            topic_id = UUID(bytes=bytes(data[pos : pos + 16]))
            pos += 16
        else:
            length, pos = _length(data, pos, flexible, string=True)
            if length < 0:
                raise MalformedMessage("null element in name")
            end = pos + length
            if end > n:
                raise MalformedMessage("name runs past the end of the message")
            name = str(data[pos:end], "utf-8")
            pos = end
        partitions, pos = _length(data, pos, flexible)
        if partitions < 0:
            raise MalformedMessage("array partition_data is null but not nullable")
        if partitions > n - pos:
            raise MalformedMessage("partition_data count exceeds the bytes left")
        indexes = []
        for _ in range(partitions):
            (index,) = _I32(data, pos)
            indexes.append(index)
            length, pos = _length(data, pos + 4, flexible)
            if length >= 0:
                pos += length
                if pos > n:
                    raise MalformedMessage("records runs past the end of the message")
            if flexible:
                pos = _skip_tags(data, pos)
        if flexible:
            pos = _skip_tags(data, pos)
        topics.append((name, topic_id, tuple(indexes)))
    if flexible:
        pos = _skip_tags(data, pos)
    return ProduceSummary(acks, timeout_ms, tuple(topics)), pos


def _length(data: memoryview, pos: int, flexible: bool, string: bool = False) -> tuple[int, int]:
    """A length or count prefix (negative: null), as the generated decoder reads it."""
    if flexible:
        b = data[pos]
        if b < 128:
            return b - 1, pos + 1
        value, pos = read_uvarint(data, pos)
        return value - 1, pos
    if string:
        return _I16(data, pos)[0], pos + 2
    return _I32(data, pos)[0], pos + 4


def _skip_tags(data: memoryview, pos: int) -> int:
    """Step over a tag section (ProduceRequest knows no tagged fields: all are raw)."""
    if data[pos] == 0:
        return pos + 1
    count, pos = read_uvarint(data, pos)
    n = len(data)
    if count > n - pos:
        raise MalformedMessage(f"{count} tagged fields cannot fit in {n - pos} bytes")
    for _ in range(count):
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        pos += size
        if pos > n:
            raise MalformedMessage(f"tagged field {tag} runs past the end of the message")
    return pos


def produce_response_has_no_tags(body: bytes | bytearray | memoryview, version: int) -> bool:
    """True when a flexible Produce response body (after its header) certainly decodes, with
    no tagged field anywhere: no KIP-951 ``current_leader`` or ``node_endpoints``, so nothing
    in it names a broker and the proxy can pass its bytes on without decoding.

    False means "decode it to know" (a tagged field, a null where none may be, bad UTF-8, a
    truncation, trailing bytes, a non-flexible version): the caller decodes, and the decoder
    raises where it would have before. Brokers attach the tagged fields only to leader
    errors (NOT_LEADER_OR_FOLLOWER), so on the hot path this is a walk over a few integers.
    """
    if not _FIRST_FLEXIBLE <= version <= ProduceResponse.VERSIONS[1]:
        return False
    data = body if isinstance(body, memoryview) else memoryview(body)
    try:
        return _untagged_produce_response(data.cast("B") if data.format != "B" else data, version)
    except (MalformedMessage, *_FAULTS):
        return False


def _untagged_produce_response(data: memoryview, version: int) -> bool:
    n = len(data)
    by_id = version >= _TOPIC_IDS_SINCE
    count, pos = _length(data, 0, True)
    if count < 0 or count > n - pos:
        return False
    for _ in range(count):
        if by_id:
            pos += 16
        else:
            pos = _string(data, pos, nullable=False)
            if pos < 0:
                return False
        partitions, pos = _length(data, pos, True)
        if partitions < 0 or partitions > n - pos:
            return False
        for _ in range(partitions):
            pos += 4 + 2 + 8 + 8 + 8  # index, error_code, base_offset, append time, log start
            errors, pos = _length(data, pos, True)
            if errors < 0 or errors > n - pos:
                return False
            for _ in range(errors):
                pos = _string(data, pos + 4, nullable=True)  # batch_index, its message
                if pos < 0 or data[pos] != 0:
                    return False
                pos += 1
            pos = _string(data, pos, nullable=True)  # error_message
            if pos < 0 or data[pos] != 0:  # tags: current_leader
                return False
            pos += 1
        if data[pos] != 0:
            return False
        pos += 1
    pos += 4  # throttle_time_ms
    return pos + 1 == n and data[pos] == 0  # no top-level tags: no node_endpoints


def _string(data: memoryview, pos: int, nullable: bool) -> int:
    """Step over a compact string checked as the decoder checks it; -1 when it would fail."""
    length, pos = _length(data, pos, True, string=True)
    if length < 0:
        return pos if nullable else -1
    end = pos + length
    if end > len(data):
        return -1
    str(data[pos:end], "utf-8")
    return end
