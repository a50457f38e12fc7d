"""Benchmark of the wire protocol layer: framing, headers, codec, record batches.

Run ``python -m bench.wire``. It prints µs/op and MB/s for each case (framing, headers,
codec, record batches) and writes the table into docs/benchmarks.md (section "wire"). For the
codec cases it also times kafka-python 3.0.12 and kio 0.6.5 on the same bytes: those are the
numbers behind the codec choice. Each figure is the best of several timed repeats, each repeat
running the operation enough times to take about 0.1 s.
"""

from __future__ import annotations

import io
import os
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from testbed.report import machine_line, write_section
from wire import codec
from wire.framing import FrameDecoder, frame
from wire.headers import (
    RequestHeader,
    encode_request_header,
    parse_request_header,
    replace_request_correlation_id,
    set_request_correlation_id,
)
from wire.messages import FetchResponse, MetadataResponse, ProduceRequest
from wire.messages import fetch_response as fr
from wire.messages import metadata_response as mr
from wire.messages import produce_request as preq
from wire.records import scan_batches, verify_crcs

MIB = 1 << 20
REPEATS = 5


@dataclass
class Row:
    case: str
    impl: str
    us: float
    nbytes: int

    @property
    def mb_s(self) -> float:
        return self.nbytes / self.us if self.us else 0.0  # bytes/µs == MB/s


def best_us(fn: Callable[[], Any], target_s: float = 0.1) -> float:
    """Best-of-REPEATS time of one call, in µs."""
    fn()
    number, elapsed = 1, 0.0
    while True:
        started = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - started
        if elapsed >= target_s / 4 or number >= 1 << 20:
            break
        number *= 4
    number = max(1, int(number * target_s / max(elapsed, 1e-9)))
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - started) / number)
    return best * 1e6


# ------------------------------------------------------------------------- inputs


def metadata_response() -> MetadataResponse:
    """10 topics x 100 partitions, 3 replicas each: 1,000 partitions."""
    return MetadataResponse(
        brokers=[
            mr.MetadataResponseBroker(node_id=i, host=f"broker-{i}.kafka.svc", port=9092)
            for i in range(3)
        ],
        cluster_id="bench-cluster",
        controller_id=1,
        topics=[
            mr.MetadataResponseTopic(
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                partitions=[
                    mr.MetadataResponsePartition(
                        partition_index=p,
                        leader_id=p % 3,
                        leader_epoch=4,
                        replica_nodes=[0, 1, 2],
                        isr_nodes=[0, 1, 2],
                    )
                    for p in range(100)
                ],
            )
            for t in range(10)
        ],
    )


