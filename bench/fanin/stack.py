# Strategy: everything the fan-in benchmark runs besides its consumers, as processes owned by
# one contextlib.ExitStack so they stop in reverse order however a run ends:
#
#   broker   a private one, fresh for every N, with one fresh single-partition topic: Apache
#            Kafka (one KRaft node, testbed/kafka_cluster.running_kafka), or Tansu
#            (testbed/processes.running_tansu) with `--broker tansu`.
#   relays   bench/fanin/relay.py, 1 or more processes sharing one port (SO_REUSEPORT), each
#            with its own control port for its counts. Both routes go through them:
#                direct:  consumers -> relay -> broker
#                proxy:   consumers -> proxy -> relay -> broker   (--upstream is the relay)
#   proxy    `python -m proxy run` (testbed/proxy_process.running_proxy) with /metrics
#            served, so the purgatory's gauges and counters can be read when they exist.
#
# Descriptors: this process raises its RLIMIT_NOFILE before starting anything, and the
# children (broker, relays, proxy) inherit it: the soft limit to the hard limit, and, when it
# may (root), the hard limit itself to what the largest N needs (DESCRIPTORS_PER_CONSUMER per
# consumer in the busiest process). How many relay processes a run needs follows from that
# limit (a relay holds two descriptors per connection) and from the CPU a relay can use.
#
# Process accounting (psutil): CPU seconds (user + system) and RSS of each PID, read when
# the measurement asks; CPU is exact from the kernel's counters whatever the sampling.
"""The processes behind a fan-in measurement: broker, counting relays, proxy."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import resource
import socket
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.fanin.relay import raise_descriptor_limit as relay_raise_descriptor_limit
from bench.throughput.load import create_topic
from testbed.kafka_cluster import running_kafka
from testbed.kafka_install import KAFKA_VERSION
from testbed.processes import Broker, free_port, running_process, running_tansu
from testbed.proxy_process import ProxyProcess, running_proxy

__all__ = [
    "BROKERS",
    "DescriptorLimits",
    "Relays",
    "Stack",
    "cpu_seconds",
    "open_descriptors",
    "raise_descriptor_limit",
    "rss_bytes",
    "running_stack",
    "scrape_metrics",
]

ROOT = Path(__file__).resolve().parents[2]
#: Descriptors a process keeps for itself (listeners, logs, the interpreter's own files).
DESCRIPTOR_MARGIN = 200
#: Descriptors the busiest process may need per consumer (a relay: two per connection; the
#: proxy: one per consumer plus an upstream connection while a request is forwarded), with
#: room to spare so a proxy that needs more shows it in the count instead of failing.
DESCRIPTORS_PER_CONSUMER = 4
#: The brokers a run can stand on, and how its report names each.
BROKERS = {
    "kafka": f"Apache Kafka {KAFKA_VERSION} (one KRaft node)",
    "tansu": "Tansu (memory storage)",
}
#: From this many consumers on, the direct route's relays are at least two processes: one
#: Python relay cannot forward 2N Fetch/s on one core (both routes go through them).
RELAYS_FOR_CPU_FROM = 5_000


@dataclass(frozen=True)
class DescriptorLimits:
    """RLIMIT_NOFILE of this process before and after raising it (soft, hard)."""

    soft_before: int
    soft: int
    hard: int
    hard_before: int = 0
    #: The hard limit asked for (0: none); above ``hard`` when raising it was refused.
    wanted: int = 0

    def relay_processes(self, n: int) -> int:
        """Relay processes for ``n`` relayed connections: two descriptors each must fit a
        process's limit, and from RELAYS_FOR_CPU_FROM consumers on two share the work."""
        per_process = max(1, self.soft - DESCRIPTOR_MARGIN)
        by_descriptors = math.ceil(2 * n / per_process)
        return max(1, by_descriptors, 2 if n >= RELAYS_FOR_CPU_FROM else 1)

    def consumers_fit(self, n: int) -> bool:
        """Whether this process can hold ``n`` consumer connections."""
        return n + DESCRIPTOR_MARGIN <= self.soft


def raise_descriptor_limit(max_n: int = 0) -> DescriptorLimits:
    """Raise RLIMIT_NOFILE for ``max_n`` consumers (children inherit it): the hard limit to
    what they need when privileged, the soft limit to the hard limit."""
    hard_before = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    target = DESCRIPTORS_PER_CONSUMER * max_n + 10 * DESCRIPTOR_MARGIN
    soft_before, soft, hard = relay_raise_descriptor_limit(target)
    return DescriptorLimits(soft_before, soft, hard, hard_before, target)


