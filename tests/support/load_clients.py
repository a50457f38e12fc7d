# Strategy: the healthy clients of the reliability scenarios are real Kafka clients
# (librdkafka via confluent-kafka), and they run in a child process of their own
# (``python -m tests.support.load_clients MODE ...``, one JSON line on stdout). A client
# thread in the test process would share the GIL with the trio load generators, and the
# figures would measure the test's own contention instead of the proxy's.
#
# Two workloads:
# * steady: a producer at a fixed rate (open loop: record i is due at start + i/rate, and its
#   acknowledgement latency counts from that due time, so a stall cannot hide by slowing the
#   sender) and a consumer of the same partition, from offset 0 (Tansu's "latest" is wrong),
#   whose end-to-end latency reads the due time carried in each record. Errors are delivery
#   reports with an error plus consumer errors.
# * throughput: a closed-loop producer (acks=all) that keeps librdkafka's queue full for the
#   duration and reports a timeline of acknowledged bytes per quarter second, so the test can
#   compare phases it timed itself (disturbed or not) inside one run of one client.
"""Real-client workloads (confluent-kafka) for the reliability scenarios, run as a process."""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.support.load_stats import percentile

__all__ = ["SteadyResult", "ThroughputResult", "run_client", "steady", "throughput"]

_DUE = struct.Struct(">q")  # monotonic ns the record was due (CLOCK_MONOTONIC is system-wide)
_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SteadyResult:
    sent: int
    acked: int
    delivery_errors: int
    consumed: int
    consumer_errors: int
    ack_p50_ms: float
    ack_p99_ms: float
    ack_max_ms: float
    e2e_p99_ms: float
    first_errors: list[str]

    @property
    def errors(self) -> int:
        """Failed deliveries, consumer errors, and acknowledged records never read back."""
        return self.delivery_errors + self.consumer_errors + max(0, self.acked - self.consumed)


@dataclass
class ThroughputResult:
    """Bytes acknowledged per ``bucket_s`` bucket from ``start_s`` (time.monotonic seconds).

    CLOCK_MONOTONIC is system-wide on Linux, so the test process can cut this timeline at
    its own time.monotonic() marks.
    """

    start_s: float
    bucket_s: float
    acked_bytes: list[int]
    delivery_errors: int

    def mib_per_s(self, from_s: float, to_s: float) -> float:
        """Throughput over the buckets that lie wholly inside [from_s, to_s]."""
        first = math.ceil((from_s - self.start_s) / self.bucket_s)
        last = math.floor((to_s - self.start_s) / self.bucket_s)  # exclusive
        inside = self.acked_bytes[max(first, 0) : max(last, 0)]
        if not inside:
            raise ValueError(f"no whole bucket between {from_s} and {to_s}")
        return sum(inside) / (len(inside) * self.bucket_s) / 2**20


