"""The real proxy's HTTP endpoint: /readyz follows the upstream, /metrics moves with traffic,
and a request log on a stalled destination costs clients nothing.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from kafka import KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from testbed.kafka_cluster import running_kafka
from testbed.processes import Broker, free_port
from testbed.proxy_process import running_proxy

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _scrape(port: int) -> Samples:
    status, text = _get(port, "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _produce(bootstrap: str, count: int, value: bytes = b"v" * 100) -> None:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    try:
        for i in range(count):
            producer.send(topic, key=b"%d" % i, value=value).get(timeout=30)
    finally:
        producer.close()


def test_readyz_is_false_until_the_upstream_answers() -> None:
    broker_port, metrics_port = free_port(), free_port()
    with running_proxy(f"127.0.0.1:{broker_port}", "--metrics", f"127.0.0.1:{metrics_port}"):
        assert _get(metrics_port, "/healthz") == (200, "ok\n")
        status, body = _get(metrics_port, "/readyz")
        assert status == 503, body
        with running_kafka(1, port=broker_port):
            deadline = time.monotonic() + 60  # a hang guard: the refresher backs off to 5 s
            while _get(metrics_port, "/readyz")[0] != 200:
                assert time.monotonic() < deadline, "never ready after the broker started"
                time.sleep(0.1)
            failed = _scrape(metrics_port)[
                ("purgatory_proxy_metadata_refreshes_total", (("result", "failed"),))
            ]
            assert failed >= 1


def test_counters_move_as_traffic_flows(kafka_broker: Broker) -> None:
    metrics_port = free_port()
    with running_proxy(kafka_broker.bootstrap, "--metrics", f"127.0.0.1:{metrics_port}") as proxy:
        before = _scrape(metrics_port)
        _produce(proxy.bootstrap, 20)
        after = _scrape(metrics_port)

    def moved(name: str, *labels: tuple[str, str]) -> float:
        key = (name, tuple(sorted(labels)))
        return after.get(key, 0.0) - before.get(key, 0.0)

    produce = ("api", "Produce")
    assert moved("purgatory_proxy_requests_total", produce, ("outcome", "ok")) == 20
    assert moved("purgatory_proxy_request_latency_seconds_count", produce) == 20
    assert moved("purgatory_proxy_upstream_latency_seconds_count", produce) == 20
    assert moved("purgatory_proxy_request_bytes_total", produce) > 20 * 100
    assert moved("purgatory_proxy_response_bytes_total", produce) > 0
    assert moved("purgatory_proxy_requests_total", ("api", "Metadata"), ("outcome", "ok")) >= 1
    assert moved("purgatory_proxy_connections_accepted_total", ("listener", "bootstrap")) >= 1
    assert moved("purgatory_proxy_connections_accepted_total", ("listener", "broker")) >= 1
    assert moved("purgatory_proxy_upstream_connects_total", ("result", "ok")) >= 2
    assert after[("purgatory_proxy_memory_pool_limit_bytes", ())] == 256 * 1024 * 1024


def test_a_stalled_request_log_never_stalls_clients(kafka_broker: Broker, tmp_path: Path) -> None:
    # A FIFO nobody reads: the log writer blocks in open() for the whole test, like a hung
    # disk. Clients must not notice; the lost lines are counted; shutdown still completes.
    fifo = tmp_path / "requests.fifo"
    os.mkfifo(fifo)
    metrics_port = free_port()
    with running_proxy(
        kafka_broker.bootstrap,
        "--metrics", f"127.0.0.1:{metrics_port}",
        "--request-log", str(fifo),
        env={"PURGATORY_PROXY_LOG__REQUESTS_QUEUE_LINES": "10"},
    ) as proxy:  # fmt: skip
        _produce(proxy.bootstrap, 100)
        seen = _scrape(metrics_port)
        produced = seen[("purgatory_proxy_requests_total", (("api", "Produce"), ("outcome", "ok")))]
        assert produced == 100
        assert seen[("purgatory_proxy_request_log_written_lines_total", ())] == 0
        assert seen[("purgatory_proxy_request_log_queued_lines", ())] == 10
        # Every request beyond the first batch (stuck) and the queue (full) was dropped.
        dropped = seen[("purgatory_proxy_request_log_dropped_lines_total", ())]
        assert dropped >= 100 - 10 - 10
        assert proxy.stop(signal.SIGTERM) == 0
