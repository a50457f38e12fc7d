"""wire.records: batch headers, counts, CRCs, truncated tails and corrupt batches.

Batches come from kafka-python's record builders (an independent writer of the format),
plus one header assembled by hand from the format table in wire/records.py.
"""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from wire.errors import CorruptRecords
from wire.records import (
    BATCH_HEADER_BYTES,
    Compression,
    TimestampType,
    batch_crc,
    iter_batches,
    scan_batches,
    verify_crc,
    verify_crcs,
)


def v2_batch(
    count: int,
    *,
    compression: int = 0,
    base_offset: int = 0,
    transactional: bool = False,
    producer_id: int = -1,
    value_bytes: int = 10,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=3 if producer_id >= 0 else -1,
        base_sequence=7 if producer_id >= 0 else -1,
        batch_size=1 << 24,
    )
    for i in range(count):
        builder.append(
            i, timestamp=1_700_000_000_000 + i, key=None, value=b"v" * value_bytes, headers=[]
        )
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # outside the CRC
    return bytes(data)


def legacy_message(magic: int, offset: int, compression: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(
        magic=magic, compression_type=compression, batch_size=1 << 20
    )
    builder.append(offset, timestamp=1_700_000_000_000 if magic else None, key=b"k", value=b"v")
    return bytes(builder.build())


def with_attributes(batch: bytes, attributes: int) -> bytes:
    """The batch with other attributes and a CRC recomputed over them."""
    data = bytearray(batch)
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_hand_built_header() -> None:
    header = struct.pack(
        ">qiibIhiqqqhii",
        100,  # base offset
        BATCH_HEADER_BYTES - 12,  # batch length: a header with no records
        5,  # partition leader epoch
        2,  # magic
        0,  # crc, fixed below
        0x10 | 0x08 | Compression.ZSTD,  # transactional, log-append time, zstd
        4,  # last offset delta
        1000,
        2000,
        77,  # producer id
        1,
        9,
        5,  # record count
    )
    data = bytearray(header)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    (batch,) = iter_batches(bytes(data))
    assert (batch.base_offset, batch.partition_leader_epoch, batch.magic) == (100, 5, 2)
    assert (batch.last_offset, batch.next_offset, batch.record_count) == (104, 105, 5)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 2000)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 1, 9)
    assert batch.compression is Compression.ZSTD
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.is_transactional and not batch.is_control and not batch.has_delete_horizon
    assert batch.size_bytes == len(data) == batch.end
    assert verify_crc(data, batch)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_a_kafka_python_batch_agrees_with_kafka_pythons_reader(compression: Compression) -> None:
    data = v2_batch(25, compression=compression, base_offset=1000, producer_id=42)
    (batch,) = iter_batches(data)
    theirs = DefaultRecordBatch(bytearray(data))
    assert batch.crc == theirs.crc and theirs.validate_crc()
    assert batch.base_offset == theirs.base_offset == 1000
    assert batch.record_count == 25 == len(list(theirs))
    assert batch.last_offset_delta == 24
    assert batch.compression is compression == theirs.compression_type
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 7)
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.max_timestamp == theirs.max_timestamp == 1_700_000_000_024
    assert verify_crc(data, batch) and batch_crc(data, batch) == batch.crc


def test_control_and_delete_horizon_bits() -> None:
    batch = next(iter_batches(with_attributes(v2_batch(1), 0x20 | 0x40 | 0x10)))
    assert batch.is_control and batch.has_delete_horizon and batch.is_transactional


def test_unknown_compression_codec_is_corrupt() -> None:
    batch = next(iter_batches(with_attributes(v2_batch(1), 5)))
    with pytest.raises(CorruptRecords):
        _ = batch.compression


def test_counts_over_several_batches() -> None:
    blob = v2_batch(3) + v2_batch(5, compression=1, base_offset=3) + v2_batch(1, base_offset=8)
    scan = scan_batches(blob)
    assert [b.base_offset for b in scan.batches] == [0, 3, 8]
    assert [b.record_count for b in scan.batches] == [3, 5, 1]
    assert scan.record_count == 9
    assert scan.valid_bytes == len(blob) and scan.complete
    assert [b.position for b in scan.batches] == [0, scan.batches[0].end, scan.batches[1].end]
    assert verify_crcs(blob) == 3