@dataclass(frozen=True)
class Relays:
    """Relay processes sharing ``host:port``; each reports its counts on its control port."""

    host: str
    port: int
    pids: tuple[int, ...]
    control_ports: tuple[int, ...]

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def counts(self) -> dict[str, int]:
        """Requests relayed so far by API name, summed over the processes."""
        total: dict[str, int] = {}
        for port in self.control_ports:
            for name, count in self._snapshot(port)["requests"].items():
                total[name] = total.get(name, 0) + int(count)
        return total

    def errors(self) -> list[str]:
        return [line for port in self.control_ports for line in self._snapshot(port)["errors"]]

    @staticmethod
    def _snapshot(port: int) -> dict[str, Any]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        snapshot: dict[str, Any] = json.loads(data)
        return snapshot


@contextlib.contextmanager
def running_relays(upstream: Broker, processes: int) -> Iterator[Relays]:
    """``processes`` relays in front of ``upstream`` on one free port, for the block."""
    port = free_port()
    controls = [free_port() for _ in range(processes)]
    with contextlib.ExitStack() as stack:
        pids = []
        for control in controls:
            command = [
                sys.executable,
                "-m",
                "bench.fanin.relay",
                "--listen",
                f"127.0.0.1:{port}",
                "--upstream",
                upstream.bootstrap,
                "--control",
                str(control),
            ]
            env = {"PYTHONPATH": str(ROOT)}
            pids.append(stack.enter_context(running_process(command, control, env=env)))
        yield Relays("127.0.0.1", port, tuple(pids), tuple(controls))


@dataclass(frozen=True)
class Stack:
    """A broker with a fresh topic, the relays in front of it, and a proxy in front of those."""

    broker: Broker
    topic: str
    relays: Relays
    proxy: ProxyProcess
    metrics_url: str

    # -- bench.fanin.measure.Target: the direct route is the relay, the other the proxy

    @property
    def forwarder_pid(self) -> int:
        return self.proxy.pid

    def entry(self, route: str) -> tuple[str, int]:
        if route == "proxy":
            return self.proxy.host, self.proxy.port
        return self.relays.host, self.relays.port

    def pids(self) -> dict[str, int]:
        pids = {"broker": self.broker.pid or 0, "proxy": self.proxy.pid, "consumers": os.getpid()}
        for i, pid in enumerate(self.relays.pids):
            pids[f"relay{i}"] = pid
        return pids

    def upstream_counts(self) -> dict[str, int]:
        return self.relays.counts()

    def scrape(self) -> dict[str, float]:
        return scrape_metrics(self.metrics_url)


@contextlib.contextmanager
def running_broker(kind: str) -> Iterator[Broker]:
    """A fresh broker of ``kind`` (a key of BROKERS) for the block, stopped by PID."""
    if kind == "tansu":
        with running_tansu() as tansu:
            yield tansu
        return
    with running_kafka(1) as cluster:
        node = cluster.nodes[0]
        yield Broker("127.0.0.1", node.ports["PLAINTEXT"], node.pid)


@contextlib.contextmanager
def running_stack(
    relay_processes: int, proxy_env: dict[str, str] | None = None, broker_kind: str = "kafka"
) -> Iterator[Stack]:
    """Start the broker, create a topic, start the relays and the proxy; stop them all
    afterwards."""
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(running_broker(broker_kind))
        topic = create_topic(broker.bootstrap)
        relays = stack.enter_context(running_relays(broker, relay_processes))
        metrics_port = free_port()
        proxy = stack.enter_context(
            running_proxy(
                relays.bootstrap,
                "--metrics",
                f"127.0.0.1:{metrics_port}",
                env=proxy_env,
            )
        )
        yield Stack(broker, topic, relays, proxy, f"http://127.0.0.1:{metrics_port}/metrics")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far (0 once it has exited)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def open_descriptors(pid: int) -> int:
    """Descriptors ``pid`` holds open (0 once it has exited)."""
    try:
        return int(psutil.Process(pid).num_fds())
    except psutil.Error:
        return 0


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (0 once it has exited)."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return 0


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)")


def scrape_metrics(url: str) -> dict[str, float]:
    """``name{labels}`` -> value for every sample /metrics serves (empty if unreachable)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    samples: dict[str, float] = {}
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found and not line.startswith("#"):
            samples[found["name"] + (found["labels"] or "")] = float(found["value"])
    return samples
