# Strategy: kcat's round trip, run as the command-line tool it is, with a choice of librdkafka.
#
# Debian's kcat (1.7.1) links Debian's librdkafka 2.0.2, which cannot parse Tansu's
# ApiVersions reply ("ApiVersionRequest failed: Local: Read underflow"). The confluent-kafka
# wheel ships a newer librdkafka under a mangled file name; a private directory holding a
# `librdkafka.so.1` symlink to it, put on LD_LIBRARY_PATH, makes the same kcat binary use
# it. `run(job, librdkafka="wheel")` does that; `librdkafka="debian"` runs kcat untouched,
# so the matrix records how Debian's own library fares (directly, and later via the proxy).
#
# Steps, each a separate kcat process because that is how people use it:
#   metadata  `kcat -L -m 5`  — fails fast (5 s) when the client cannot talk to the broker,
#             instead of a producer retrying until message.timeout.ms;
#   create    kcat has no admin API, so kafka-python's admin creates the topic;
#   produce   `kcat -P -K <TAB>` reading "key<TAB>value" lines, acks=all, idempotent;
#             `-vv` makes kcat print "Message delivered to partition P (offset O)" per
#             record — the slot only, not which record, so `Delivered` has no key/value;
#   consume   `kcat -G group -c n` from earliest with a format string; kcat has no explicit
#             commit, it relies on auto-commit, which librdkafka flushes on close.

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal

from tests.compat import _tls
from tests.compat._direct import create_topic
from tests.compat._model import ClientFailed, ClientReport, Consumed, Delivered, Job

__all__ = ["Librdkafka", "kcat_environment", "run"]

Librdkafka = Literal["wheel", "debian"]

_DELIVERED = re.compile(r"Message delivered to partition (-?\d+) \(offset (-?\d+)\)")
_LIBRDKAFKA_VERSION = re.compile(r"librdkafka (\S+)")
_METADATA_TIMEOUT_S = 5


def run(job: Job, librdkafka: Librdkafka = "wheel") -> ClientReport:
    """Metadata check, create (kafka-python admin), produce and group-consume with kcat."""
    client = "kcat" if librdkafka == "wheel" else "kcat-debian"
    deadline = time.monotonic() + job.deadline_s
    kcat, env, settings = kcat_environment(client, librdkafka)
    _metadata(client, kcat, env, job)
    create_topic(client, job.bootstrap, job.topic, job.partitions, job.tls, job.sasl)
    produced = _produce(client, kcat, env, job, deadline)
    consumed = _consume(client, kcat, env, job, deadline)
    settings |= {
        "producer": "-K <TAB> -X acks=all -X enable.idempotence=true -vv",
        "consumer": f"-G <group> -c {len(job.records)} -X auto.offset.reset=earliest"
        f" -X session.timeout.ms={job.session_timeout_ms}"
        f" -X heartbeat.interval.ms={job.session_timeout_ms // 4}",
        "commit": "auto-commit, flushed when kcat closes (kcat has no explicit commit)",
        "admin": "none in kcat: topic created with kafka-python's admin",
    } | _tls.settings(job.tls, job.sasl)
    return ClientReport(produced, consumed, settings)


def kcat_environment(
    client: str, librdkafka: Librdkafka
) -> tuple[str, dict[str, str], dict[str, str]]:
    """The kcat binary, the environment that selects the library, and a settings summary.

    Raises:
        ClientFailed: kcat or the wheel's library is missing, or kcat did not load the
            library it was pointed at (stage "setup").
    """
    kcat = shutil.which("kcat")
    if kcat is None:
        raise ClientFailed(client, "setup", "kcat not found: run scripts/install-system-deps.sh")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if librdkafka == "wheel":
        env["LD_LIBRARY_PATH"] = str(_wheel_library_dir(client))
    version = subprocess.run(
        [kcat, "-V"], env=env, capture_output=True, text=True, timeout=10, check=False
    )
    found = _LIBRDKAFKA_VERSION.search(version.stdout + version.stderr)
    loaded = found.group(1) if found else "unknown"
    if librdkafka == "wheel":
        import confluent_kafka

        wanted = confluent_kafka.libversion()[0]
        if loaded != wanted:
            raise ClientFailed(
                client, "setup", f"kcat loaded librdkafka {loaded}, not the wheel's {wanted}"
            )
    settings = {"librdkafka": f"{loaded} ({librdkafka})"}
    if librdkafka == "wheel":
        settings["env"] = f"LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']}"
    return kcat, env, settings


