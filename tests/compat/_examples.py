# Strategy: the matrix's clients are the programs in examples/, run as a user runs them.
#
# Every example does the round trip (create, produce with acks=all, consume in a group from
# the earliest offset, commit) and prints one line per record:
#
#     produced partition=P offset=O key=K value=V     (kcat: "produced partition=P offset=O")
#     consumed partition=P offset=O key=K value=V
#
# so a runner only builds the command line from a Job (`example_flags`: the same flags for
# the Python examples and the Java one) and parses those lines back (`parse_output`) into the
# `Delivered` and `Consumed` the checker compares with the broker. Keeping one program per
# client, in examples/, means what users copy is what the matrix proves works. A failed run
# is a ClientFailed whose stage comes from how far the output got.
"""Run an example program for a Job and turn its output into a ClientReport."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.compat import _tls
from tests.compat._hosts import with_hosts
from tests.compat._model import KEY_COUNT, ClientFailed, ClientReport, Consumed, Delivered, Job

__all__ = [
    "EXAMPLES",
    "example_flags",
    "parse_output",
    "python_example",
    "run_example",
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

_LINE = re.compile(
    r"^(?P<kind>produced|consumed) partition=(?P<partition>-?\d+) offset=(?P<offset>-?\d+)"
    r"(?: key=(?P<key>\S*) value=(?P<value>.*))?$",
    re.MULTILINE,
)
#: A librdkafka password passed to kcat.sh as ``-X sasl.password=...``, masked in reports.
_PASSWORD = re.compile(r"^(sasl\.password=).*")
#: The examples print "topic T: created|exists" once the admin step has succeeded.
_CREATED = re.compile(r"^topic \S+: (created|exists)$", re.MULTILINE)


def example_flags(job: Job) -> list[str]:
    """The flags every example but kcat.sh takes, for ``job``.

    The SASL password is not a flag: it travels in $KAFKA_SASL_PASSWORD (``example_env``),
    so it is neither in the process list nor in the matrix's report.
    """
    flags = [
        "--bootstrap", job.bootstrap, "--topic", job.topic, "--group", job.group,
        "--count", str(len(job.records)), "--keys", str(KEY_COUNT),
        "--partitions", str(job.partitions), "--run-id", job.run_id,
        "--session-timeout-ms", str(job.session_timeout_ms),
        "--timeout-s", str(job.deadline_s),
    ]  # fmt: skip
    if job.tls is not None:
        flags += ["--ca-file", job.tls.ca_file]
        if job.tls.cert_file:
            flags += ["--cert-file", job.tls.cert_file, "--key-file", job.tls.key_file]
    if job.sasl is not None:
        flags += ["--sasl-mechanism", job.sasl.mechanism, "--sasl-username", job.sasl.username]
    return flags


def example_env(job: Job) -> dict[str, str]:
    """The environment an example runs in: this one, plus the SASL password if any."""
    env = dict(os.environ)
    if job.sasl is not None:
        env["KAFKA_SASL_PASSWORD"] = job.sasl.password
    return env


def parse_output(stdout: str) -> tuple[tuple[Delivered, ...], tuple[Consumed, ...]]:
    """The "produced" and "consumed" lines of an example's output, in the order printed."""
    produced: list[Delivered] = []
    consumed: list[Consumed] = []
    for m in _LINE.finditer(stdout):
        partition, offset, key, value = int(m["partition"]), int(m["offset"]), m["key"], m["value"]
        if m["kind"] == "produced":
            produced.append(Delivered(partition, offset, key, value))
        else:
            consumed.append(Consumed(partition, offset, key, value))
    return tuple(produced), tuple(consumed)


def run_example(
    client: str,
    command: Sequence[str],
    job: Job,
    env: dict[str, str] | None = None,
    stage_of_failure: Callable[[str, str], str | None] | None = None,
) -> tuple[ClientReport, str]:
    """Run ``command`` (an example) for ``job``; its report, and its stdout.

    ``stage_of_failure(stdout, stderr)`` may name the stage a failed run stopped at (kcat.sh
    knows better from its step lines); otherwise it is "create" before the topic line,
    "produce" before every record was acknowledged, else "consume".

    Raises:
        ClientFailed: the example exited non-zero or outlived the job's deadline.
    """
    try:
        proc = subprocess.run(
            with_hosts(job.hosts_file, command),
            env=env if env is not None else example_env(job),
            capture_output=True,
            text=True,
            timeout=job.deadline_s + 30,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        raise ClientFailed(
            client, _stage(out, "", job, stage_of_failure), "still running at the deadline"
        ) from exc
    produced, consumed = parse_output(proc.stdout)
    if proc.returncode != 0:
        stage = _stage(proc.stdout, proc.stderr, job, stage_of_failure)
        tail = " | ".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-8:])
        raise ClientFailed(client, stage, f"exit {proc.returncode}: {tail}")
    settings = {"command": shlex.join(_shown(command))} | _tls.settings(job.tls, job.sasl)
    return ClientReport(produced, consumed, settings), proc.stdout


def python_example(script: str, notes: dict[str, str]) -> Callable[[Job], ClientReport]:
    """A driver that runs ``examples/<script>`` with this interpreter; ``notes`` are reported."""
    client = script.removesuffix("_example.py").replace("_", "-")

    def run(job: Job) -> ClientReport:
        command = [sys.executable, str(EXAMPLES / script), *example_flags(job)]
        report, _ = run_example(client, command, job)
        return ClientReport(report.produced, report.consumed, notes | report.settings)

    return run


def _stage(
    stdout: str, stderr: str, job: Job, stage_of_failure: Callable[[str, str], str | None] | None
) -> str:
    if stage_of_failure is not None:
        named = stage_of_failure(stdout, stderr)
        if named is not None:
            return named
    if not _CREATED.search(stdout):
        return "create"
    produced, _ = parse_output(stdout)
    return "produce" if len(produced) < len(job.records) else "consume"


def _shown(command: Sequence[str]) -> list[str]:
    """The command as reported: paths relative to the repository, the interpreter as python."""
    root = str(EXAMPLES.parent) + os.sep
    shown = [_PASSWORD.sub(r"\1***", arg.removeprefix(root)) for arg in command]
    if shown and shown[0] == sys.executable:
        shown[0] = "python"
    return shown
