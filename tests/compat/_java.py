# Strategy: the Java client's round trip is examples/java/run.sh (ProxyExample.java), run as
# a user runs it with the jars found here. `java_command` is how the compat tests' own Java
# programs (tests/compat/java/*.java: the group member of tests/compat/_group_consume.py and
# the cases of tests/compat/_cases.py) are started, so their jars, their compile cache and the
# JVM flags are chosen in one place.
#
# The jars are kafka-clients and its runtime dependencies, resolved from Maven Central by
# examples/java/classpath.sh over examples/java/pom.xml (which pins the client version): the
# client alone, as an application depends on it, rather than the broker's classpath (which
# holds kafka-clients too, but also the broker's own logging binding and 40 other jars). The
# answer is cached per pom, so only the first call on a machine starts Maven.
#
# Compiling costs about a second, so classes are cached in the temp directory under a key
# made of the source's contents and the jars' names and sizes; a rerun, or another test in
# the same session, starts the JVM straight away. A cache entry is built in a private
# directory and renamed into place, so two processes compiling at once cannot leave a
# half-written entry.

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.compat._examples import EXAMPLES, example_env, example_flags, run_example
from tests.compat._model import ClientFailed, ClientReport, Job

__all__ = [
    "SOURCES",
    "cases_command",
    "client_version",
    "compiled_classes",
    "java_classpath",
    "java_command",
    "run",
]

CLIENT = "java"
EXAMPLE = EXAMPLES / "java" / "run.sh"
CLASSPATH_SCRIPT = EXAMPLES / "java" / "classpath.sh"
#: The compat tests' own Java programs.
SOURCES = Path(__file__).with_name("java")

#: A short-lived single-threaded-ish JVM on a 2-core machine starts faster with these;
#: they change nothing the Kafka client does.
_JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
#: The client's own log (slf4j-simple): warnings and errors, on stderr.
_LOG_FLAGS = ("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",)


def run(job: Job) -> ClientReport:
    """examples/java/run.sh for ``job``: Admin, idempotent acks=all producer, group, commitSync.

    The jars are found here (a missing one is a "setup" failure with the fix) and handed to
    run.sh as KAFKA_CLIENTS_CLASSPATH; run.sh compiles ProxyExample.java once and runs it.
    """
    jars = java_classpath()
    _tool("javac")
    env = example_env(job) | {"KAFKA_CLIENTS_CLASSPATH": os.pathsep.join(map(str, jars))}
    command = ["bash", str(EXAMPLE), *example_flags(job)]
    report, _ = run_example(CLIENT, command, job, env=env)
    notes = {
        "kafka-clients": client_version(),
        "acks": "all",
        "enable.idempotence": "true",
    }
    return ClientReport(report.produced, report.consumed, notes | report.settings)


@functools.cache
def java_classpath() -> list[Path]:
    """kafka-clients and its runtime jars, as examples/java/classpath.sh resolves them.

    Raises:
        ClientFailed: Maven is missing or could not resolve the client (stage "setup").
    """
    done = subprocess.run(
        ["bash", str(CLASSPATH_SCRIPT)], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0 or not done.stdout.strip():
        tail = " | ".join(done.stderr.strip().splitlines()[-8:])
        raise ClientFailed(CLIENT, "setup", f"resolving kafka-clients failed: {tail}")
    return [Path(jar) for jar in done.stdout.strip().split(os.pathsep)]


def client_version() -> str:
    """The kafka-clients version on the classpath ("4.4.0")."""
    jar = next(j for j in java_classpath() if j.name.startswith("kafka-clients-"))
    return jar.stem.removeprefix("kafka-clients-")


def java_command(source: Path, *args: str) -> list[str]:
    """The command that runs ``source``'s class (named as the file) with ``args``.

    Raises:
        ClientFailed: no jars, no JDK, or the source does not compile (stage "setup").
    """
    jars = java_classpath()
    classpath = os.pathsep.join([str(compiled_classes(jars, source)), *map(str, jars)])
    return [_tool("java"), *_JVM_FLAGS, *_LOG_FLAGS, "-cp", classpath, source.stem, *args]


def compiled_classes(jars: list[Path], source: Path) -> Path:
    """Directory holding ``source``'s classes compiled against ``jars``; compiled on a miss.

    Raises:
        ClientFailed: javac is missing or the source does not compile (stage "setup").
    """
    digest = hashlib.sha256(source.read_bytes())
    for jar in jars:
        digest.update(jar.name.encode())
        digest.update(str(jar.stat().st_size).encode())
    cache = Path(tempfile.gettempdir()) / f"purgatory-proxy-compat-{os.getuid()}" / "java"
    entry = cache / digest.hexdigest()[:20]
    main_class = entry / f"{source.stem}.class"
    if main_class.exists():
        return entry
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    try:
        proc = subprocess.run(
            [
                _tool("javac"),
                "-d",
                str(staging),
                "-cp",
                os.pathsep.join(map(str, jars)),
                str(source),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise ClientFailed(CLIENT, "setup", f"javac failed: {proc.stderr.strip()}")
        try:
            staging.rename(entry)
        except OSError:
            if not main_class.exists():
                raise
        return entry
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ClientFailed(
            CLIENT, "setup", f"{name} not found: run scripts/install-system-deps.sh (JDK 17)"
        )
    return path


def cases_command(*args: str) -> list[str]:
    """tests/compat/java/Cases.java with ``args`` (its header lists the modes)."""
    return java_command(SOURCES / "Cases.java", *args)