def _wheel_library_dir(client: str) -> Path:
    """A directory whose ``librdkafka.so.1`` is the confluent-kafka wheel's librdkafka.

    The wheel stores the library as ``confluent_kafka.libs/librdkafka-<hash>.so.1``
    (auditwheel's name mangling), which the dynamic loader would never look up, hence the
    symlink. The directory is per user and reused; the symlink is replaced atomically.
    """
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or spec.origin is None:
        raise ClientFailed(client, "setup", "confluent-kafka is not installed")
    libs = Path(spec.origin).parent.parent / "confluent_kafka.libs"
    candidates = sorted(libs.glob("librdkafka*.so*"))
    if not candidates:
        raise ClientFailed(client, "setup", f"no librdkafka in {libs}")
    shim = Path(tempfile.gettempdir()) / f"purgatory-proxy-compat-{os.getuid()}" / "librdkafka"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / "librdkafka.so.1"
    if not link.exists() or link.resolve() != candidates[0].resolve():
        staging = shim / f".librdkafka.so.1.{os.getpid()}"
        staging.unlink(missing_ok=True)
        staging.symlink_to(candidates[0])
        os.replace(staging, link)
    return shim


def _metadata(client: str, kcat: str, env: dict[str, str], job: Job) -> None:
    proc = subprocess.run(
        [kcat, "-L", "-b", job.bootstrap, *_tls_args(job), "-m", str(_METADATA_TIMEOUT_S)],
        env=env,
        capture_output=True,
        text=True,
        timeout=_METADATA_TIMEOUT_S + 10,
        check=False,
    )
    if proc.returncode != 0:
        raise ClientFailed(client, "metadata", proc.stderr.strip())


def _produce(
    client: str, kcat: str, env: dict[str, str], job: Job, deadline: float
) -> tuple[Delivered, ...]:
    lines = "".join(f"{r.key}\t{r.value}\n" for r in job.records)
    command = [
        kcat, "-P", "-b", job.bootstrap, *_tls_args(job), "-t", job.topic, "-K", "\t",
        "-X", "acks=all", "-X", "enable.idempotence=true",
        "-X", f"message.timeout.ms={int(job.deadline_s * 1000)}",
        "-vv",
    ]  # fmt: skip
    proc = _run(client, "produce", command, env, lines, deadline)
    delivered = tuple(
        Delivered(int(m.group(1)), int(m.group(2))) for m in _DELIVERED.finditer(proc.stderr)
    )
    if proc.returncode != 0 or len(delivered) != len(job.records):
        raise ClientFailed(
            client,
            "produce",
            f"exit {proc.returncode}, {len(delivered)} of {len(job.records)} delivered: "
            + _tail(proc.stderr),
        )
    return delivered


def _consume(
    client: str, kcat: str, env: dict[str, str], job: Job, deadline: float
) -> tuple[Consumed, ...]:
    command = [
        kcat, "-G", job.group, "-b", job.bootstrap, *_tls_args(job), "-c", str(len(job.records)),
        "-X", "auto.offset.reset=earliest",
        "-X", f"session.timeout.ms={job.session_timeout_ms}",
        "-X", f"heartbeat.interval.ms={job.session_timeout_ms // 4}",
        "-f", r"%p\t%o\t%k\t%s\n",
        job.topic,
    ]  # fmt: skip
    proc = _run(client, "consume", command, env, "", deadline)
    consumed = []
    for line in proc.stdout.splitlines():
        partition, offset, key, value = line.split("\t", 3)
        consumed.append(Consumed(int(partition), int(offset), key, value))
    if proc.returncode != 0 or len(consumed) != len(job.records):
        raise ClientFailed(
            client,
            "consume",
            f"exit {proc.returncode}, {len(consumed)} of {len(job.records)} consumed: "
            + _tail(proc.stderr),
        )
    return tuple(consumed)


def _run(
    client: str, stage: str, command: list[str], env: dict[str, str], stdin: str, deadline: float
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            command,
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=max(1.0, deadline - time.monotonic()),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClientFailed(client, stage, f"kcat still running at the deadline: {exc}") from exc


def _tls_args(job: Job) -> list[str]:
    """``-X key=value`` for the job's TLS and SASL (librdkafka's own property names)."""
    config = _tls.librdkafka_config(job.tls, job.sasl)
    return [arg for k, v in config.items() for arg in ("-X", f"{k}={v}")]


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])
