# Strategy: a real Apache Kafka cluster in KRaft mode, one JVM per node, each node both broker
# and controller (combined mode, a static quorum of every node), on free loopback ports, owned
# by one context manager that kills every JVM by PID however the block ends. With
# `controllers=N` only the first N nodes are voters and the others brokers alone: a cluster
# that keeps its quorum (and so can still shrink an ISR) while two of three brokers are down.
#
#   listeners   one per kind the test asks for, named after its security protocol (PLAINTEXT,
#               SSL, SASL_PLAINTEXT, SASL_SSL), plus INTERNAL (broker to broker) and CONTROLLER.
#   SASL        every SASL listener offers PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER
#               (Kafka's unsecured JWS validator, which is for tests); the users of USERS exist
#               for each mechanism (SCRAM ones created at format time, KIP-900).
#   authorizer  StandardAuthorizer, super user admin, no ACL means no access. Broker-to-broker
#               and controller traffic then authenticate as admin over SASL PLAIN, as a
#               production cluster would, so an anonymous client is not a super user.
#   TLS         PEM key stores (KIP-651) from testbed/certs.py's throwaway CA; a listener may
#               serve another of its certificates (an expired or wrong-host one) instead.
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
from typing import Any

from testbed.certs import CertFiles, Pki, make_pki
from testbed.kafka_install import KAFKA_VERSION, ensure_kafka
from testbed.processes import die_with_parent, free_port

__all__ = [
    "CLIENT_LISTENERS",
    "SASL_MECHANISMS",
    "USERS",
    "KafkaCluster",
    "KafkaNode",
    "running_kafka",
]

#: The client listener kinds a cluster can offer (named after their security protocol).
CLIENT_LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: Users known to every SASL mechanism; admin is the super user when the authorizer is on.
USERS: Mapping[str, str] = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}

