# Strategy: the admin round, on a cluster with the StandardAuthorizer: create a topic, describe
# its retention.ms, alter it incrementally, describe it again, create an ACL (principal READ
# on the topic), describe the topic's ACLs, delete them, delete the topic. Every admin client
# of the matrix has a program for it (java/Cases.java admin, _admin_confluent.py,
# _admin_kafka_python.py, go/*: admin mode; aiokafka has no ACL API and kcat no admin at all).
#
# A program prints each step as a JSON line and waits for "next" on stdin; `run_admin` checks
# the step on the broker directly (kafka-python as the super user, `DirectAdmin`) before it
# lets the program go on, so every step is compared with what the cluster really holds at
# that moment: the topic exists, the config the client read is the broker's, the ACL the
# client created is there and then gone, the topic is deleted.
#
# What a client changes, the broker applies a moment after it answered (in KRaft the
# controller commits the change and each broker applies it from the metadata log), so the
# checks of changes wait for them (up to 15 s), and the client describes the altered config
# only once the broker holds it ("altered", then "described"): a describe right after the
# alter may read the old value on any path (kafka-go did through the proxy, once in 70 runs).
"""The admin round: run a client's admin program step by step, checking each step directly."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from kafka import KafkaAdminClient
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    ResourcePatternFilter,
    ResourceType,
)

from tests.compat import _go
from tests.compat._java import cases_command
from tests.compat._model import ClientFailed
from tests.compat._tls import ClientSasl, go_environment

__all__ = ["CLIENTS", "STEPS", "DirectAdmin", "run_admin"]

CLIENTS = ("java", "confluent-kafka", "kafka-python", "franz-go", "sarama", "kafka-go")
STEPS = (
    "created", "config", "altered", "described", "acl-created", "acls", "acl-deleted", "deleted",
)  # fmt: skip
PRINCIPAL = "User:alice"
#: Kafka's default retention.ms, and what the round sets.
DEFAULT_RETENTION_MS = "604800000"
ALTERED_RETENTION_MS = "3600000"
STEP_TIMEOUT_S = 60.0


def _command(client: str, bootstrap: str, topic: str) -> list[str]:
    if client == "java":
        return cases_command("admin", bootstrap, topic, PRINCIPAL)
    if client in _go.CLIENTS:
        return _go.command(client, "admin", "-bootstrap", bootstrap, "-topic", topic,
                           "-principal", PRINCIPAL)  # fmt: skip
    module = {"confluent-kafka": "_admin_confluent", "kafka-python": "_admin_kafka_python"}
    return [sys.executable, "-m", f"tests.compat.{module[client]}", bootstrap, topic, PRINCIPAL]


class DirectAdmin:
    """The cluster as its super user sees it, over a SASL listener (kafka-python).

    Resource handling: ``close`` closes the admin client.
    """

    def __init__(self, bootstrap: str, sasl: ClientSasl) -> None:
        self._admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="compat-direct-admin",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=sasl.mechanism,
            sasl_plain_username=sasl.username,
            sasl_plain_password=sasl.password,
        )

    def close(self) -> None:
        self._admin.close()

    def has_topic(self, topic: str) -> bool:
        return topic in self._admin.list_topics()

    def retention(self, topic: str) -> str:
        described = self._admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": None})],
            config_filter="all",
        )
        entry = described["topic"][topic]["retention.ms"]
        return str(entry["value"] if isinstance(entry, dict) else entry)

    def acls(self, topic: str) -> list[str]:
        """The topic's ACLs as "principal host OPERATION PERMISSION"."""
        acl_filter = ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL),
        )  # fmt: skip
        acls, error = self._admin.describe_acls(acl_filter)
        assert not error.errno, error
        return sorted(
            f"{a.principal} {a.host} {a.operation.name} {a.permission_type.name}" for a in acls
        )


def _eventually(check: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _expectations(direct: DirectAdmin, topic: str) -> dict[str, Callable[[str], list[str]]]:
    """Per step: the problems with the client's detail and the cluster's state, if any."""
    acl = f"{PRINCIPAL} * READ ALLOW"

    def created(_: str) -> list[str]:
        return [] if _eventually(lambda: direct.has_topic(topic)) else ["topic not created"]

    def config(detail: str) -> list[str]:
        broker = direct.retention(topic)
        if detail == f"retention.ms={DEFAULT_RETENTION_MS}" and broker == DEFAULT_RETENTION_MS:
            return []
        return [f"config: client read {detail!r}, broker holds retention.ms={broker}"]

    def altered(_: str) -> list[str]:
        if _eventually(lambda: direct.retention(topic) == ALTERED_RETENTION_MS):
            return []
        return [f"altered: the broker holds retention.ms={direct.retention(topic)}"]

    def described(detail: str) -> list[str]:
        if detail == f"retention.ms={ALTERED_RETENTION_MS}":
            return []
        return [f"described: the client read {detail!r}"]

    def acl_created(_: str) -> list[str]:
        if _eventually(lambda: direct.acls(topic) == [acl]):
            return []
        return [f"acl-created: the broker holds {direct.acls(topic)}"]

    def acls(detail: str) -> list[str]:
        parts = detail.split()
        if parts[:3] == [PRINCIPAL, "*", "READ"] and parts[3:] == [topic]:
            return []
        return [f"acls: the client described {detail!r}"]

    def acl_deleted(detail: str) -> list[str]:
        if detail == "1" and _eventually(lambda: not direct.acls(topic)):
            return []
        return [f"acl-deleted: client deleted {detail}, the broker holds {direct.acls(topic)}"]

    def deleted(_: str) -> list[str]:
        gone = _eventually(lambda: not direct.has_topic(topic))
        return [] if gone else ["topic still listed after its deletion"]

    return {
        "created": created, "config": config, "altered": altered, "described": described,
        "acl-created": acl_created, "acls": acls, "acl-deleted": acl_deleted, "deleted": deleted,
    }  # fmt: skip


def run_admin(
    client: str,
    bootstrap: str,
    topic: str,
    direct: DirectAdmin,
    sasl: ClientSasl | None = None,
) -> list[str]:
    """Run ``client``'s admin round against ``bootstrap`` (logging in with ``sasl`` if given),
    each step checked with ``direct``; the problems found ([] if none).

    Raises:
        ClientFailed: the program failed or stopped answering (stage "admin").
    """
    env = {**os.environ, **go_environment(sasl)}
    proc = subprocess.Popen(
        _command(client, bootstrap, topic), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, bufsize=1, env=env,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    checks = _expectations(direct, topic)
    problems: list[str] = []
    try:
        for expected in STEPS:
            try:
                line = lines.get(timeout=STEP_TIMEOUT_S)
            except queue.Empty:
                line = ""
            if not line:
                proc.kill()
                stderr = proc.stderr.read() if proc.stderr else ""
                tail = " | ".join(stderr.strip().splitlines()[-6:])
                raise ClientFailed(client, "admin", f"no {expected!r} step: {tail}")
            event = json.loads(line)
            if event["event"] != expected:
                problems.append(f"step {event['event']!r} where {expected!r} was due")
                break
            problems += checks[expected](event.get("detail", ""))
            assert proc.stdin is not None
            proc.stdin.write("next\n")
            proc.stdin.flush()
        code = proc.wait(timeout=STEP_TIMEOUT_S)
        if code != 0:
            problems.append(f"the program exited {code} after its last step")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    return problems
