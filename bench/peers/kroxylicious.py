# Strategy: Kroxylicious as its distribution runs it, built from what Maven Central serves here.
#
#   classpath  io.kroxylicious:kroxylicious-runtime (KafkaProxy, ConfigParser, Netty, Jackson,
#              kafka-clients) plus the app module's runtime extras (log4j2, the disruptor),
#              resolved by bench/peers/java/pom.xml into <cache>/kroxylicious-<version>/libs
#              (testbed.kafka_install.resolve_classpath: once, then a stamp file).
#   main       bench/peers/java/KroxyliciousLauncher.java, compiled against that classpath
#              (testbed.java_build): the app's main, step for step, without its CLI parsing.
#   JVM flags  what kroxylicious-start.sh / run-java.sh pass outside a container: async log4j2
#              loggers and -XX:+ExitOnOutOfMemoryError; the heap is the JVM's default.
#   config     one virtual cluster, no filters, a gateway with port-per-broker routing
#              (portIdentifiesNode: bootstrap port, then one consecutive port per node id of
#              nodeIdRanges), TLS towards clients and towards the cluster when asked.
"""Run Kroxylicious (a passthrough virtual cluster, port per broker) in front of a cluster."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from testbed.certs import Pki
from testbed.java_build import compiled_classes
from testbed.kafka_install import cache_root, resolve_classpath
from testbed.processes import free_port_run, running_process

__all__ = ["KROXYLICIOUS_VERSION", "ensure_kroxylicious", "running_kroxylicious"]

#: The newest release Maven Central serves here (0.13 and later are not); runs on Java 17.
KROXYLICIOUS_VERSION = "0.12.0"

_JAVA_DIR = Path(__file__).resolve().parent / "java"
_LAUNCHER = _JAVA_DIR / "KroxyliciousLauncher.java"
_START_TIMEOUT_S = 120.0
_LOG4J = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d <%t> %-5p %c - %m%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
"""


def ensure_kroxylicious(version: str = KROXYLICIOUS_VERSION) -> Path:
    """The folder of Kroxylicious ``version``'s runtime jars, resolving them first if needed.

    Raises:
        RuntimeError: Maven failed (its output is in the message).
    """
    return resolve_classpath(
        _JAVA_DIR / "pom.xml",
        cache_root() / f"kroxylicious-{version}",
        {"kroxylicious.version": version},
        f"kroxylicious-runtime-{version}.jar",
    )


def _config(
    upstream: str, port: int, node_ids: Sequence[int], tls: Pki | None
) -> dict[str, object]:
    gateway: dict[str, object] = {
        "name": "bench",
        "portIdentifiesNode": {
            "bootstrapAddress": f"127.0.0.1:{port}",
            "nodeIdRanges": [{"name": "nodes", "start": min(node_ids), "end": max(node_ids)}],
        },
    }
    target: dict[str, object] = {"bootstrapServers": upstream}
    if tls is not None:
        key = {"privateKeyFile": str(tls.server.key), "certificateFile": str(tls.server.cert)}
        gateway["tls"] = {"key": key}
        target["tls"] = {"trust": {"storeFile": str(tls.ca), "storeType": "PEM"}}
    return {"virtualClusters": [{"name": "bench", "targetCluster": target, "gateways": [gateway]}]}


@contextlib.contextmanager
def running_kroxylicious(
    upstream: str, node_ids: Sequence[int], tls: Pki | None = None
) -> Iterator[tuple[int, int]]:
    """Kroxylicious in front of ``upstream`` (bootstrap servers) whose brokers have
    ``node_ids`` (consecutive); yields its bootstrap port and PID once it listens. With
    ``tls``, clients get TLS (``tls.server``) and the cluster is reached over TLS (``tls.ca``).

    Raises:
        RuntimeError: resolving, compiling or starting it failed (the reason is in the message).
    """
    libs = ensure_kroxylicious()
    classes = compiled_classes(_LAUNCHER, [libs])
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH")
    span = max(node_ids) - min(node_ids) + 1
    port = free_port_run(span + 1)
    with tempfile.TemporaryDirectory(prefix="kroxylicious-") as scratch:
        config = Path(scratch) / "config.yaml"
        # JSON is YAML: Kroxylicious's parser reads it as such.
        config.write_text(json.dumps(_config(upstream, port, node_ids, tls), indent=1))
        log4j = Path(scratch) / "log4j2.properties"
        log4j.write_text(_LOG4J)
        command = [
            java,
            f"-Dlog4j2.configurationFile={log4j}",
            "-Dlog4j2.contextSelector=org.apache.logging.log4j.core.async.AsyncLoggerContextSelector",
            "-XX:+ExitOnOutOfMemoryError",
            "-cp",
            f"{libs}/*:{classes}",
            _LAUNCHER.stem,
            str(config),
        ]
        with running_process(command, port, timeout_s=_START_TIMEOUT_S) as pid:
            yield port, pid
