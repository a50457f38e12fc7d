"""The command line as a user runs it: embedded broker, a real client round trip, clean exit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic as KafkaNewTopic
from prometheus_client.parser import text_string_to_metric_families

from proxy.config import UNLIMITED
from proxy.observability.readiness import READY_LINE
from testbed.processes import Broker, free_port, wait_for_port
from testbed.proxy_process import running_proxy
from tests.support.aiokafka_roundtrip import aiokafka_roundtrip

#: An upstream nobody listens on.
_NOWHERE = "127.0.0.1:1"


def test_run_without_upstream_starts_embedded_broker_and_exits_cleanly() -> None:
    with running_proxy(None) as proxy:
        proxy.wait_for_log(r"no upstream configured: started the embedded Tansu broker on \S+")
        # README: wait for the ready line (or /readyz), which comes once the brokers are known.
        proxy.wait_for_log(r"broker \d+ is served at .*\n.*" + re.escape(READY_LINE))
        assert "no limit on client connections at once" in proxy.log_text()
        assert str(UNLIMITED) not in proxy.log_text()
        got = asyncio.run(aiokafka_roundtrip(proxy.bootstrap))
        assert got == [(b"k%d" % i, b"v%d" % i) for i in range(10)]
        assert proxy.stop(signal.SIGTERM) == 0
        assert "received SIGTERM: shutting down" in proxy.log_text()


def test_listening_is_not_ready_while_the_cluster_is_unreachable() -> None:
    """`listening on` comes as soon as the bootstrap port is bound; only the ready line (and
    /readyz) say the proxy can serve, and neither does while no broker answers."""
    metrics = free_port()
    with running_proxy(_NOWHERE, "--metrics", f"127.0.0.1:{metrics}") as proxy:
        proxy.wait_for_log(r"purgatory-proxy listening on ")
        proxy.wait_for_log(r"cannot fetch upstream metadata \(will retry\)")
        status, reason = _readyz(metrics)
        assert status == 503 and "waiting for upstream metadata" in reason
        assert "ready:" not in proxy.log_text()
        assert proxy.stop() == 0


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_second_signal_does_not_cut_the_drain_short(kafka_broker: Broker) -> None:
    """`make run` hands its SIGTERM to the proxy, which a process-group kill (a terminal,
    systemd's control group) has reached already: a second signal in the drain is logged,
    and the drain goes on (a consumer's held long-poll is answered), exit 0."""
    metrics = free_port()
    with running_proxy(kafka_broker.bootstrap, "--metrics", f"127.0.0.1:{metrics}") as proxy:
        stop = threading.Event()
        polling = threading.Thread(target=_long_poll, args=(proxy.bootstrap, stop), daemon=True)
        polling.start()
        try:
            deadline = time.monotonic() + 60  # hang guard
            while _gauge(metrics, "purgatory_proxy_fanin_held_fetches") < 1:
                assert time.monotonic() < deadline, "no fetch was ever held"
                time.sleep(0.05)
            os.kill(proxy.pid, signal.SIGTERM)
            proxy.wait_for_log(r"received SIGTERM: shutting down")
            assert proxy.stop(signal.SIGTERM, timeout_s=30) == 0
        finally:
            stop.set()
            polling.join(timeout=30)
        text = proxy.log_text()
    assert "received SIGTERM again: already shutting down" in text
    assert "stopped accepting; draining connections" in text


def _long_poll(bootstrap: str, stop: threading.Event) -> None:
    """A consumer without a group polling an empty topic: its fetches wait in the proxy."""
    topic = f"cli-drain-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KafkaNewTopic(topic, 1, 1)])
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=20_000)
    consumer.assign([TopicPartition(topic, 0)])
    try:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # the proxy goes away under it
                consumer.poll(timeout_ms=200)
    finally:
        consumer.close()


def _gauge(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return 0.0


def test_sigint_also_exits_cleanly() -> None:
    with running_proxy(None) as proxy:
        assert proxy.stop(signal.SIGINT) == 0


def test_bad_flag_value_exits_with_message_naming_the_key() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "proxy", "run", "--memory-limit", "lots"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "memory.limit" in run.stderr


def test_dev_broker_runs_tansu_alone() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "dev-broker", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port("127.0.0.1", port, 30, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
