# Strategy: the three client-side measurements of bench.throughput, each a plain function
# that talks to one bootstrap address with librdkafka (confluent-kafka) and returns numbers.
#
# - Throughput is closed loop: produce N records as fast as the client can (acks=all,
#   linger 5 ms), time from the first produce() to flush() returning; then read the same
#   topic from offset 0 until N records arrived.
# - Latency is open loop: record i is *due* at start + i / rate, whatever happened before, and
#   its acknowledgement latency is measured from that due time (not from when the loop got
#   round to sending it), so a stalled forwarder cannot hide its stall by slowing the sender
#   (coordinated omission). The due time travels in the record's first 8 bytes, so a consumer
#   thread in the same process measures produce -> consume latency against the same clock.
# - ProcessWatch reads a forwarder's CPU seconds and samples its RSS with psutil while a
#   measurement runs.
"""Client-side load generators and a CPU/RSS watcher for bench.throughput."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psutil
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from hdrh.histogram import HdrHistogram

__all__ = [
    "LatencyResult",
    "ProcessWatch",
    "consume_throughput",
    "create_topic",
    "open_loop_latency",
    "produce_throughput",
    "watched",
]

_MAX_LATENCY_US = 60_000_000  # HDR range: 1 µs .. 60 s, 3 significant digits
_DUE_BYTES = 8  # big-endian monotonic_ns due time at the start of each latency record
_LATENCY_FETCH_WAIT_MS = 5


def create_topic(
    bootstrap: str,
    partitions: int = 1,
    client_config: Mapping[str, str] | None = None,
    replication_factor: int = 1,
) -> str:
    """Create a fresh topic (single replica unless ``replication_factor`` says; -1: the
    cluster's default) and return its name.

    ``client_config``: extra librdkafka settings (TLS) for this and the other clients here.
    """
    name = f"bench-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})
    topic = NewTopic(name, partitions, replication_factor)
    futures = admin.create_topics([topic], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=30)
    return name


#: Every librdkafka client of the benchmarks sends without Nagle's algorithm, as the Java client
#: (TCP_NODELAY) and the Go clients do. librdkafka's default keeps it on: a one-record request
#: then waited behind the previous one's acknowledgement on the direct route only (the
#: forwarders' own upstream connections are TCP_NODELAY), and the direct route measured that
#: wait, not the broker: one record per request was 1.37x direct through the proxy with it on.
NO_NAGLE: Mapping[str, str | int | float | bool] = {"socket.nagle.disable": True}


def _producer(
    bootstrap: str,
    linger_ms: float,
    batch_records: int | None = None,
    client_config: Mapping[str, str] | None = None,
) -> Producer:
    settings: dict[str, str | int | float | bool] = {
        **NO_NAGLE,
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": linger_ms,
        # The default 100,000-message queue cap would stall the 100-byte runs on BufferError
        # retries; the 1 GiB byte cap still bounds the 64 KiB runs.
        "queue.buffering.max.messages": 1_000_000,
        **(client_config or {}),
    }
    if batch_records is not None:
        settings["batch.num.messages"] = batch_records
    return Producer(settings)


class _DeliveryCount:
    """Counts acknowledged and failed deliveries (callbacks run inside poll/flush)."""

    __slots__ = ("acked", "failed", "first_error")

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.first_error: str | None = None

    def __call__(self, err: KafkaError | None, _msg: object) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed += 1
            self.first_error = self.first_error or str(err)


def produce_throughput(
    bootstrap: str,
    topic: str,
    record_bytes: int,
    count: int,
    batch_records: int | None = None,
    client_config: Mapping[str, str] | None = None,
) -> float:
    """Produce ``count`` records of ``record_bytes``; return the elapsed seconds.

    ``batch_records`` caps records per batch (1 makes every record its own Produce request,
    which prices the per-request path rather than the per-byte one).

    Raises:
        RuntimeError: a delivery failed (a benchmark of failing requests is meaningless).
    """
    producer = _producer(
        bootstrap, linger_ms=5, batch_records=batch_records, client_config=client_config
    )
    producer.list_topics(topic, timeout=30)  # connect and learn the leader before timing
    value = b"x" * record_bytes
    deliveries = _DeliveryCount()
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=deliveries)
                break
            except BufferError:
                producer.poll(0.005)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining or deliveries.failed or deliveries.acked != count:
        raise RuntimeError(
            f"produce: {deliveries.acked}/{count} acked, {deliveries.failed} failed, "
            f"{remaining} unsent; first error: {deliveries.first_error}"
        )
    return elapsed


def _consumer(
    bootstrap: str, fetch_wait_ms: int = 100, client_config: Mapping[str, str] | None = None
) -> Consumer:
    # Tansu answers a Fetch with no new data only when fetch.wait.max.ms runs out, so this
    # bounds how stale a latency consumer's view can be; throughput reads never wait.
    return Consumer(
        {
            **NO_NAGLE,
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": fetch_wait_ms,
            **(client_config or {}),
        }
    )


def consume_throughput(
    bootstrap: str,
    topic: str,
    count: int,
    timeout_s: float = 120,
    client_config: Mapping[str, str] | None = None,
) -> float:
    """Read ``count`` records of ``topic`` (partition 0) from offset 0; return the seconds.

    Raises:
        RuntimeError: fewer records than expected arrived within ``timeout_s``, or an error.
    """
    consumer = _consumer(bootstrap, client_config=client_config)
    try:
        consumer.list_topics(topic, timeout=30)
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        while seen < count:
            if time.perf_counter() - started > timeout_s:
                raise RuntimeError(f"consume: {seen}/{count} records in {timeout_s} s")
            # Ask for no more than are still due: consume() waits out its timeout for a batch
            # it cannot fill, which would add up to 0.5 s to every measurement.
            wanted = min(10_000, count - seen)
            for message in consumer.consume(num_messages=wanted, timeout=0.5):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"consume: {error}")
                if error is None:
                    seen += 1
        return time.perf_counter() - started
    finally:
        consumer.close()


@dataclass(frozen=True)
class LatencyResult:
    """One open-loop run: what was asked, what was achieved, and the two histograms (µs)."""

    target_rate: float
    achieved_rate: float
    acked: int
    ack: HdrHistogram
    end_to_end: HdrHistogram


def _consume_latencies(
    bootstrap: str,
    topic: str,
    histogram: HdrHistogram,
    warm_due_ns: int,
    expected: int,
    stop: threading.Event,
    ready: threading.Event,
) -> None:
    consumer = _consumer(bootstrap, fetch_wait_ms=_LATENCY_FETCH_WAIT_MS)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.consume(num_messages=1, timeout=0.5)  # first fetch: offsets resolved
        ready.set()
        seen = 0
        while seen < expected and not stop.is_set():
            for message in consumer.consume(num_messages=10_000, timeout=0.1):
                if message.error() is not None:
                    continue
                now_ns = time.monotonic_ns()
                seen += 1
                due_ns = int.from_bytes((message.value() or b"")[:_DUE_BYTES], "big")
                if due_ns >= warm_due_ns:
                    histogram.record_value(max(1, (now_ns - due_ns) // 1000))
    finally:
        ready.set()
        consumer.close()


def open_loop_latency(
    bootstrap: str,
    topic: str,
    rate: float,
    duration_s: float,
    warmup_s: float,
    record_bytes: int = 1024,
    linger_ms: float = 5,
) -> LatencyResult:
    """Offer ``rate`` records/s for ``duration_s``; histogram acks and end-to-end delivery.

    Records due in the first ``warmup_s`` are sent but not recorded (connections, the first
    fetch and librdkafka's metadata refresh would otherwise dominate the tail).
    """
    ack = HdrHistogram(1, _MAX_LATENCY_US, 3)
    end_to_end = HdrHistogram(1, _MAX_LATENCY_US, 3)
    producer = _producer(bootstrap, linger_ms=linger_ms)
    producer.list_topics(topic, timeout=30)
    total = int(rate * duration_s)
    interval_ns = 1e9 / rate
    pad = b"x" * (record_bytes - _DUE_BYTES)
    stop, ready = threading.Event(), threading.Event()

    start_ns = time.monotonic_ns() + 1_500_000_000  # leaves the consumer time to attach
    warm_due_ns = start_ns + int(warmup_s * 1e9)
    reader = threading.Thread(
        target=_consume_latencies,
        args=(bootstrap, topic, end_to_end, warm_due_ns, total, stop, ready),
        daemon=True,
    )
    reader.start()
    ready.wait(30)
    acked = 0

    def delivered(err: KafkaError | None, msg: object) -> None:
        nonlocal acked
        now_ns = time.monotonic_ns()
        if err is not None:
            raise RuntimeError(f"latency produce failed: {err}")
        acked += 1
        due_ns = int.from_bytes(msg.value()[:_DUE_BYTES], "big")  # type: ignore[attr-defined]
        if due_ns >= warm_due_ns:
            ack.record_value(max(1, (now_ns - due_ns) // 1000))

    while time.monotonic_ns() < start_ns:
        producer.poll(0.01)
    sent = 0
    while sent < total:
        now_ns = time.monotonic_ns()
        due = min(total, int((now_ns - start_ns) / interval_ns) + 1)
        while sent < due:
            due_ns = start_ns + int(sent * interval_ns)
            try:
                producer.produce(
                    topic, due_ns.to_bytes(_DUE_BYTES, "big") + pad, on_delivery=delivered
                )
            except BufferError:
                producer.poll(0.001)
                continue
            sent += 1
        # Wait for acknowledgements until the next record is due, not in a blind sleep, so
        # a callback runs (and is timed) as soon as librdkafka has it.
        next_due_ns = start_ns + int(sent * interval_ns)
        producer.poll(max(0.0, (next_due_ns - time.monotonic_ns()) / 1e9))
    send_elapsed_s = (time.monotonic_ns() - start_ns) / 1e9
    producer.flush(60)
    reader.join(timeout=30)
    stop.set()
    reader.join(timeout=10)
    return LatencyResult(rate, total / max(send_elapsed_s, 1e-9), acked, ack, end_to_end)


class ProcessWatch:
    """CPU seconds used and peak RSS of one process between ``start()`` and ``stop()``.

    RSS is sampled every 50 ms from a daemon thread; CPU is the difference of the kernel's
    user+system counters, so it is exact whatever the sampling.
    """

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self._cpu_at_start = 0.0
        self.peak_rss_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _cpu_s(self) -> float:
        times = self._process.cpu_times()
        return float(times.user + times.system)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak_rss_bytes = max(self.peak_rss_bytes, self._process.memory_info().rss)

    def start(self) -> None:
        self._cpu_at_start = self._cpu_s()
        self.peak_rss_bytes = self._process.memory_info().rss
        self._thread.start()

    def stop(self) -> float:
        """Stop sampling and return the CPU seconds used since ``start()``."""
        self._stop.set()
        self._thread.join()
        self.peak_rss_bytes = max(self.peak_rss_bytes, self._process.memory_info().rss)
        return self._cpu_s() - self._cpu_at_start


def watched(
    pid: int | None, action: Callable[[], float]
) -> tuple[float, float | None, float | None]:
    """Run ``action`` (it returns its seconds); those seconds, and ``pid``'s CPU seconds and
    peak RSS in MB (10**6 bytes) meanwhile (None and None when there is no ``pid``)."""
    if pid is None:
        return action(), None, None
    watch = ProcessWatch(pid)
    watch.start()
    try:
        elapsed_s = action()
    finally:
        cpu_s = watch.stop()
    return elapsed_s, cpu_s, watch.peak_rss_bytes / 1e6