_HOST = "127.0.0.1"
_STARTED = "Kafka Server started"
_JVM = ["-Xms128m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
_START_TIMEOUT_S = float(os.environ.get("KAFKA_START_TIMEOUT_S", "120"))


@dataclass
class KafkaNode:
    """One broker-and-controller process: its ports, folder and (while running) process."""

    node_id: int
    ports: dict[str, int]
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: Where the node serves JMX (``running_kafka(jmx=True)``), else None.
    jmx_port: int | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def request_log_path(self) -> Path:
        return self.directory / "requests.log"

    def address(self, listener: str = "PLAINTEXT") -> str:
        return f"{_HOST}:{self.ports[listener]}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


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
    _properties: dict[int, Path] = field(repr=False, default_factory=dict)

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
        self._launch(node)
        self._wait_started([node])

    def _launch(self, node: KafkaNode) -> None:
        offset = node.log_path.stat().st_size if node.log_path.exists() else 0
        log = node.log_path.open("ab")
        command = [
            "java",
            *_JVM,
            *_jmx_options(node.jmx_port),
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
            "-cp",
            f"{self._libs}/*",
            "kafka.Kafka",
            str(self._properties[node.node_id]),
        ]
        node.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        log.close()
        node.directory.joinpath(".log-offset").write_text(str(offset))

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


_REQUEST_MARKER = "Completed request:"


def _jmx_options(port: int | None) -> list[str]:
    """JVM flags for a JMX connector on 127.0.0.1:``port`` (RMI on the same port), or none."""
    if port is None:
        return []
    remote = "-Dcom.sun.management.jmxremote"
    return [
        f"{remote}.port={port}",
        f"{remote}.rmi.port={port}",
        f"{remote}.host={_HOST}",
        f"-Djava.rmi.server.hostname={_HOST}",
        f"{remote}.authenticate=false",
        f"{remote}.ssl=false",
    ]


def _api_name(upper_snake: str) -> str:
    """PRODUCE -> Produce, FIND_COORDINATOR -> FindCoordinator (the schema names)."""
    return "".join(part.capitalize() for part in upper_snake.split("_"))


def _log4j_properties(directory: Path, *, request_log: bool) -> str:
    """Warnings and errors to stdout, plus the line that says the node is up; with
    ``request_log``, Kafka's request log (DEBUG) to requests.log, message only."""
    lines = [
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = out",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = warn",
        "rootLogger.appenderRef.out.ref = out",
        "logger.started.name = kafka.server.KafkaRaftServer",
        "logger.started.level = info",
    ]
    if request_log:
        lines += [
            "appender.requests.type = File",
            "appender.requests.name = requests",
            f"appender.requests.fileName = {directory / 'requests.log'}",
            "appender.requests.immediateFlush = true",
            "appender.requests.layout.type = PatternLayout",
            "appender.requests.layout.pattern = %m%n",
            "logger.requests.name = kafka.request.logger",
            "logger.requests.level = debug",
            "logger.requests.additivity = false",
            "logger.requests.appenderRef.requests.ref = requests",
        ]
    return "\n".join(lines) + "\n"


def _cluster_id() -> str:
    """A random id as Kafka writes them; never one that starts with "-" (an option to the
    3.9 storage tool's parser), as Kafka's own Uuid.randomUuid avoids."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _jaas_plain(username: str, users: Mapping[str, str]) -> str:
    accounts = " ".join(f'user_{name}="{secret}"' for name, secret in users.items())
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{username}" password="{users[username]}" {accounts};'
    )


def _sasl_listener_properties(listener: str) -> list[str]:
    name = listener.lower()
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    oauth = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="admin";'
    )
    validator = (
        "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
        "OAuthBearerUnsecuredValidatorCallbackHandler"
    )
    return [
        f"listener.name.{name}.plain.sasl.jaas.config={_jaas_plain('admin', USERS)}",
        f"listener.name.{name}.scram-sha-256.sasl.jaas.config={scram}",
        f"listener.name.{name}.scram-sha-512.sasl.jaas.config={scram}",
        f"listener.name.{name}.oauthbearer.sasl.jaas.config={oauth}",
        f"listener.name.{name}.oauthbearer.sasl.server.callback.handler.class={validator}",
    ]


def _server_properties(
    node: KafkaNode,
    nodes: tuple[KafkaNode, ...],
    voters: tuple[KafkaNode, ...],
    *,
    version: str,
    listeners: tuple[str, ...],
    pki: Pki | None,
    ssl_client_auth: str,
    authorizer: bool,
    reauth_ms: int | None,
    listener_certs: Mapping[str, str],
    extra: Mapping[str, str],
) -> str:
    count = len(nodes)
    internal = "SASL_PLAINTEXT" if authorizer else "PLAINTEXT"
    voter = node in voters
    names = [*listeners, "INTERNAL", *(["CONTROLLER"] if voter else [])]
    protocol = {**{name: name for name in listeners}, "INTERNAL": internal, "CONTROLLER": internal}
    lines = {
        "process.roles": "broker,controller" if voter else "broker",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(
            f"{n.node_id}@{_HOST}:{n.ports['CONTROLLER']}" for n in voters
        ),
        "listeners": ",".join(f"{name}://{_HOST}:{node.ports[name]}" for name in names),
        "advertised.listeners": ",".join(
            f"{name}://{_HOST}:{node.ports[name]}" for name in [*listeners, "INTERNAL"]
        ),
        "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol.items()),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "INTERNAL",
        "log.dirs": str(node.directory / "data"),
        "num.partitions": "1",
        "default.replication.factor": str(min(count, 3)),
        "min.insync.replicas": str(min(count, 2)),
        "offsets.topic.replication.factor": str(min(count, 3)),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(min(count, 3)),
        "transaction.state.log.min.isr": str(min(count, 2)),
        "transaction.state.log.num.partitions": "5",
        "group.initial.rebalance.delay.ms": "0",
        # A short wait before a restarted node is unfenced keeps restarts quick.
        "controller.quorum.election.timeout.ms": "1000",
        "controller.quorum.fetch.timeout.ms": "2000",
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
    }
    if not version.startswith("3."):
        lines |= {
            "share.coordinator.state.topic.replication.factor": str(min(count, 3)),
            "share.coordinator.state.topic.min.isr": str(min(count, 2)),
            "share.coordinator.state.topic.num.partitions": "3",
        }
    sasl = [name for name in listeners if name.startswith("SASL_")]
    if sasl or authorizer:
        lines["sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
    if authorizer:
        lines |= {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "allow.everyone.if.no.acl.found": "false",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": _jaas_plain("admin", USERS),
            "listener.name.controller.plain.sasl.jaas.config": _jaas_plain("admin", USERS),
        }
    if reauth_ms is not None:
        lines["connections.max.reauth.ms"] = str(reauth_ms)
    if pki is not None:
        lines |= {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(node.directory / "keystore.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": ssl_client_auth,
        }
        for listener in listener_certs:  # Kafka's per-listener override of the key store
            prefix = f"listener.name.{listener.lower()}.ssl.keystore"
            lines[f"{prefix}.type"] = "PEM"
            lines[f"{prefix}.location"] = str(node.directory / f"keystore-{listener}.pem")
    lines |= dict(extra)
    text = [f"{key}={value}" for key, value in lines.items()]
    for name in sasl:
        text += _sasl_listener_properties(name)
    return "\n".join(text) + "\n"


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
    pki = make_pki(root / "pki") if {"SSL", "SASL_SSL"} & set(listeners) else None
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
            logging = _log4j_properties(node.directory, request_log=request_log)
            (node.directory / "log4j2.properties").write_text(logging)
            if pki is not None:
                for listener, name in {"": "server", **certs}.items():
                    served: CertFiles = getattr(pki, name)
                    keystore = served.key.read_text() + served.cert.read_text()
                    suffix = f"-{listener}" if listener else ""
                    (node.directory / f"keystore{suffix}.pem").write_text(keystore)
            properties = node.directory / "server.properties"
            properties.write_text(
                _server_properties(
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
            cluster._properties[node.node_id] = properties
            _format(libs, properties, cluster_id, node.directory / "format.log")
        for node in members:
            cluster._launch(node)
        cluster._wait_started(list(members))
        yield cluster
    finally:
        cluster.stop_all()
        for node in members:
            shutil.rmtree(node.directory / "data", ignore_errors=True)
