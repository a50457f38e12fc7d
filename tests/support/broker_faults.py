# Strategy: what a broker-fault scenario (issue 9, issue 30) needs besides its clients: the
# state of the Apache Kafka cluster it hurts, a freeze that is certain, and the proxy it watches.
#
#   cluster     testbed/kafka_cluster.py runs the nodes and hurts them with real signals:
#               `kill` (SIGKILL: a crash) and `start` on the same ports and data, `pause` /
#               `resume` (SIGSTOP / SIGCONT: a broker that hangs with its sockets open).
#               `partition_state` reads a partition's leader and in-sync replicas straight from
#               the cluster (a Metadata request to one node after another, never the proxy:
#               a client library would wait on a frozen node it knows);
#               `wait_for_isr` waits for a replica set to settle.
#   freeze      SIGSTOP returns before a busy multi-threaded JVM has stopped everywhere; a
#               request sent in that gap is still answered (seen: answers 1 ms after the
#               signal). `freeze` returns only once every thread of the process is stopped.
#   ProxyHttp   the proxy's /healthz and /metrics, read with the standard library and the
#               Prometheus text parser the metrics tests already use.
#
# Nothing here mocks Kafka: the broker is the real JVM and the faults are real signals.
"""Freeze a Kafka node for certain, read a partition's leader and ISR, read the proxy's HTTP."""

from __future__ import annotations

import socket
import struct
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kafka.protocol.old.metadata import MetadataRequest, MetadataResponse
from prometheus_client.parser import text_string_to_metric_families

from testbed.kafka_cluster import KafkaCluster

__all__ = [
    "PartitionState",
    "ProxyHttp",
    "all_threads_stopped",
    "freeze",
    "partition_state",
    "wait_for_isr",
]

_FREEZE_TIMEOUT_S = 5.0
_METADATA_TIMEOUT_S = 3.0


def all_threads_stopped(pid: int) -> bool:
    """True once every thread of ``pid`` is in state T (stopped)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        # "tid (comm) STATE ...": comm may contain spaces and parentheses.
        if stat.rpartition(")")[2].split()[0] not in ("T", "t"):
            return False
    return True


def freeze(cluster: KafkaCluster, node_id: int) -> None:
    """SIGSTOP ``node_id`` and return once every one of its threads has stopped."""
    cluster.pause(node_id)
    pid = cluster.node(node_id).pid
    assert pid is not None
    deadline = time.monotonic() + _FREEZE_TIMEOUT_S
    while not all_threads_stopped(pid):
        assert time.monotonic() < deadline, f"node {node_id} did not stop within 5 s"
        time.sleep(0.005)


@dataclass(frozen=True)
class PartitionState:
    """A partition's leader (-1: none) and in-sync replicas, as the cluster reports them."""

    leader: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


def partition_state(bootstrap: str, topic: str, partition: int = 0) -> PartitionState:
    """``topic``/``partition`` as Metadata v5 from the first of ``bootstrap``'s addresses that
    answers within a few seconds (the cluster, not the proxy; a frozen node is skipped)."""
    request = MetadataRequest[5](topics=[topic], allow_auto_topic_creation=False)
    request.with_header(correlation_id=1, client_id="fault-scenario")
    frame = request.encode(header=True, framed=True)
    problems = []
    for address in bootstrap.split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=_METADATA_TIMEOUT_S) as sock:
                sock.sendall(frame)
                size = struct.unpack(">i", _read(sock, 4))[0]
                response = MetadataResponse[5].decode(_read(sock, size)[4:])
        except OSError as error:
            problems.append(f"{address}: {error!r}")
            continue
        for _error, name, _internal, partitions in response.topics:
            for _code, index, leader, replicas, isr, _offline in partitions:
                if name == topic and index == partition:
                    return PartitionState(leader, tuple(sorted(isr)), tuple(replicas))
        problems.append(f"{address}: no {topic}/{partition}")
    raise AssertionError(f"no broker described {topic}/{partition}: {problems}")


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def wait_for_isr(
    bootstrap: str, topic: str, partition: int, isr: set[int], timeout_s: float = 60.0
) -> PartitionState:
    """Wait until the partition's in-sync replicas are exactly ``isr`` (hang guard)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = partition_state(bootstrap, topic, partition)
        if set(state.isr) == isr:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}/{partition}: ISR {state.isr}, not {sorted(isr)}")
        time.sleep(0.2)


@dataclass(frozen=True)
class ProxyHttp:
    """The proxy's HTTP endpoint (``--metrics 127.0.0.1:PORT``)."""

    port: int

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
        """Status and body of ``GET path``; (0, reason) when nothing answers."""
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, repr(error)

    def healthy(self) -> bool:
        return self.get("/healthz") == (200, "ok\n")

    def scrape(self) -> dict[str, float]:
        """Every sample of /metrics, keyed ``name`` or ``name{label="value",...}``."""
        status, text = self.get("/metrics")
        if status != 200:
            raise AssertionError(f"/metrics answered {status}: {text[:200]}")
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def wait_until(self, name: str, want: float, timeout_s: float) -> tuple[float, float]:
        """Poll /metrics until sample ``name`` equals ``want``; return (value, seconds waited).

        The value returned is the last one seen, so a caller asserting on it gets the figure
        that did not settle. This is a hang guard, not a timing measurement.
        """
        started = time.monotonic()
        value = float("nan")
        while True:
            value = self.scrape().get(name, float("nan"))
            waited = time.monotonic() - started
            if value == want or waited > timeout_s:
                return value, waited
            time.sleep(0.1)
