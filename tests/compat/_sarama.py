# Strategy: Go's sarama as the sixth client, from Debian only (golang-go and
# golang-github-shopify-sarama-dev, which scripts/install-system-deps.sh installs): the program
# in sarama/roundtrip.go is built offline in GOPATH mode (GO111MODULE=off,
# GOPATH=/usr/share/gocode, where Debian puts Go library sources), once per source hash, into
# the per-user temp directory, then run with the records on stdin and one tab-separated line
# per event on stdout (`parse_events`).
#
# It is the one client that is not a program in examples/: it needs a Go toolchain and
# Debian's 2019 sarama in GOPATH mode, takes the records on stdin, and runs without a
# consumer group against Tansu — a test harness for an old library, not something to copy.
#
# Debian's sarama is 1.22.1 (2019): it speaks Kafka 2.0 request versions (config.Version
# V2_0_0_0), has no ApiVersions negotiation, and its idempotent producer needs settings
# (one in-flight request) that change what is tested, so it produces with acks=all only.
#
# In the matrix without a consumer group (Job.groups False, _matrix.GROUPLESS): against
# Tansu 0.6 sarama 1.22 cannot join a group or commit, directly or through the proxy
# (WHY_NO_GROUP), so it reads back with partition consumers from the oldest offset and the
# check covers produce, consume and equality with the direct reader. With groups=True the
# same program joins the group and commits (for a real Kafka, or a later Tansu).
"""sarama's round trip (Go, built offline from Debian's packages)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.compat import _tls
from tests.compat._model import ClientFailed, ClientReport, Consumed, Delivered, Job

__all__ = ["WHY_NO_GROUP", "parse_events", "run", "sarama_binary"]

CLIENT = "sarama"
SOURCE = Path(__file__).with_name("sarama") / "roundtrip.go"
GOPATH = Path("/usr/share/gocode")

#: Why the matrix runs sarama without a consumer group (measured, directly and through the
#: proxy; see sarama/roundtrip.go).
WHY_NO_GROUP = (
    "Tansu 0.6 answers sarama 1.22's JoinGroup v2 with MEMBER_ID_REQUIRED (79; KIP-394 allows "
    "it only from v4, sarama 1.22 does not handle it) and its standalone OffsetCommit with "
    "UNKNOWN_MEMBER_ID"
)


def sarama_binary() -> Path:
    """The built round-trip program; built on a miss.

    Raises:
        ClientFailed: go or Debian's sarama sources are missing, or the build failed (stage
            "setup", with the compiler's last lines).
    """
    go = shutil.which("go")
    if go is None or not (GOPATH / "src/github.com/Shopify/sarama").is_dir():
        raise ClientFailed(
            CLIENT,
            "setup",
            "go or /usr/share/gocode/src/github.com/Shopify/sarama missing: "
            "apt-get install golang-go golang-github-shopify-sarama-dev",
        )
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"purgatory-proxy-compat-{os.getuid()}" / "sarama"
    binary = cache / f"roundtrip-{digest}"
    if binary.exists():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    staging = cache / f".roundtrip-{os.getpid()}"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": str(GOPATH),
        "GOFLAGS": "",
        "GOCACHE": str(cache / "gocache"),
    }
    built = subprocess.run(
        [go, "build", "-o", str(staging), SOURCE.name],
        cwd=SOURCE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if built.returncode != 0:
        tail = " | ".join(built.stderr.strip().splitlines()[-8:])
        raise ClientFailed(CLIENT, "setup", f"go build failed: {tail}")
    os.replace(staging, binary)
    return binary


def run(job: Job) -> ClientReport:
    """Create (ClusterAdmin), produce (SyncProducer, acks=all), consume back.

    Consume: in ``job.group`` with commits when ``job.groups``, else with one partition
    consumer per partition from the oldest offset until every produced offset was seen.
    """
    binary = sarama_binary()
    mode = "group" if job.groups else "partitions"
    command = [
        str(binary), job.bootstrap, job.topic, str(job.partitions), mode, job.group,
        str(job.session_timeout_ms), str(int(job.deadline_s * 1000)),
    ]  # fmt: skip
    if job.tls is not None:
        command.append(job.tls.ca_file)
        if job.tls.cert_file:
            command += [job.tls.cert_file, job.tls.key_file]
    lines = "".join(f"{r.key}\t{r.value}\n" for r in job.records)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            command,
            input=lines,
            env={**os.environ, **_tls.sarama_environment(job.sasl)},
            capture_output=True,
            text=True,
            timeout=job.deadline_s + 30,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClientFailed(CLIENT, "consume", f"still running at the deadline: {exc}") from exc
    produced, consumed, created = parse_events(proc.stdout)
    if proc.returncode != 0:
        stage = "consume"
        if len(produced) < len(job.records):
            stage = "produce" if created else "create"
        stderr = " | ".join(proc.stderr.strip().splitlines()[-8:])
        raise ClientFailed(CLIENT, stage, f"exit {proc.returncode}: {stderr}")
    settings = {
        "sarama": "1.22.1 (Debian golang-github-shopify-sarama-dev), Version V2_0_0_0",
        "acks": "WaitForAll",
        "idempotent": "false (sarama 1.22 needs MaxOpenRequests=1 for it)",
        "run": f"{time.monotonic() - started:.1f} s",
    }
    if job.groups:
        settings["session.timeout"] = f"{job.session_timeout_ms} ms"
        settings["commit"] = "marked offsets, auto-committed every 200 ms and on Close"
    else:
        settings["group"] = f"none, partition consumers from the oldest offset: {WHY_NO_GROUP}"
    settings |= _tls.settings(job.tls, job.sasl)
    if job.sasl is not None:
        settings["scram"] = "roundtrip.go's own SCRAM client (sarama 1.22 has none)"
    return ClientReport(produced, consumed, settings)


def parse_events(
    stdout: str,
) -> tuple[tuple[Delivered, ...], tuple[Consumed, ...], bool]:
    """Produced and consumed records and whether the topic was created, from the TSV event
    lines sarama/roundtrip.go prints ("created", "produced"/"consumed" partition offset key
    value)."""
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
