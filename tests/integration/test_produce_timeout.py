# Strategy: freeze a private one-node Apache Kafka with SIGSTOP for 3 s behind a private proxy
# and watch two producers through it at once:
#   - a raw socket sends one acks=all Produce with timeout_ms=1000 and times the answer: the
#     proxy must answer REQUEST_TIMED_OUT itself at ~1 s (a forwarding proxy answers only when
#     the broker wakes, at ~3 s), and after SIGCONT the same connection must carry on, which
#     proves the broker's late answer was dropped without desynchronising anything;
#   - confluent-kafka (idempotent, request.timeout.ms=1000) sends a record every 20 ms across
#     the stop: it sees the timeout, retries, and every record is acknowledged after SIGCONT.
# Then everything is read back from the broker directly, not through the proxy: every
# acknowledged record is there, and so is every record the client was asked to send.
# The broker is private because SIGSTOP would freeze every other test's broker too. Kafka
# answers a produce by its timeout_ms itself, so while the broker runs, a REQUEST_TIMED_OUT
# could be either's: the broker is frozen for the whole window, every thread of the JVM
# stopped (tests/support/broker_faults.py `freeze`), so the early one can only be the proxy's.
"""Produce held in the proxy: REQUEST_TIMED_OUT at timeout_ms while the broker is frozen."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, Message, Producer

from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.processes import free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.integration._kafka_raw import REQUEST_TIMED_OUT, RawConnection, batch
from tests.support.broker_faults import freeze

TIMEOUT_MS = 1000
STOP_S = 3.0
#: The proxy answers at timeout_ms; it must not answer before it, and a forwarding proxy
#: (which waits for the frozen broker) answers only after STOP_S.
EARLIEST_S = TIMEOUT_MS / 1000 - 0.05
LATEST_S = 2.0
CLIENT_INTERVAL_S = 0.02


@dataclass(frozen=True)
class Stack:
    cluster: KafkaCluster
    proxy: ProxyProcess
    metrics: str


@pytest.fixture
def stack() -> Iterator[Stack]:
    metrics = f"127.0.0.1:{free_port()}"
    with (
        running_kafka(1) as cluster,
        running_proxy(cluster.bootstrap(), "--metrics", metrics) as proxy,
    ):
        yield Stack(cluster, proxy, metrics)


@contextlib.contextmanager
def _frozen_for(cluster: KafkaCluster, seconds: float) -> Iterator[threading.Event]:
    """Freeze the node (every thread stopped); SIGCONT it after ``seconds`` or when the block
    ends, if sooner.

    The SIGCONT comes from a timer thread, so a request in the block that waits for the
    frozen broker (as it does through a proxy that only forwards) cannot delay it. The
    event yielded is set once the process runs again.
    """
    resumed = threading.Event()
    node_id = cluster.nodes[0].node_id

    def resume() -> None:
        if not resumed.is_set():
            cluster.resume(node_id)
            resumed.set()

    timer = threading.Timer(seconds, resume)
    freeze(cluster, node_id)
    try:
        timer.start()
        yield resumed
    finally:
        timer.cancel()
        timer.join()
        resume()


def _healthy(metrics: str) -> bool:
    with urllib.request.urlopen(f"http://{metrics}/healthz", timeout=2) as reply:
        return bool(reply.status == 200)


@dataclass
class ClientRun:
    """What the confluent-kafka producer was asked to send and what it was told."""

    sent: list[bytes] = field(default_factory=list)
    acked: list[bytes] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    timeouts_logged: list[float] = field(default_factory=list)
    produce_rtts: list[tuple[float, float]] = field(default_factory=list)


class _TimeoutLog(logging.Handler):
    """Collects when librdkafka received a produce answer that said REQUEST_TIMED_OUT.

    librdkafka sends request.timeout.ms as the Produce timeout_ms but waits for the answer
    much longer itself (socket.timeout.ms), so the only timeout it can report at ~1 s is the
    one the proxy answers with. Its debug log ("protocol", "msg") says when each
    ProduceResponse arrived and after what round-trip time, and names the error.
    """

    _RTT = re.compile(r"Received ProduceResponse .*rtt (?P<rtt_ms>[\d.]+)ms")

    def __init__(self, run: ClientRun, started: float) -> None:
        super().__init__(logging.DEBUG)
        self._run, self._started = run, started

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        now = time.monotonic() - self._started
        found = self._RTT.search(text)
        if found:
            self._run.produce_rtts.append((now, float(found["rtt_ms"]) / 1000))
        if "Request timed out" in text:
            self._run.timeouts_logged.append(now)


def _client_producer(
    bootstrap: str, topic: str, stop: threading.Event, run: ClientRun, started: float
) -> None:
    logger = logging.getLogger(f"rdkafka-{topic}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(_TimeoutLog(run, started))
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "request.timeout.ms": TIMEOUT_MS,
            "message.timeout.ms": 60_000,
            "linger.ms": 5,
            "debug": "msg,protocol",
            "logger": logger,
        }
    )

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        value = msg.value() or b""
        if err is None:
            run.acked.append(value)
        else:
            run.failed.append(f"{value!r}: {err}")

    n = 0
    while not stop.is_set():
        value = b"client-%05d" % n
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
        run.sent.append(value)
        n += 1
        producer.poll(CLIENT_INTERVAL_S)
    left = producer.flush(60)
    if left:
        run.failed.append(f"{left} records still queued after flush(60)")


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s"
        time.sleep(0.01)


def _read_back(bootstrap: str, topic: str) -> list[bytes]:
    """Every value in partition 0, read straight from the broker."""
    values: list[bytes] = []
    with RawConnection(bootstrap) as conn:
        while True:
            answer = conn.fetch(topic, len(values), max_wait_ms=100)
            assert answer.error_code == 0, answer
            if not answer.values:
                return values
            values.extend(answer.values)


def test_frozen_broker_gives_request_timed_out_and_loses_nothing(stack: Stack) -> None:
    topic = create_topic(stack.proxy.bootstrap, "produce-timeout")
    client_run, stop_client = ClientRun(), threading.Event()
    started = time.monotonic()
    client = threading.Thread(
        target=_client_producer,
        args=(stack.proxy.bootstrap, topic, stop_client, client_run, started),
        daemon=True,
    )
    try:
        with RawConnection(stack.proxy.bootstrap) as conn:
            assert conn.produce(topic, batch(b"raw-before"), timeout_ms=TIMEOUT_MS)[0] == 0
            client.start()
            _wait_for(lambda: len(client_run.acked) >= 20, "the client's first acknowledgements")
            frozen_at = time.monotonic() - started
            with _frozen_for(stack.cluster, STOP_S) as resumed:
                sent_at = time.monotonic()
                error_code, _ = conn.produce(topic, batch(b"raw-during"), timeout_ms=TIMEOUT_MS)
                answered_s = time.monotonic() - sent_at
                healthy_while_frozen = not resumed.is_set() and _healthy(stack.metrics)
                resumed.wait(timeout=STOP_S + 5)
            resumed_at = time.monotonic() - started
            # The same connection carries on: the broker's late answer to "raw-during" must
            # not be taken for this request's answer (RawConnection checks correlation ids).
            after_code, _ = conn.produce(topic, batch(b"raw-after"), timeout_ms=10_000)
            time.sleep(0.5)  # the client sends a few more after the broker is back
    finally:
        stop_client.set()
        if client.is_alive():
            client.join(timeout=90)
    assert not client.is_alive(), "the client producer did not finish"

    in_broker = _read_back(stack.cluster.bootstrap(), topic)
    stored = set(in_broker)
    # Produce answers the client received while the broker was frozen, and their rtts.
    frozen_rtts = [rtt for at, rtt in client_run.produce_rtts if frozen_at <= at <= resumed_at]
    report = (
        f"raw Produce(acks=all, timeout_ms={TIMEOUT_MS}) sent while the broker was frozen: "
        f"error {error_code} after {answered_s * 1000:.0f} ms (bound {EARLIEST_S:.2f}-"
        f"{LATEST_S:.1f} s; broker frozen {frozen_at:.2f}-{resumed_at:.2f} s); "
        f"confluent-kafka: {len(client_run.sent)} sent, {len(client_run.acked)} acked, "
        f"{len(client_run.failed)} failed, 'Request timed out' logged at "
        f"{[round(t, 2) for t in client_run.timeouts_logged[:6]]} s, produce answers while "
        f"frozen after {_ms(frozen_rtts[:6])}; broker holds {len(in_broker)} records "
        f"({len(in_broker) - len(stored)} duplicates); raw-during "
        f"{'is' if b'raw-during' in stored else 'is not'} in the broker"
    )
    print(report)
    assert error_code == REQUEST_TIMED_OUT, report
    assert EARLIEST_S <= answered_s <= LATEST_S, report
    assert healthy_while_frozen and stack.proxy.alive(), report
    assert after_code == 0, report
    assert not client_run.failed, f"{client_run.failed[:3]}: {report}"
    # Nothing acknowledged that the broker does not have; nothing the client sent is lost.
    acknowledged = {b"raw-before", b"raw-after", *client_run.acked}
    assert acknowledged <= stored, f"acknowledged, not stored: {acknowledged - stored}: {report}"
    assert set(client_run.sent) <= stored, report
    assert set(client_run.acked) == set(client_run.sent), report
    # The client saw REQUEST_TIMED_OUT from the proxy at ~1 s and retried (no failures above):
    # some answers took timeout_ms, none waited for the broker (requests sent just before
    # the freeze may have been answered at once; the log is read a poll later).
    assert any(frozen_at <= t <= resumed_at for t in client_run.timeouts_logged), report
    assert any(EARLIEST_S <= rtt <= LATEST_S for rtt in frozen_rtts), report
    assert all(rtt <= LATEST_S for rtt in frozen_rtts), report


def _ms(seconds: list[float]) -> str:
    return "[" + ", ".join(f"{s * 1000:.0f}" for s in seconds) + "] ms"
