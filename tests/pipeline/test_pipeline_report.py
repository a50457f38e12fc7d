"""The PySpark report over a request log written by the real proxy under real traffic.

Traffic (one module-scoped run, about 10 s): three kafka-python producers sending 50 KB
records, a kafka-python consumer and a raw client long-polling an empty topic (fetches that end
at max_wait_ms with no data: the proxy forwards them and logs them as ``ok``; ``expired`` comes
with the purgatory, issue 6), all behind a 300 KiB memory pool. Two raw clients each start a
180 KB Produce frame and hold it half sent, so the pool is over-allocated and every other
connection is muted until both frames complete: the log must show muted requests, and does
so deterministically (no timing). The log is then analysed by ``purgatory-proxy report`` (the
command line, as a user runs it) on ``local[2]``, and every count is compared with plain Python
over the same file.
"""

from __future__ import annotations

import collections
import json
import math
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol.old.fetch import FetchRequest
from kafka.protocol.old.produce import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from prometheus_client.parser import text_string_to_metric_families

from pipeline.tables import ACCURACY, NO_CLIENT
from testbed.processes import Broker, free_port
from testbed.proxy_process import running_proxy

POOL_BYTES = 300 * 1024
HELD_FRAME_VALUE = b"h" * 180_000
WINDOW_S = 1
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    log: list[dict[str, Any]]
    summary: dict[str, Any]
    out: Path
    stdout: str
    stderr: str


def _frame(request: Any, correlation_id: int, client_id: str) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    encoded: bytes = request.encode(header=True, framed=True)
    return encoded