def record_batches(total_bytes: int, batch_bytes: int = 16 * 1024) -> bytes:
    """Magic v2 batches (kafka-python's builder), 16 KiB each, about total_bytes in all."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    out = bytearray()
    offset = 0
    while len(out) < total_bytes:
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 24)
        n = 0
        while builder.size() < batch_bytes - 1100:
            builder.append(
                n, timestamp=1_700_000_000_000, key=None, value=os.urandom(1000), headers=[]
            )
            n += 1
        batch = bytearray(builder.build())
        batch[0:8] = offset.to_bytes(8, "big")
        offset += n
        out += batch
    return bytes(out)


def produce_request(records: bytes) -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            preq.TopicProduceData(
                name="events", partition_data=[preq.PartitionProduceData(index=0, records=records)]
            )
        ],
    )


def fetch_response(records: bytes) -> FetchResponse:
    return FetchResponse(
        session_id=7,
        responses=[
            fr.FetchableTopicResponse(
                topic="events",
                partitions=[
                    fr.PartitionData(
                        partition_index=0,
                        high_watermark=1000,
                        last_stable_offset=1000,
                        log_start_offset=0,
                        aborted_transactions=[],
                        records=records,
                    )
                ],
            )
        ],
    )


# ----------------------------------------------------------------- other libraries


def _kafka_python() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.protocol.consumer.fetch import FetchResponse as KpFetch
        from kafka.protocol.metadata.metadata import MetadataResponse as KpMetadata
        from kafka.protocol.producer.produce import ProduceRequest as KpProduce
    return {"MetadataResponse": KpMetadata, "ProduceRequest": KpProduce, "FetchResponse": KpFetch}


def _kio(name: str, version: int) -> Any:
    from kio.index import load_payload_module
    from kio.static.constants import EntityType

    api_key, kind = {
        "MetadataResponse": (3, EntityType.response),
        "ProduceRequest": (0, EntityType.request),
        "FetchResponse": (1, EntityType.response),
    }[name]
    return getattr(load_payload_module(api_key, version, kind), name)


def library_rows(case: str, name: str, body: bytes, version: int, encode: bool) -> list[Row]:
    """kafka-python and kio on the same body: decode (and re-encode) it."""
    from kio.serial import entity_reader, entity_writer

    rows = []
    kp_cls = _kafka_python()[name]
    kp_msg = kp_cls.decode(body, version=version)

    def kp() -> None:
        msg = kp_cls.decode(body, version=version)
        if encode:
            msg.encode()

    kio_cls = _kio(name, version)
    reader, writer = entity_reader(kio_cls), entity_writer(kio_cls)

    def kio() -> None:
        msg, _ = reader(body, 0)
        if encode:
            writer(io.BytesIO(), msg)

    assert kp_msg is not None and reader(body, 0)[1] == len(body)
    rows.append(Row(case, "kafka-python 3.0.12", best_us(kp), len(body)))
    rows.append(Row(case, "kio 0.6.5", best_us(kio), len(body)))
    return rows


# -------------------------------------------------------------------------- cases


def run() -> list[Row]:
    rows: list[Row] = []

    # Frame split: a 1 MiB buffer of 1 KiB frames, handed over at once.
    payload = os.urandom(1020)
    buffer = b"".join(frame(payload) for _ in range(MIB // 1024))

    def split_small() -> None:
        decoder = FrameDecoder()
        decoder.receive_data(buffer)
        while isinstance(decoder.next_frame(), memoryview):
            pass

    rows.append(
        Row(
            "frame split: 1 MiB of 1 KiB frames (1,024 frames)",
            "wire",
            best_us(split_small),
            len(buffer),
        )
    )

    # Frame split: one 1 MiB frame arriving in 64 KiB reads (assembled once).
    big = frame(os.urandom(MIB - 4))
    chunks = [big[i : i + 65536] for i in range(0, len(big), 65536)]

    def split_big() -> None:
        decoder = FrameDecoder()
        for chunk in chunks:
            decoder.receive_data(chunk)
            decoder.next_frame()

    rows.append(
        Row("frame split: one 1 MiB frame in 64 KiB reads", "wire", best_us(split_big), len(big))
    )

    # Header parse + correlation-id rewrite of a Fetch v12 request frame.
    header = encode_request_header(
        RequestHeader(api_key=1, api_version=12, correlation_id=42, client_id="consumer-1")
    )
    request_frame = bytearray(header + b"\0" * 200)
    view = memoryview(request_frame)

    def header_in_place() -> None:
        parsed, offset = parse_request_header(view)
        set_request_correlation_id(view, parsed.correlation_id + 1)
        _ = view[offset:]

    rows.append(
        Row(
            "header parse + correlation-id rewrite (in place)",
            "wire",
            best_us(header_in_place),
            len(request_frame),
        )
    )
    small = bytes(request_frame)

    def header_copy() -> None:
        parsed, _ = parse_request_header(small)
        replace_request_correlation_id(small, parsed.correlation_id + 1)

    rows.append(
        Row(
            "header parse + correlation-id rewrite (copy, 228 B frame)",
            "wire",
            best_us(header_copy),
            len(small),
        )
    )

    # Metadata response with 1,000 partitions: decode + encode.
    metadata = codec.encode(metadata_response(), 12)

    def metadata_round_trip() -> None:
        codec.encode(codec.decode(MetadataResponse, metadata, 12), 12)

    case = "Metadata v12 response, 1,000 partitions: decode + encode"
    rows.append(Row(case, "wire", best_us(metadata_round_trip), len(metadata)))
    rows += library_rows(case, "MetadataResponse", metadata, 12, encode=True)
    case = "Metadata v12 response, 1,000 partitions: decode only"
    rows.append(
        Row(
            case,
            "wire",
            best_us(lambda: codec.decode(MetadataResponse, metadata, 12)),
            len(metadata),
        )
    )
    rows += library_rows(case, "MetadataResponse", metadata, 12, encode=False)

    # Produce request and Fetch response with 1 MiB of records: decode.
    records = record_batches(MIB)
    produce = codec.encode(produce_request(records), 9)
    case = "Produce v9 request, 1 MiB records: decode"
    rows.append(
        Row(case, "wire", best_us(lambda: codec.decode(ProduceRequest, produce, 9)), len(produce))
    )
    rows += library_rows(case, "ProduceRequest", produce, 9, encode=False)

    fetch = codec.encode(fetch_response(records), 12)
    case = "Fetch v12 response, 1 MiB records: decode"
    rows.append(
        Row(case, "wire", best_us(lambda: codec.decode(FetchResponse, fetch, 12)), len(fetch))
    )
    rows += library_rows(case, "FetchResponse", fetch, 12, encode=False)

    decoded_fetch = codec.decode(FetchResponse, fetch, 12)
    rows.append(
        Row(
            "Fetch v12 response, 1 MiB records: encode_parts (records not copied)",
            "wire",
            best_us(lambda: codec.encode_parts(decoded_fetch, 12)),
            len(fetch),
        )
    )

    # Record batches: header scan (per batch) and CRC-32C (per byte).
    batches = len(scan_batches(records).batches)
    rows.append(
        Row(
            f"records: scan {batches} batch headers (1 MiB)",
            "wire",
            best_us(lambda: scan_batches(records)),
            len(records),
        )
    )
    rows.append(
        Row(
            "records: verify every CRC-32C (1 MiB)",
            "wire",
            best_us(lambda: verify_crcs(records)),
            len(records),
        )
    )

    # The per-request hot path of a proxied produce: frame, header, cid, partition list.
    produce_header = encode_request_header(
        RequestHeader(api_key=0, api_version=9, correlation_id=1, client_id="producer-1")
    )
    produce_stream = frame(produce_header, produce)
    decoder = FrameDecoder()  # one per connection, reused for every request

    def hot_path() -> None:
        decoder.receive_data(produce_stream)
        got = decoder.next_frame()
        assert isinstance(got, memoryview)
        parsed, offset = parse_request_header(got)
        replace_request_correlation_id(got[:offset], 99)  # header only: the body is sent as is
        codec.decode(ProduceRequest, got[offset:], parsed.api_version)

    rows.append(
        Row(
            "hot path: frame + header + cid + Produce decode (1 MiB records)",
            "wire",
            best_us(hot_path),
            len(produce_stream),
        )
    )
    return rows


def markdown(rows: list[Row]) -> str:
    lines = [
        "## Wire protocol (`bench.wire`)",
        "",
        machine_line(),
        "",
        "`python -m bench.wire`",
        "",
        "Best of 5 repeats; MB/s is bytes of input per µs. For the codec cases the same bytes",
        "are also decoded (and encoded) with kafka-python 3.0.12 and kio 0.6.5, the two",
        "libraries evaluated for the codec: wire compiles its own codec from the Kafka JSON",
        "schemas (shipped in kafka-python) and uses neither library's code at run time.",
        "",
        "| case | implementation | µs/op | MB/s |",
        "|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r.case} | {r.impl} | {r.us:,.2f} | {r.mb_s:,.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    rows = run()
    width = max(len(r.case) for r in rows)
    print(f"{'case':{width}}  {'implementation':20} {'µs/op':>12} {'MB/s':>10}")
    for r in rows:
        print(f"{r.case:{width}}  {r.impl:20} {r.us:12,.2f} {r.mb_s:10,.0f}")
    write_section("wire", markdown(rows))


if __name__ == "__main__":
    main()
