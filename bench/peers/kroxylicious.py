# Strategy: Kroxylicious two ways, each as its users run it.
#
#   Maven Central  the default: the newest release Maven Central serves here (0.12.0).
#     classpath    io.kroxylicious:kroxylicious-runtime (KafkaProxy, ConfigParser, Netty, Jackson,
#                  kafka-clients) plus the app module's runtime extras (log4j2, the disruptor),
#                  resolved by bench/peers/java/pom.xml into <cache>/kroxylicious-<version>/libs
#                  (testbed.kafka_install.resolve_classpath: once, then a stamp file).
#     main         bench/peers/java/KroxyliciousLauncher.java, compiled against that classpath
#                  (testbed.java_build): the app's main, step for step, without its CLI parsing.
#     JVM flags    what kroxylicious-start.sh / run-java.sh pass outside a container: async log4j2
#                  loggers and -XX:+ExitOnOutOfMemoryError; the heap is the JVM's default.
#   distribution   a later release built from its source (Maven Central lacks kroxylicious-app and
#                  every release after 0.12.0), given as its unpacked binary distribution
#                  (--kroxylicious-dist DIR or $KROXYLICIOUS_DIST: bin/, libs/, config/). Started
#                  by its own bin/kroxylicious-start.sh -c CONFIG (run-java.sh, the release's
#                  log4j2.yaml at WARN), on `java` from --kroxylicious-java-home or
#                  $KROXYLICIOUS_JAVA_HOME, else PATH; a java older than the release's classes
#                  (0.22 and later: 21) leaves the route out with the reason. This module never
#                  fetches or builds Kroxylicious's source. `python -m bench.peers.kroxylicious
#                  --kroxylicious-dist DIR ...` prints what a run would start, starting nothing.
#
#   config         one virtual cluster, no filters, a gateway with port-per-broker routing
#                  (portIdentifiesNode: bootstrap port, then one consecutive port per node id of
#                  nodeIdRanges), TLS towards clients and towards the cluster when asked. From
#                  0.17.0, whose configuration gained network.proxy.workerThreadCount, that is
#                  set to the cores this process may use: the docs say to tune it with the CPU
#                  limit, and more event loops than cores add switching, not parallelism, where
#                  the broker and the clients share the cores. (0.23.0's docs say the default
#                  is twice the processors; its code falls back to the processors: set, the run
#                  does not depend on which.)
"""Find (Maven Central, or a given distribution) and run Kroxylicious in front of a cluster."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.certs import Pki
from testbed.java_build import compiled_classes
from testbed.java_release import class_file_release, java_version_line, parse_java_release
from testbed.kafka_install import cache_root, resolve_classpath
from testbed.processes import free_port_run, running_process

__all__ = [
    "DIST_ENV",
    "JAVA_HOME_ENV",
    "KROXYLICIOUS_VERSION",
    "Kroxylicious",
    "ensure_kroxylicious",
    "find_kroxylicious",
    "main",
    "proxy_config",
    "running_kroxylicious",
]

#: The newest release Maven Central serves here (0.13 and later are not); runs on Java 17.
KROXYLICIOUS_VERSION = "0.12.0"
DIST_ENV = "KROXYLICIOUS_DIST"
JAVA_HOME_ENV = "KROXYLICIOUS_JAVA_HOME"
MAVEN_CENTRAL = "kroxylicious-runtime from Maven Central"
#: The first release with network.proxy.workerThreadCount.
_WORKER_THREADS_SINCE = (0, 17, 0)

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
_RUNTIME_JAR = re.compile(r"kroxylicious-runtime-(\d[^/]*)\.jar")


@dataclass(frozen=True)
class Kroxylicious:
    """The Kroxylicious a run starts, or why it cannot (``missing``)."""

    version: str
    #: How it was had: MAVEN_CENTRAL, or "--kroxylicious-dist DIR" / "$KROXYLICIOUS_DIST DIR".
    origin: str = MAVEN_CENTRAL
    #: The unpacked distribution (bin/kroxylicious-start.sh); None: the Maven Central runtime.
    dist: Path | None = None
    #: The JDK whose bin/java runs the distribution; None: `java` on PATH.
    java_home: Path | None = None
    #: What that java says it is (the first line of `java -version`), for the report.
    java: str = ""
    #: network.proxy.workerThreadCount, where the release has it.
    worker_threads: int | None = None
    #: Why it cannot run here (a bad distribution, too old a java); None when it can.
    missing: str | None = None

    def describe(self) -> str:
        """The version and how it ran, as the report's Versions line names it."""
        if self.missing is not None:
            return f"not measured: {self.missing}"
        if self.dist is None:
            return f"{self.version} ({self.origin})"
        threads = (
            f"; network.proxy.workerThreadCount {self.worker_threads}"
            if self.worker_threads is not None
            else ""
        )
        return (
            f"{self.version} (its distribution's kroxylicious-start.sh, {self.origin}; "
            f"{self.java}{threads})"
        )