def test_truncated_tail_is_reported_at_every_cut() -> None:
    first, second = v2_batch(3), v2_batch(4, base_offset=3)
    blob = first + second
    for cut in range(len(first), len(blob)):
        scan = scan_batches(blob[:cut])
        assert len(scan.batches) == 1
        assert scan.record_count == 3
        assert scan.valid_bytes == len(first)
        assert scan.truncated_bytes == cut - len(first)
        assert scan.complete is (cut == len(first))
        assert len(list(iter_batches(blob[:cut]))) == 1
        assert verify_crcs(blob[:cut]) == 1  # only complete batches are checked
    for cut in range(len(first)):
        scan = scan_batches(first[:cut])
        assert (scan.batches, scan.valid_bytes, scan.truncated_bytes) == ((), 0, cut)


def test_crc_mismatch() -> None:
    data = bytearray(v2_batch(3))
    data[-1] ^= 0xFF
    (batch,) = iter_batches(bytes(data))
    assert not verify_crc(data, batch)
    with pytest.raises(CorruptRecords, match="CRC"):
        verify_crcs(bytes(data))


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "why"),
    [
        (16, ">b", 3, "unknown magic"),
        (16, ">b", -1, "unknown magic"),
        (8, ">i", 48, "batch shorter than its header"),
        (8, ">i", -5, "negative batch length"),
        (57, ">i", -1, "negative record count"),
    ],
)
def test_corrupt_batches(offset: int, fmt: str, value: int, why: str) -> None:
    data = bytearray(v2_batch(2))
    struct.pack_into(fmt, data, offset, value)
    with pytest.raises(CorruptRecords):
        scan_batches(bytes(data))


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_sets(magic: int) -> None:
    blob = legacy_message(magic, 0) + legacy_message(magic, 1) + legacy_message(magic, 2, 1)
    scan = scan_batches(blob)
    assert [b.magic for b in scan.batches] == [magic] * 3
    assert [b.base_offset for b in scan.batches[:2]] == [0, 1]
    assert scan.record_count == 3  # a compressed wrapper counts as one
    assert scan.batches[2].compression is Compression.GZIP
    assert scan.batches[0].compression is Compression.NONE
    assert not scan.batches[0].is_transactional and not scan.batches[0].is_control
    if magic == 1:
        assert scan.batches[0].base_timestamp == 1_700_000_000_000
    assert verify_crcs(blob) == 3
    first = scan.batches[0]
    assert first.crc == zlib.crc32(blob[16 : first.end])


def test_legacy_too_short_is_corrupt() -> None:
    data = bytearray(legacy_message(1, 0))
    struct.pack_into(">i", data, 8, 21)
    with pytest.raises(CorruptRecords):
        scan_batches(bytes(data))


def test_null_and_empty_records() -> None:
    assert scan_batches(None).complete and scan_batches(b"").record_count == 0
    assert list(iter_batches(None)) == [] and verify_crcs(None) == 0


@given(
    specs=st.lists(
        st.tuples(st.integers(1, 20), st.sampled_from([0, 1]), st.booleans()), max_size=5
    ),
    cut=st.integers(0, 10_000),
)
def test_scan_invariants(specs: list[tuple[int, int, bool]], cut: int) -> None:
    batches, offset = [], 0
    for count, compression, transactional in specs:
        pid = 5 if transactional else -1
        batches.append(
            v2_batch(count, compression=compression, base_offset=offset,
                     transactional=transactional, producer_id=pid)
        )  # fmt: skip
        offset += count
    blob = b"".join(batches)
    cut = min(cut, len(blob))
    scan = scan_batches(memoryview(blob)[:cut])
    assert scan.valid_bytes + scan.truncated_bytes == cut
    complete = [b for b in batches if sum(map(len, batches[: batches.index(b) + 1])) <= cut]
    assert len(scan.batches) == len(complete)
    assert scan.record_count == sum(s[0] for s in specs[: len(complete)])
    assert all(b.is_transactional is s[2] for b, s in zip(scan.batches, specs, strict=False))
    assert all(verify_crc(blob, b) for b in scan.batches)