def steady(
    bootstrap: str,
    topic: str,
    rate_per_s: float,
    duration_s: float,
    stop: threading.Event | None = None,
    value_bytes: int = 100,
) -> SteadyResult:
    """Produce at ``rate_per_s`` for ``duration_s`` or until ``stop``; consume it all back."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"steady-{topic}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    ack_ms: list[float] = []
    e2e_ms: list[float] = []
    errors: list[str] = []
    delivery_errors = consumer_errors = consumed = 0
    padding = b"s" * max(0, value_bytes - _DUE.size)

    def delivered(err: KafkaError | None, msg: object) -> None:
        nonlocal delivery_errors
        if err is not None:
            delivery_errors += 1
            errors.append(f"delivery: {err}")
            return
        due_ns = _DUE.unpack_from(msg.value())[0]  # type: ignore[attr-defined]
        ack_ms.append((time.monotonic_ns() - due_ns) / 1e6)

    def consume(timeout_s: float) -> None:
        nonlocal consumer_errors, consumed
        for message in consumer.consume(num_messages=1000, timeout=timeout_s):
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    consumer_errors += 1
                    errors.append(f"consume: {message.error()}")
                continue
            consumed += 1
            e2e_ms.append((time.monotonic_ns() - _DUE.unpack_from(message.value())[0]) / 1e6)

    start_ns = time.monotonic_ns()
    interval_ns = int(1e9 / rate_per_s)
    sent = 0
    end_ns = start_ns + int(duration_s * 1e9)
    while (due_ns := start_ns + sent * interval_ns) < end_ns and not (stop and stop.is_set()):
        while time.monotonic_ns() < due_ns:
            producer.poll(0)
            consume(min(0.005, max(0.0, (due_ns - time.monotonic_ns()) / 1e9)))
        producer.produce(topic, _DUE.pack(due_ns) + padding, partition=0, on_delivery=delivered)
        sent += 1
    producer.flush(60)
    acked = len(ack_ms)
    deadline = time.monotonic() + 30
    while consumed < acked and time.monotonic() < deadline:
        consume(0.2)
    consumer.close()
    return SteadyResult(
        sent=sent,
        acked=acked,
        delivery_errors=delivery_errors,
        consumed=consumed,
        consumer_errors=consumer_errors,
        ack_p50_ms=percentile(ack_ms, 0.5) if ack_ms else float("nan"),
        ack_p99_ms=percentile(ack_ms, 0.99) if ack_ms else float("nan"),
        ack_max_ms=max(ack_ms, default=float("nan")),
        e2e_p99_ms=percentile(e2e_ms, 0.99) if e2e_ms else float("nan"),
        first_errors=errors[:5],
    )


def throughput(
    bootstrap: str,
    topic: str,
    duration_s: float,
    stop: threading.Event | None = None,
    bucket_s: float = 0.25,
    value_bytes: int = 1024,
) -> ThroughputResult:
    """Produce as fast as acknowledgements allow for ``duration_s`` or until ``stop`` is set."""
    from confluent_kafka import KafkaError, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            # A bounded queue keeps the loop closed: at most this much is ever unacknowledged.
            "queue.buffering.max.kbytes": 16 * 1024,
        }
    )
    value = b"t" * value_bytes
    buckets = [0] * math.ceil(duration_s / bucket_s)
    start_s = time.monotonic()
    end_s = start_s + duration_s
    delivery_errors = 0

    def delivered(err: KafkaError | None, msg: object) -> None:
        nonlocal delivery_errors
        if err is not None:
            delivery_errors += 1
            return
        index = int((time.monotonic() - start_s) / bucket_s)
        if index < len(buckets):
            buckets[index] += value_bytes

    while time.monotonic() < end_s and not (stop is not None and stop.is_set()):
        try:
            producer.produce(topic, value, partition=0, on_delivery=delivered)
        except BufferError:
            producer.poll(0.001)
        producer.poll(0)
    producer.flush(60)
    return ThroughputResult(start_s, bucket_s, buckets, delivery_errors)


def run_client(
    mode: str, *args: str | float | int, stop: threading.Event | None = None
) -> SteadyResult | ThroughputResult:
    """Run a workload in a child process (blocking; call it from a worker thread).

    ``stop``: once set, the child is told to finish early (its stdin is closed), for a run
    whose length the caller decides as it goes.
    """
    command = [sys.executable, "-m", "tests.support.load_clients", mode, *map(str, args)]
    if stop is not None:
        command.append("--stop-on-eof")
    # The package root goes on PYTHONPATH explicitly: running from cwd is not enough under
    # PYTHONSAFEPATH.
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(_ROOT)) if p)
    child = subprocess.Popen(
        command,
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": path},
        stdin=subprocess.PIPE if stop is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if stop is not None:
            while not stop.wait(0.1) and child.poll() is None:
                pass
        out, err = child.communicate(input="" if stop is not None else None, timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"{mode} client failed:\n{err[-3000:]}")
    fields = json.loads(out.strip().splitlines()[-1])
    return SteadyResult(**fields) if mode == "steady" else ThroughputResult(**fields)


def _stdin_closed() -> threading.Event:
    """An event set when our stdin reaches end of file (the parent's stop signal)."""
    closed = threading.Event()

    def wait() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=wait, daemon=True).start()
    return closed


def _main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.load_clients")
    modes = parser.add_subparsers(dest="mode", required=True)
    one = modes.add_parser("steady")
    one.add_argument("bootstrap")
    one.add_argument("topic")
    one.add_argument("rate_per_s", type=float)
    one.add_argument("duration_s", type=float)
    two = modes.add_parser("throughput")
    two.add_argument("bootstrap")
    two.add_argument("topic")
    two.add_argument("duration_s", type=float)
    for mode in (one, two):
        mode.add_argument("--stop-on-eof", action="store_true", help="finish early at stdin EOF")
    args = parser.parse_args()
    stop = _stdin_closed() if args.stop_on_eof else None
    result: SteadyResult | ThroughputResult
    if args.mode == "steady":
        result = steady(args.bootstrap, args.topic, args.rate_per_s, args.duration_s, stop)
    else:
        result = throughput(args.bootstrap, args.topic, args.duration_s, stop)
    print(json.dumps(asdict(result)))


if __name__ == "__main__":
    _main()