def release(version: str) -> tuple[int, ...]:
    """``version``'s numbers, for ordering ("0.23.0" is (0, 23, 0); a suffix is ignored)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("-")[0]))


def worker_threads(version: str, cores: int) -> int | None:
    """The workerThreadCount to configure: one event loop per core, where ``version`` has
    the setting (None before 0.17.0, which has none)."""
    return cores if release(version) >= _WORKER_THREADS_SINCE else None


def distribution_version(dist: Path) -> tuple[str, Path]:
    """The release of the distribution unpacked at ``dist``, and its runtime jar.

    Raises:
        ValueError: ``dist`` is not a Kroxylicious binary distribution.
    """
    start = dist / "bin" / "kroxylicious-start.sh"
    if not os.access(start, os.X_OK):
        raise ValueError(f"{dist} has no executable bin/kroxylicious-start.sh")
    jars = [
        (found.group(1), jar)
        for jar in sorted((dist / "libs").glob("kroxylicious-runtime-*.jar"))
        if (found := _RUNTIME_JAR.fullmatch(jar.name))
    ]
    if len(jars) != 1:
        raise ValueError(f"{dist}/libs holds {len(jars)} kroxylicious-runtime jars, not one")
    return jars[0]


def find_kroxylicious(dist: str | None = None, java_home: str | None = None) -> Kroxylicious:
    """The distribution ``dist`` (or $KROXYLICIOUS_DIST) run on ``java_home`` (or
    $KROXYLICIOUS_JAVA_HOME, else `java` on PATH); with neither, 0.12.0 from Maven Central."""
    given, how = (dist, "--kroxylicious-dist") if dist else (os.environ.get(DIST_ENV), DIST_ENV)
    if not given:
        return Kroxylicious(KROXYLICIOUS_VERSION)
    home = Path(given).expanduser().resolve()
    origin = f"{how} {home}"
    jdk_given = java_home or os.environ.get(JAVA_HOME_ENV)
    jdk = Path(jdk_given).expanduser().resolve() if jdk_given else None
    try:
        version, runtime = distribution_version(home)
        threads = worker_threads(version, len(os.sched_getaffinity(0)))
        found = Kroxylicious(version, origin, home, jdk, worker_threads=threads)
        return _with_java(found, class_file_release(runtime))
    except (OSError, ValueError) as exc:
        return Kroxylicious("unknown", origin, home, jdk, missing=f"{origin}: {exc}")


def _with_java(found: Kroxylicious, needs: int) -> Kroxylicious:
    """``found`` with the java it would run on, missing when that is older than ``needs``.

    Raises:
        OSError, ValueError: that java does not run or names no version.
    """
    home = found.java_home
    java = home / "bin" / "java" if home is not None else Path(shutil.which("java") or "java")
    line = java_version_line(java)
    has = parse_java_release(line)
    missing = None
    if has < needs:
        missing = (
            f"Kroxylicious {found.version} needs Java {needs} or newer and {java} is Java "
            f"{has}: give --kroxylicious-java-home DIR or ${JAVA_HOME_ENV}"
        )
    return dataclasses.replace(found, java=line, missing=missing)


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


def proxy_config(
    upstream: str,
    port: int,
    node_ids: Sequence[int],
    tls: Pki | None = None,
    threads: int | None = None,
) -> dict[str, object]:
    """The configuration: one passthrough virtual cluster in front of ``upstream``, its
    bootstrap on ``port`` and one port per node id after it; ``threads`` event loops."""
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
    config: dict[str, object] = {
        "virtualClusters": [{"name": "bench", "targetCluster": target, "gateways": [gateway]}]
    }
    if threads is not None:
        config["network"] = {"proxy": {"workerThreadCount": threads}}
    return config


def _launcher_command(scratch: Path, config: Path) -> list[str]:
    """The Maven Central runtime started by KroxyliciousLauncher, with the start script's flags."""
    libs = ensure_kroxylicious()
    classes = compiled_classes(_LAUNCHER, [libs])
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH")
    log4j = scratch / "log4j2.properties"
    log4j.write_text(_LOG4J)
    return [
        java,
        f"-Dlog4j2.configurationFile={log4j}",
        "-Dlog4j2.contextSelector=org.apache.logging.log4j.core.async.AsyncLoggerContextSelector",
        "-XX:+ExitOnOutOfMemoryError",
        "-cp",
        f"{libs}/*:{classes}",
        _LAUNCHER.stem,
        str(config),
    ]


