# Strategy: a real Apache Kafka cluster in KRaft mode, one JVM per node, each node both broker
# and controller (combined mode, a static quorum of every node), on free loopback ports, owned
# by one context manager that kills every JVM by PID however the block ends. With
# `controllers=N` only the first N nodes are voters and the others brokers alone: a cluster
# that keeps its quorum (and so can still shrink an ISR) while two of three brokers are down.
#
# Listeners, SASL, the authorizer and TLS are as testbed/kafka_properties.py writes them; one
# node's process is testbed/kafka_node.py's.
#
# A node can be killed, paused (SIGSTOP: a hung broker) and started again on the same ports
# and data. Logs and data live in one folder per cluster; the logs are kept (their path is in
# every error) and the data removed at the end.
#
# What reached a broker: with `request_log=True` each node writes Kafka's own request log
# (`kafka.request.logger` at DEBUG: one JSON line per completed request, with its API, the
# listener it came on and the request's fields) to requests.log in its folder, and
# `requests()` / `request_counts()` read it. It costs the broker a JSON encoding per request,
# so it is off unless a test asks (never in benchmarks).
#
# Kafka's own meters: with `jmx=True` each node serves JMX on a free loopback port (no auth, no
# TLS, bound to 127.0.0.1), where testbed/kafka_jmx.py reads its request counters; that costs
# the broker nothing per request, so benchmarks count requests that way.
"""`running_kafka`: an Apache Kafka KRaft cluster of 1 or more nodes for the tests."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.kafka_install import KAFKA_VERSION, ensure_kafka
from testbed.kafka_node import KafkaNode
from testbed.kafka_properties import (
    CLIENT_LISTENERS,
    SASL_MECHANISMS,
    USERS,
    log4j_properties,
    server_properties,
)
from testbed.processes import free_port

if TYPE_CHECKING:  # testbed.certs needs `cryptography` (the test extra): only TLS runs load it,
    # so `make run-kafka` runs on the runtime install
    from testbed.certs import CertFiles, Pki

__all__ = [
    "CLIENT_LISTENERS",
    "SASL_MECHANISMS",
    "USERS",
    "KafkaCluster",
    "KafkaNode",
    "running_kafka",
]

_STARTED = "Kafka Server started"
_START_TIMEOUT_S = float(os.environ.get("KAFKA_START_TIMEOUT_S", "120"))
_REQUEST_MARKER = "Completed request:"


@dataclass
class KafkaCluster:
    """A running cluster. Addresses are per client listener kind (see CLIENT_LISTENERS)."""

    version: str
    nodes: tuple[KafkaNode, ...]
    listeners: tuple[str, ...]
    directory: Path
    pki: Pki | None
    authorizer: bool
    _libs: Path = field(repr=False)

    def requests(self, node_id: int) -> list[dict[str, Any]]:
        """Every request node ``node_id`` completed on a client listener so far, as Kafka's
        request log writes it (needs ``request_log=True``): requestHeader, request,
        response, listener, principal, ..."""
        path = self.node(node_id).request_log_path
        assert path.exists(), "start the cluster with request_log=True"
        found = []
        for line in path.read_text(errors="replace").splitlines():
            _, marker, text = line.partition(_REQUEST_MARKER)
            if not marker:
                continue
            with contextlib.suppress(json.JSONDecodeError):  # a line still being written
                entry = json.loads(text)
                if entry.get("listener") in self.listeners:
                    found.append(entry)
        return found

    def request_counts(self, node_id: int) -> Counter[str]:
        """Requests node ``node_id`` completed on client listeners, by API name ("Produce")."""
        return Counter(
            _api_name(entry["requestHeader"]["requestApiKeyName"])
            for entry in self.requests(node_id)
        )

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        """Every node's address on ``listener``, comma-separated (what clients are given)."""
        return ",".join(node.address(listener) for node in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(node for node in self.nodes if node.node_id == node_id)

    def kill(self, node_id: int, signum: int = signal.SIGKILL) -> None:
        """Stop one node by ``signum`` (SIGKILL: a crash; SIGTERM: a controlled shutdown)."""
        node = self.node(node_id)
        if node.process is not None:
            node.process.send_signal(signum)
            node.process.wait(timeout=60)
            node.process = None

    def pause(self, node_id: int) -> None:
        """Freeze one node (SIGSTOP): a broker that hangs with its sockets open."""
        pid = self.node(node_id).pid
        assert pid is not None, f"node {node_id} is not running"
        os.kill(pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        pid = self.node(node_id).pid
        assert pid is not None, f"node {node_id} is not running"
        os.kill(pid, signal.SIGCONT)

    def start(self, node_id: int) -> None:
        """Start one (stopped) node again on its ports and data; return once it serves."""
        node = self.node(node_id)
        assert not node.running(), f"node {node_id} is running"
        node.launch(self._libs)
        self._wait_started([node])

    def _wait_started(self, nodes: list[KafkaNode]) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        waiting = list(nodes)
        while waiting:
            for node in list(waiting):
                offset = int(node.directory.joinpath(".log-offset").read_text())
                if _STARTED in node.log_text()[offset:]:
                    waiting.remove(node)
                elif not node.running():
                    raise RuntimeError(
                        f"Kafka {self.version} node {node.node_id} exited before serving; "
                        f"log {node.log_path}:\n{node.log_text()[-3000:]}"
                    )
            if waiting and time.monotonic() > deadline:
                ids = [node.node_id for node in waiting]
                raise RuntimeError(
                    f"Kafka {self.version} nodes {ids} did not start within "
                    f"{_START_TIMEOUT_S:.0f} s; logs in {self.directory}"
                )
            time.sleep(0.1)

    def stop_all(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                if node.process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(node.process.pid, signal.SIGCONT)  # a paused JVM cannot die
                    node.process.kill()
                node.process.wait(timeout=30)
                node.process = None


def _api_name(upper_snake: str) -> str:
    """PRODUCE -> Produce, FIND_COORDINATOR -> FindCoordinator (the schema names)."""
    return "".join(part.capitalize() for part in upper_snake.split("_"))


def _cluster_id() -> str:
    """A random id as Kafka writes them; never one that starts with "-" (an option to the
    3.9 storage tool's parser), as Kafka's own Uuid.randomUuid avoids."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _format(libs: Path, properties: Path, cluster_id: str, log: Path) -> None:
    scram = [
        arg
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        for name, secret in USERS.items()
        for arg in ("--add-scram", f"{mechanism}=[name={name},password={secret}]")
    ]
    command = [
        "java",
        f"-Dlog4j2.configurationFile={properties.parent / 'log4j2.properties'}",
        "-cp",
        f"{libs}/*",
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(properties),
        *scram,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"formatting Kafka storage failed:\n{done.stdout}{done.stderr}")


def _pki(root: Path) -> Pki:
    """Throwaway certificates under ``root``/pki (imported here: see TYPE_CHECKING above)."""
    from testbed.certs import make_pki

    return make_pki(root / "pki")


@contextlib.contextmanager
def running_kafka(
    nodes: int = 1,
    *,
    version: str = KAFKA_VERSION,
    listeners: tuple[str, ...] = ("PLAINTEXT",),
    ssl_client_auth: str = "none",
    authorizer: bool = False,
    reauth_ms: int | None = None,
    listener_certs: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    request_log: bool = False,
    jmx: bool = False,
    port: int | None = None,
    directory: Path | None = None,
    controllers: int | None = None,
) -> Iterator[KafkaCluster]:
    """Run an Apache Kafka cluster of ``nodes`` combined nodes for the block.

    ``listeners``: client listener kinds (CLIENT_LISTENERS). ``ssl_client_auth``: none,
    requested or required on SSL listeners. ``authorizer``: StandardAuthorizer, admin super
    user. ``reauth_ms``: connections.max.reauth.ms (KIP-368). ``listener_certs``: a TLS
    listener kind -> the name of the testbed/certs.py Pki certificate it serves instead of
    ``server`` (e.g. ``{"SSL": "wrong_host"}``). ``extra``: more broker properties.
    ``request_log``: Kafka's request log, for ``requests()`` and ``request_counts()``. ``jmx``:
    each node serves JMX on a free loopback port (``KafkaNode.jmx_port``; testbed/kafka_jmx.py
    reads it). ``directory``: where logs and data go (default: a new temporary folder, whose
    logs stay after the block; their path is in every startup error).
    ``controllers``: only the first this many nodes are controllers (the quorum's voters);
    the others are brokers only (default: every node is both).
    """
    unknown = set(listeners) - set(CLIENT_LISTENERS)
    assert not unknown, f"unknown listener kinds {unknown}; known: {CLIENT_LISTENERS}"
    certs = dict(listener_certs or {})
    assert set(certs) <= {"SSL", "SASL_SSL"} & set(listeners), f"no TLS listener for {certs}"
    libs = ensure_kafka(version)
    root = directory or Path(tempfile.mkdtemp(prefix=f"kafka-{version}-"))
    pki = _pki(root) if {"SSL", "SASL_SSL"} & set(listeners) else None
    names = [*listeners, "INTERNAL", "CONTROLLER"]
    members = tuple(
        KafkaNode(
            node_id,
            {name: free_port() for name in names},
            root / f"node-{node_id}",
            jmx_port=free_port() if jmx else None,
        )
        for node_id in range(1, nodes + 1)
    )
    if port is not None:
        members[0].ports[listeners[0]] = port
    voters = members[: controllers or nodes]
    assert voters, "a cluster needs at least one controller"
    cluster = KafkaCluster(version, members, tuple(listeners), root, pki, authorizer, libs)
    cluster_id = _cluster_id()
    try:
        for node in members:
            node.directory.mkdir(parents=True)
            logging = log4j_properties(node.directory, request_log=request_log)
            (node.directory / "log4j2.properties").write_text(logging)
            if pki is not None:
                for listener, name in {"": "server", **certs}.items():
                    served: CertFiles = getattr(pki, name)
                    keystore = served.key.read_text() + served.cert.read_text()
                    suffix = f"-{listener}" if listener else ""
                    (node.directory / f"keystore{suffix}.pem").write_text(keystore)
            properties = node.properties_path
            properties.write_text(
                server_properties(
                    node,
                    members,
                    voters,
                    version=version,
                    listeners=tuple(listeners),
                    pki=pki,
                    ssl_client_auth=ssl_client_auth,
                    authorizer=authorizer,
                    reauth_ms=reauth_ms,
                    listener_certs=certs,
                    extra=extra or {},
                )
            )
            _format(libs, properties, cluster_id, node.directory / "format.log")
        for node in members:
            node.launch(libs)
        cluster._wait_started(list(members))
        yield cluster
    finally:
        cluster.stop_all()
        for node in members:
            shutil.rmtree(node.directory / "data", ignore_errors=True)