def _records(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 21,
    )  # fmt: skip
    builder.append(0, timestamp=None, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            assert chunk, "proxy closed the connection"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _muted_now(metrics_port: int) -> float:
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "purgatory_proxy_memory_pool_muted_connections":
                return sample.value
    raise AssertionError("no muted-connections gauge in /metrics")


def _drive_traffic(bootstrap: str, host: str, port: int, metrics_port: int) -> None:
    busy, empty = f"busy-{uuid.uuid4().hex[:6]}", f"empty-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="admin")
    admin.create_topics([NewTopic(busy, 1, 1), NewTopic(empty, 1, 1)])
    admin.close()

    # Two half-sent frames over-allocate the pool: everyone else is muted until they finish.
    holders = []
    for n in range(2):
        produce = ProduceRequest[3](
            transactional_id=None, acks=1, timeout_ms=10_000,
            topic_data=[(busy, [(0, _records(HELD_FRAME_VALUE))])],
        )  # fmt: skip
        frame = _frame(produce, n, f"holder-{n}")
        sock = socket.create_connection((host, port), timeout=30)
        sock.sendall(frame[: len(frame) // 2])
        holders.append((sock, frame))

    def produce(name: str) -> None:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, client_id=name, acks=1, linger_ms=0,
            max_request_size=250_000, request_timeout_ms=30_000,
        )  # fmt: skip
        for i in range(8):
            producer.send(busy, key=b"%d" % i, value=bytes([65 + i]) * 50_000).get(timeout=30)
        producer.close()

    def consume() -> None:
        consumer = KafkaConsumer(
            empty, bootstrap_servers=bootstrap, client_id="consumer", group_id=None,
            auto_offset_reset="earliest", fetch_max_wait_ms=200,
        )  # fmt: skip
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert not consumer.poll(timeout_ms=200)  # the topic stays empty
        consumer.close()

    def long_poll() -> None:
        with socket.create_connection((host, port), timeout=30) as sock:
            for n in range(4):
                fetch = FetchRequest[4](
                    replica_id=-1, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20,
                    isolation_level=0, topics=[(empty, [(0, 0, 1 << 20)])],
                )  # fmt: skip
                sock.sendall(_frame(fetch, n, "poller"))
                _read_frame(sock)

    threads = [threading.Thread(target=produce, args=(f"producer-{n}",)) for n in range(3)]
    threads += [threading.Thread(target=consume), threading.Thread(target=long_poll)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30  # a hang guard only
    while _muted_now(metrics_port) < 2:
        assert time.monotonic() < deadline, "no connection was ever muted"
        time.sleep(0.05)
    for sock, frame in holders:
        sock.sendall(frame[len(frame) // 2 :])
        _read_frame(sock)
        sock.close()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()


@pytest.fixture(scope="module")
def run(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    work = tmp_path_factory.mktemp("pipeline")
    log_path, metrics_port = work / "requests.jsonl", free_port()
    with running_proxy(
        kafka_broker.bootstrap,
        "--memory-limit", str(POOL_BYTES),
        "--metrics", f"127.0.0.1:{metrics_port}",
        "--request-log", str(log_path),
        env={"PURGATORY_PROXY_MEMORY__SOCKET_REQUEST_MAX_BYTES": str(POOL_BYTES)},
    ) as proxy:  # fmt: skip
        _drive_traffic(proxy.bootstrap, proxy.host, proxy.port, metrics_port)
        assert proxy.stop(signal.SIGTERM) == 0  # flushes the request log
    log = [json.loads(line) for line in log_path.read_text().splitlines()]
    out = work / "report"
    command = [
        sys.executable, "-m", "proxy", "report", "--logs", str(work / "requests.jsonl*"),
        "--out", str(out), "--master", "local[2]", "--window-s", str(WINDOW_S),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    yield Run(log, summary, out, done.stdout, done.stderr)


def test_the_log_saw_what_the_traffic_did(run: Run) -> None:
    clients = {record["client_id"] for record in run.log}
    assert {"producer-0", "producer-1", "producer-2", "consumer", "poller"} <= clients
    produced = [r for r in run.log if r["api"] == "Produce" and r["client_id"].startswith("p")]
    assert len(produced) == 24 and all(r["outcome"] == "ok" for r in produced)
    polls = [r for r in run.log if r["client_id"] == "poller"]
    # Long-polls on an empty topic end at max_wait_ms with no data.
    assert len(polls) == 4 and all(r["latency_ms"] >= 300 for r in polls[1:])
    assert any(r["muted_ms"] > 0 for r in run.log)
    # The poller uses the bootstrap port, where fetches are forwarded; the consumer's fetches
    # reach a broker port and wait in the proxy's purgatory, which is part of their latency.
    fetches = [r for r in run.log if r["client_id"] == "consumer" and r["api"] == "Fetch"]
    assert any(r["held_ms"] > 0 and r["outcome"] == "expired" for r in fetches)
    assert all(r["held_ms"] == 0 for r in polls)
    assert all(0 <= r["held_ms"] <= r["latency_ms"] for r in run.log)


def test_counts_equal_plain_python(run: Run) -> None:
    summary = run.summary
    assert summary["lines"] == len(run.log)
    per_api = collections.Counter(record["api"] for record in run.log)
    assert {api: row["count"] for api, row in summary["apis"].items()} == dict(per_api)
    outcomes = collections.Counter(record["outcome"] for record in run.log)
    assert summary["outcomes"] == dict(outcomes)
    errors = collections.Counter(r["api"] for r in run.log if r["outcome"] == "error")
    assert {api: row["errors"] for api, row in summary["apis"].items() if row["errors"]} == dict(
        errors
    )
    assert summary["malformed_lines"] == 0
    brokers = collections.Counter(record["broker"] for record in run.log)
    assert {broker: row["count"] for broker, row in summary["brokers"].items()} == dict(brokers)
    broker_errors = collections.Counter(r["broker"] for r in run.log if r["outcome"] == "error")
    assert {b: row["errors"] for b, row in summary["brokers"].items() if row["errors"]} == dict(
        broker_errors
    )
    codes = collections.Counter((r["error_code"], r["api"]) for r in run.log if r["error_code"])
    assert {(r["error_code"], r["api"]): r["requests"] for r in summary["errors_by_code"]} == dict(
        codes
    )
    times = [record["ts"] for record in run.log]
    span = summary["time_range"]
    assert (span["first_ts"], span["last_ts"]) == (min(times), max(times))
    muted = [record for record in run.log if record["muted_ms"] > 0]
    assert summary["muted_requests"] == len(muted) > 0
    assert math.isclose(summary["muted_ms_total"], sum(r["muted_ms"] for r in muted))
    talkers: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for record in run.log:
        talker = talkers[record["client_id"] or NO_CLIENT]
        talker[0] += 1
        talker[1] += record["request_bytes"] + record["response_bytes"]
    expected = sorted(talkers.items(), key=lambda item: (-item[1][1], item[0]))[:10]
    assert [(t["client"], t["requests"], t["bytes"]) for t in summary["top_talkers"]] == [
        (client, requests, moved) for client, (requests, moved) in expected
    ]


def test_fairness_equals_plain_python(run: Run) -> None:
    windows: dict[int, dict[str, float]] = collections.defaultdict(collections.Counter)
    for record in run.log:
        window = math.floor(record["ts"] / WINDOW_S) * WINDOW_S
        moved = record["request_bytes"] + record["response_bytes"]
        windows[window][record["client_id"] or NO_CLIENT] += moved
    indexes = []
    for per_client in windows.values():
        values = list(per_client.values())
        squares = sum(v * v for v in values)
        indexes.append(sum(values) ** 2 / (len(values) * squares) if squares else 1.0)
    assert math.isclose(run.summary["jain_index_mean"], sum(indexes) / len(indexes))
    assert math.isclose(run.summary["jain_index_min"], min(indexes))


def test_percentiles_are_within_percentile_approx_tolerance(run: Run) -> None:
    for api, row in run.summary["apis"].items():
        latencies = sorted(r["latency_ms"] for r in run.log if r["api"] == api)
        n = len(latencies)
        slack = math.ceil(n / ACCURACY) + 1  # rank error of the sketch, plus rank rounding
        for p, got in ((0.5, row["p50_ms"]), (0.95, row["p95_ms"]), (0.99, row["p99_ms"])):
            rank = max(0, math.ceil(p * n) - 1)
            low, high = latencies[max(0, rank - slack)], latencies[min(n - 1, rank + slack)]
            assert low <= got <= high, (api, p, got, low, high)


def test_progress_lines_and_no_spark_noise(run: Run) -> None:
    # One numbered line per stage, the reading stage with the line count; by default neither
    # Spark's console progress bar nor the JVM's log4j output reaches the terminal.
    stages = re.findall(r"^\[\s*(\d+)/(\d+)\] +[\d.]+ s  (.*)$", run.stderr, re.MULTILINE)
    numbers = [int(number) for number, _, _ in stages]
    total = int(stages[0][1])
    assert sorted(set(numbers)) == list(range(1, total + 1)) and total >= 12
    assert f": {len(run.log):,} lines" in run.stderr
    for line in run.stderr.splitlines():
        assert re.match(r"^\[\s*\d+/\d+\] ", line), line


def test_outputs_exist_and_plots_are_images(run: Run) -> None:
    assert f"report written to {run.out} ({len(run.log)} requests)" in run.stdout
    report = (run.out / "report.md").read_text()
    assert f"{run.summary['lines']} requests" in report
    assert f"first request: {run.summary['time_range']['first_utc']}" in report
    assert "## Per broker" in report and "## Errors by code" in report
    for name in ("per_api", "per_client", "per_broker", "throughput", "purgatory_outcomes",
                 "held_histogram", "memory_pressure", "fairness", "top_talkers",
                 "errors_by_code"):  # fmt: skip
        table = run.out / "tables" / name
        assert (table / "_SUCCESS").exists()
        assert list(table.glob("*.parquet"))
    plots = sorted((run.out / "plots").glob("*.png"))
    assert {p.name for p in plots} == {
        "latency_by_api.png", "throughput.png", "memory_pressure.png", "fairness.png",
        "top_talkers.png", "held_time.png",
    }  # fmt: skip
    for plot in plots:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        height, width, _ = matplotlib.image.imread(plot).shape
        assert height > 100 and width > 100
        assert f"]({plot.relative_to(run.out)})" in report
