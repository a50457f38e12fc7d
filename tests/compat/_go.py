# Strategy: Go's three Kafka clients, franz-go, IBM/sarama and segmentio/kafka-go, as one Go
# module (tests/compat/go: go.mod and go.sum pin every version) with one program per client
# (go/franz, go/sarama, go/kafkago) and what they share in go/internal/compat, whose header
# defines the modes and the lines they print.
#
# The programs are built from the Go module proxy at test time, once: `go build` into a cache
# folder named after a hash of the module's files (go.mod, go.sum, every .go file), so the
# next test, the next session and the next run on the machine reuse the binaries until a
# source changes. A build goes to a private folder renamed into place, so two pytest
# processes building at once cannot leave half a cache entry. CGO is off: all three clients
# are pure Go (their compression codecs included).
#
# `run` is the matrix driver of the round trip (records on stdin, TSV events back); the
# case, member and admin modes are started by tests/compat/_cases.py, _group_consume.py and
# _admin.py with `command`.
"""The Go clients: build them once, run their round trip."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from testbed.kafka_install import cache_root
from tests.compat import _tls
from tests.compat._hosts import with_hosts
from tests.compat._model import ClientFailed, ClientReport, Consumed, Delivered, Job

__all__ = [
    "CLIENTS",
    "MODULE",
    "binary",
    "case_command",
    "command",
    "parse_events",
    "run",
    "settings",
]

MODULE = Path(__file__).with_name("go")

#: matrix client name -> program in the module.
CLIENTS: dict[str, str] = {"franz-go": "franz", "sarama": "sarama", "kafka-go": "kafkago"}

#: What the matrix reports per client: the library and what its round trip needed.
_NOTES: dict[str, dict[str, str]] = {
    "franz-go": {"acks": "all", "idempotent": "true (franz-go's default)"},
    "sarama": {
        "acks": "WaitForAll",
        "idempotent": "true (Producer.Idempotent, Net.MaxOpenRequests=1)",
        "version": "V3_9_0_0, negotiated down by ApiVersions",
    },
    "kafka-go": {"acks": "RequireAll", "idempotent": "no: kafka-go has no idempotent producer"},
}


def _module_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(MODULE.rglob("*")):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
            digest.update(str(path.relative_to(MODULE)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def _built() -> Path:
    """The folder holding the three built programs; built on a miss.

    Raises:
        ClientFailed: go is missing or the build failed (stage "setup", with go's last lines).
    """
    go = shutil.which("go")
    if go is None:
        raise ClientFailed("go", "setup", "go not found: the Go clients need Go 1.26 on PATH")
    cache = cache_root() / "go"
    entry = cache / _module_digest()
    if all((entry / program).exists() for program in CLIENTS.values()):
        return entry
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly", "GO111MODULE": "on"}
    try:
        built = subprocess.run(
            [go, "build", "-o", str(staging) + os.sep, *(f"./{p}" for p in CLIENTS.values())],
            cwd=MODULE,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if built.returncode != 0:
            tail = " | ".join(built.stderr.strip().splitlines()[-8:])
            raise ClientFailed("go", "setup", f"go build failed: {tail}")
        try:
            staging.rename(entry)
        except OSError:
            if not entry.exists():
                raise
        return entry
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def binary(client: str) -> Path:
    """The built program of ``client`` (a key of CLIENTS).

    Raises:
        ClientFailed: the module could not be built (stage "setup").
    """
    return _built() / CLIENTS[client]


def command(client: str, mode: str, *args: str) -> list[str]:
    """The command line of ``client``'s program in ``mode``."""
    return [str(binary(client)), mode, *args]


def connection_flags(job_tls: _tls.ClientTls | None) -> list[str]:
    """TLS as flags (the SASL login travels in the environment, _tls.go_environment)."""
    if job_tls is None:
        return []
    flags = ["-ca", job_tls.ca_file]
    if job_tls.cert_file:
        flags += ["-cert", job_tls.cert_file, "-key", job_tls.key_file]
    return flags


def settings(client: str) -> dict[str, str]:
    """The library version from go.mod and what the client's programs set."""
    library = {
        "franz-go": "twmb/franz-go",
        "sarama": "IBM/sarama",
        "kafka-go": "segmentio/kafka-go",
    }
    path = f"github.com/{library[client]}"
    version = next(
        line.split()[1]
        for line in (MODULE / "go.mod").read_text().splitlines()
        if line.strip().startswith(path + " ")
    )
    return {client: f"{library[client]} {version} (Go module proxy)"} | _NOTES[client]


def run(job: Job, client: str) -> ClientReport:
    """Create, produce (acks=all), consume in ``job.group`` and commit, with ``client``."""
    flags = [
        "-bootstrap", job.bootstrap, "-topic", job.topic, "-partitions", str(job.partitions),
        "-group", job.group, "-session-timeout-ms", str(job.session_timeout_ms),
        "-deadline-ms", str(int(job.deadline_s * 1000)), *connection_flags(job.tls),
    ]  # fmt: skip
    lines = "".join(f"{r.key}\t{r.value}\n" for r in job.records)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            with_hosts(job.hosts_file, command(client, "roundtrip", *flags)),
            input=lines,
            env={**os.environ, **_tls.go_environment(job.sasl)},
            capture_output=True,
            text=True,
            timeout=job.deadline_s + 30,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClientFailed(client, "consume", f"still running at the deadline: {exc}") from exc
    produced, consumed, created = parse_events(proc.stdout)
    if proc.returncode != 0:
        stage = "consume"
        if len(produced) < len(job.records):
            stage = "produce" if created else "create"
        stderr = " | ".join(proc.stderr.strip().splitlines()[-8:])
        raise ClientFailed(client, stage, f"exit {proc.returncode}: {stderr}")
    notes = settings(client) | {
        "session.timeout": f"{job.session_timeout_ms} ms",
        "commit": "synchronous, after consuming, before leaving the group",
        "run": f"{time.monotonic() - started:.1f} s",
    }
    return ClientReport(produced, consumed, notes | _tls.settings(job.tls, job.sasl))


def parse_events(
    stdout: str,
) -> tuple[tuple[Delivered, ...], tuple[Consumed, ...], bool]:
    """Produced and consumed records and whether the topic was created, from the roundtrip
    mode's TSV lines ("created T", "produced"/"consumed" partition offset key value)."""
    produced: list[Delivered] = []
    consumed: list[Consumed] = []
    created = False
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "created":
            created = True
        elif kind in ("produced", "consumed"):
            partition, offset, key, value = rest.split("\t", 3)
            if kind == "produced":
                produced.append(Delivered(int(partition), int(offset), key, value))
            else:
                consumed.append(Consumed(int(partition), int(offset), key, value))
    return tuple(produced), tuple(consumed), created


def case_command(client: str, bootstrap: str, case: str, base: str, run: str) -> list[str]:
    """``client``'s program running feature ``case`` (tests/compat/_cases.py)."""
    return command(
        client, "case", "-bootstrap", bootstrap, "-case", case, "-topic", base, "-run-id", run
    )
