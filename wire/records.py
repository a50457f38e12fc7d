# Strategy: a records blob (the `records` field of Produce requests and Fetch responses)
# is a sequence of batches, each starting with a fixed header whose first 12 bytes are
# (base offset, batch length). We walk it by those lengths and unpack each header with one
# precompiled struct call: the cost is per batch, never per byte or per record, and
# records are never decoded or decompressed. CRC checks are separate and on demand
# (CRC-32C via the `crc32c` package), because they are the one O(bytes) operation.
#
# The v2 batch header layout is drawn above BATCH_HEADER_BYTES.
#
# Legacy message sets (magic 0 and 1, pre-0.11 data still on some brokers' disks) share
# the first 17 bytes' layout; we report each top-level message as one entry, with a
# CRC-32 (not 32C) and a record count of 1 (a compressed wrapper is counted as one,
# since counting its inner messages would mean decompressing).
#
# Error handling: a batch that cannot be a batch (impossible length, unknown magic,
# negative record count) raises CorruptRecords. A trailing batch cut short is normal in
# Fetch responses (the broker stops at max_bytes) and is reported, not raised.
"""Read record-batch headers from a records blob without decoding records."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import crc32c

from wire.errors import CorruptRecords

__all__ = [
    "BATCH_HEADER_BYTES",
    "LOG_OVERHEAD_BYTES",
    "BatchScan",
    "Compression",
    "RecordBatchHeader",
    "TimestampType",
    "batch_crc",
    "iter_batches",
    "scan_batches",
    "verify_crc",
    "verify_crcs",
]

#: Base offset + batch length, the part every batch format shares.
LOG_OVERHEAD_BYTES = 12

# Magic v2 record batch header (KIP-98; DefaultRecordBatch.java), 61 bytes:
#
#   offset  size  field                  offset  size  field
#   ------  ----  ---------------------  ------  ----  ---------------------
#        0     8  base offset                27     8  base timestamp
#        8     4  batch length (rest)        35     8  max timestamp
#       12     4  partition leader epoch     43     8  producer id
#       16     1  magic (2)                  51     2  producer epoch
#       17     4  crc (CRC-32C of 21..end)   53     4  base sequence
#       21     2  attributes                 57     4  record count
#       23     4  last offset delta          61        records ...
#
#: The whole magic v2 header.
BATCH_HEADER_BYTES = 61

_V2 = struct.Struct(">qiibIhiqqqhii")
_LEGACY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LEGACY_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">qi")
_MIN_LEGACY_SIZE = {0: 14, 1: 22}  # crc..value length, without key and value bytes

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
_DELETE_HORIZON_BIT = 0x40

_Buffer = bytes | bytearray | memoryview


class Compression(IntEnum):
    """Compression codec in bits 0-2 of the attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Bit 3 of the attributes."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class RecordBatchHeader(NamedTuple):
    """One batch header; ``position`` is where the batch starts in the blob.

    For legacy (magic 0/1) entries, the v2-only fields hold their "none" values
    (-1, or 0 for ``last_offset_delta``) and ``record_count`` is 1.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes of the whole batch, header included."""
        return LOG_OVERHEAD_BYTES + self.batch_length

    @property
    def end(self) -> int:
        """Position just past this batch in the blob."""
        return self.position + LOG_OVERHEAD_BYTES + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The codec; raises CorruptRecords for the unassigned codes 5-7."""
        code = self.attributes & _COMPRESSION_MASK
        try:
            return Compression(code)
        except ValueError:
            raise CorruptRecords(f"unknown compression codec {code}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.CREATE_TIME
        return TimestampType(1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _DELETE_HORIZON_BIT)


@dataclass(frozen=True, slots=True)
class BatchScan:
    """The result of :func:`scan_batches`.

    Attributes:
        batches: every complete batch, in order.
        record_count: the sum of their record counts.
        valid_bytes: bytes covered by complete batches (where the next batch starts).
        truncated_bytes: bytes of a partial batch at the end (0 if none).
    """

    batches: tuple[RecordBatchHeader, ...]
    record_count: int
    valid_bytes: int
    truncated_bytes: int

    @property
    def complete(self) -> bool:
        """Whether the blob ends exactly at a batch boundary."""
        return self.truncated_bytes == 0


def _view(records: _Buffer) -> memoryview:
    view = records if isinstance(records, memoryview) else memoryview(records)
    return view if view.ndim == 1 and view.itemsize == 1 else view.cast("B")


def _walk(view: memoryview) -> Iterator[RecordBatchHeader | int]:
    """Yield each complete batch, then the position of a truncated tail if there is one."""
    n = len(view)
    pos = 0
    v2 = _V2.unpack_from
    while pos < n:
        if n - pos < 17:
            yield pos
            return
        batch_length = _LENGTH.unpack_from(view, pos)[1]
        magic = view[pos + 16]
        if magic == 2:
            if batch_length < BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES:
                raise CorruptRecords(f"batch at {pos} has length {batch_length} < 49")
            end = pos + LOG_OVERHEAD_BYTES + batch_length
            if end > n:
                yield pos
                return
            fields = v2(view, pos)
            if fields[12] < 0:
                raise CorruptRecords(f"batch at {pos} has record count {fields[12]}")
            yield RecordBatchHeader(pos, *fields)
        elif magic in _MIN_LEGACY_SIZE:
            if batch_length < _MIN_LEGACY_SIZE[magic]:
                raise CorruptRecords(f"magic {magic} message at {pos} has size {batch_length}")
            end = pos + LOG_OVERHEAD_BYTES + batch_length
            if end > n:
                yield pos
                return
            offset, size, crc, magic, attributes = _LEGACY.unpack_from(view, pos)
            ts = _LEGACY_TIMESTAMP.unpack_from(view, pos + 18)[0] if magic == 1 else -1
            yield RecordBatchHeader(
                pos, offset, size, -1, magic, crc, attributes & 0xFF, 0, ts, ts, -1, -1, -1, 1
            )
        else:
            raise CorruptRecords(f"batch at {pos} has unknown magic {magic}")
        pos = end


def iter_batches(records: _Buffer | None) -> Iterator[RecordBatchHeader]:
    """The complete batches of a records blob, in order (a truncated tail is skipped).

    Raises:
        CorruptRecords: a batch header is impossible (see the module notes).
    """
    if records is None:
        return
    for item in _walk(_view(records)):
        if isinstance(item, int):
            return
        yield item


def scan_batches(records: _Buffer | None) -> BatchScan:
    """Every complete batch plus counts, and how many trailing bytes are a partial batch.

    Args:
        records: a records blob; None (a null records field) is treated as empty.

    Raises:
        CorruptRecords: a batch header is impossible (see the module notes).
    """
    if records is None:
        return BatchScan((), 0, 0, 0)
    view = _view(records)
    batches: list[RecordBatchHeader] = []
    valid = len(view)
    for item in _walk(view):
        if isinstance(item, int):
            valid = item
        else:
            batches.append(item)
    return BatchScan(tuple(batches), sum(b.record_count for b in batches), valid, len(view) - valid)


def batch_crc(records: _Buffer, batch: RecordBatchHeader) -> int:
    """Compute the CRC the header's ``crc`` field should hold.

    Magic 2: CRC-32C of everything after the crc field (attributes .. end).
    Magic 0/1: CRC-32 of everything after the crc field (magic .. end).
    """
    view = _view(records)
    start = batch.position + (21 if batch.magic >= 2 else 16)
    data = view[start : batch.end]
    if batch.magic >= 2:
        return int(crc32c.crc32c(data))
    return zlib.crc32(data)


def verify_crc(records: _Buffer, batch: RecordBatchHeader) -> bool:
    """Whether the batch's stored CRC matches its bytes."""
    return batch_crc(records, batch) == batch.crc


def verify_crcs(records: _Buffer | None) -> int:
    """Check the CRC of every complete batch; return how many were checked.

    Raises:
        CorruptRecords: a batch is impossible or its CRC does not match.
    """
    if records is None:
        return 0
    view = _view(records)
    checked = 0
    for batch in iter_batches(view):
        if not verify_crc(view, batch):
            raise CorruptRecords(
                f"batch at {batch.position} (base offset {batch.base_offset}) fails its CRC"
            )
        checked += 1
    return checked
