# Strategy: kcat's round trip, run as the command-line tool it is, with a choice of librdkafka.
#
# Debian's kcat (1.7.1) links Debian's librdkafka 2.0.2, which cannot parse Tansu's
# ApiVersions reply ("ApiVersionRequest failed: Local: Read underflow"). The confluent-kafka
# wheel ships a newer librdkafka under a mangled file name; a private directory holding a
# `librdkafka.so.1` symlink to it, put on LD_LIBRARY_PATH, makes the same kcat binary use
# it. `run(job, librdkafka="wheel")` does that; `librdkafka="debian"` runs kcat untouched,
# so the matrix records how Debian's own library fares (directly, and later via the proxy).
#
# The round trip is examples/kcat.sh, each step a separate kcat process because that is how
# people use it (the script's header has the one-liners). The job reaches it as environment
# (TOPIC, GROUP, KEYS, RUN, SESSION_TIMEOUT_MS, KCAT) and its TLS and SASL as librdkafka
# `-X` options passed through to every kcat command. Before it runs, kafka-python's admin
# creates the topic (kcat has no admin API; the script relies on auto-create, which would
# not give the job's partition count). kcat reports a delivery's slot, not its record, so
# `Delivered` has no key/value; kcat has no explicit commit either: librdkafka's auto-commit
# is flushed when kcat closes. A failure's stage is the script's last step: "metadata"
# (`kcat -L -m 5`, which fails fast when the client cannot talk to the broker at all),
# "produce" or "consume".

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from tests.compat import _tls
from tests.compat._direct import create_topic
from tests.compat._examples import EXAMPLES, run_example
from tests.compat._model import KEY_COUNT, ClientFailed, ClientReport, Job

__all__ = ["Librdkafka", "kcat_environment", "run"]

Librdkafka = Literal["wheel", "debian"]

EXAMPLE = EXAMPLES / "kcat.sh"
_LIBRDKAFKA_VERSION = re.compile(r"librdkafka (\S+)")


def run(job: Job, librdkafka: Librdkafka = "wheel") -> ClientReport:
    """examples/kcat.sh for ``job``, on a topic kafka-python's admin created first.

    Raises:
        ClientFailed: at "setup", "create", or the step of kcat.sh that failed ("metadata",
            "produce", "consume").
    """
    client = "kcat" if librdkafka == "wheel" else "kcat-debian"
    kcat, env, settings = kcat_environment(client, librdkafka)
    # kcat has no admin API and kcat.sh leaves creation to the broker's auto-create, which
    # would not give the job's partition count.
    if job.admin_bootstrap:  # a name only kcat's own process resolves: create it direct
        create_topic(client, job.admin_bootstrap, job.topic, job.partitions)
    else:
        create_topic(client, job.bootstrap, job.topic, job.partitions, job.tls, job.sasl)
    env |= {
        "KCAT": kcat,
        "TOPIC": job.topic,
        "GROUP": job.group,
        "KEYS": str(KEY_COUNT),
        "RUN": job.run_id,
        "SESSION_TIMEOUT_MS": str(job.session_timeout_ms),
    }
    extra = [
        arg
        for k, v in _tls.librdkafka_config(job.tls, job.sasl).items()
        for arg in ("-X", f"{k}={v}")
    ]
    command = ["bash", str(EXAMPLE), job.bootstrap, str(len(job.records)), *extra]
    report, _ = run_example(client, command, job, env=env, stage_of_failure=_failed_step)
    settings |= {
        "kcat.sh env": " ".join(f"{k}={env[k]}" for k in ("TOPIC", "GROUP", "KEYS", "RUN")),
        "commit": "auto-commit, flushed when kcat closes (kcat has no explicit commit)",
        "admin": "none in kcat: topic created with kafka-python's admin",
    }
    return ClientReport(report.produced, report.consumed, settings | report.settings)


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


def _failed_step(stdout: str, stderr: str) -> str:
    """The stage of kcat.sh's last step ("+ kcat ..." on stderr); "setup" before any."""
    steps = [line.split() for line in stderr.splitlines() if line.startswith("+ ")]
    if not steps:
        return "setup"
    last = steps[-1]
    if "-L" in last:
        return "metadata"
    return "produce" if "-P" in last else "consume"