def _dist_env(build: Kroxylicious) -> dict[str, str]:
    """The start script's environment: the release's own log4j2.yaml at WARN (as the launcher
    logs) and, when given, the JDK whose `java` run-java.sh finds first on PATH."""
    env = {"KROXYLICIOUS_ROOT_LOG_LEVEL": "WARN", "KROXYLICIOUS_APP_LOG_LEVEL": "WARN"}
    if build.java_home is not None:
        env["JAVA_HOME"] = str(build.java_home)
        env["PATH"] = f"{build.java_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


@contextlib.contextmanager
def running_kroxylicious(
    upstream: str,
    node_ids: Sequence[int],
    tls: Pki | None = None,
    build: Kroxylicious | None = None,
) -> Iterator[tuple[int, int]]:
    """Kroxylicious ``build`` (default: 0.12.0 from Maven Central) in front of ``upstream``
    (bootstrap servers) whose brokers have ``node_ids`` (consecutive); yields its bootstrap
    port and PID once it listens. With ``tls``, clients get TLS (``tls.server``) and the
    cluster is reached over TLS (``tls.ca``).

    The PID is the JVM's: kroxylicious-start.sh and run-java.sh each exec the next.

    Raises:
        RuntimeError: ``build`` is missing, or resolving, compiling or starting it failed (the
            reason is in the message).
    """
    build = build or Kroxylicious(KROXYLICIOUS_VERSION)
    if build.missing is not None:
        raise RuntimeError(f"Kroxylicious is not available: {build.missing}")
    span = max(node_ids) - min(node_ids) + 1
    port = free_port_run(span + 1)
    with tempfile.TemporaryDirectory(prefix="kroxylicious-") as scratch:
        config = Path(scratch) / "config.yaml"
        # JSON is YAML: Kroxylicious's parser reads it as such.
        settings = proxy_config(upstream, port, node_ids, tls, build.worker_threads)
        config.write_text(json.dumps(settings, indent=1))
        env: dict[str, str] = {}
        if build.dist is None:
            command = _launcher_command(Path(scratch), config)
        else:
            command = [str(build.dist / "bin" / "kroxylicious-start.sh"), "-c", str(config)]
            env = _dist_env(build)
        with running_process(command, port, env=env, timeout_s=_START_TIMEOUT_S) as pid:
            yield port, pid


def main(argv: Sequence[str] | None = None) -> None:
    """Print, as JSON, the Kroxylicious bench.peers would start with these options and the
    configuration it would give it in front of one broker (node 0 at 127.0.0.1:9092, the
    bootstrap on 9192): a check of a built distribution before an hour's run."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers.kroxylicious", description=main.__doc__
    )
    parser.add_argument("--kroxylicious-dist", metavar="DIR", help=f"else ${DIST_ENV}")
    parser.add_argument("--kroxylicious-java-home", metavar="DIR", help=f"else ${JAVA_HOME_ENV}")
    args = parser.parse_args(argv)
    found = find_kroxylicious(args.kroxylicious_dist, args.kroxylicious_java_home)
    config = proxy_config("127.0.0.1:9092", 9192, [0], threads=found.worker_threads)
    described = {"kroxylicious": found.describe(), "version": found.version}
    print(json.dumps({**described, "missing": found.missing, "config": config}, indent=1))


if __name__ == "__main__":
    main()
