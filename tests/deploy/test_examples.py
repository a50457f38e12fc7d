"""What README.md and examples/README.md tell a new user to run, run as written.

`make run` itself (the ports moved to free ones: the one change a test has to make) with the
embedded Tansu broker behind it, or `--upstream $KAFKA_BOOTSTRAP` when that is set; its
/healthz, /readyz and /metrics; `make examples`; then every command of examples/README.md's
"run it" column, with the proxy's address in place of 127.0.0.1:9092: through `make run`, or
through `make run-kafka` (the proxy in front of a local Apache Kafka) where the row says so.
Each must exit 0 having printed one "produced" and one "consumed" line per record, the
consumed records exactly the produced ones.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_README = ROOT / "examples" / "README.md"
#: The address the documentation uses for the proxy.
DOCUMENTED_BOOTSTRAP = "127.0.0.1:9092"
#: As the other broker-backed tests: another cluster when $KAFKA_BOOTSTRAP is set.
UPSTREAM = os.environ.get("KAFKA_BOOTSTRAP")
_GUARD_S = 180  # hang guard: a first Java run compiles the example

_ROW = re.compile(
    r"^\| \[`[^`]+`\]\([^)]+\) \| `(?P<command>[^`]+)` \| (?P<about>.*)\|$", re.MULTILINE
)
_RECORD = re.compile(
    r"^(?P<kind>produced|consumed|read) partition=(?P<partition>\d+) offset=(?P<offset>\d+)"
    r"(?: key=(?P<key>\S+) value=(?P<value>.*))?$",
    re.MULTILINE,
)


def documented_commands() -> list[tuple[str, str]]:
    """The "run it" column of examples/README.md's table, each with the make target its row
    says the proxy runs under ("run", or "run-kafka")."""
    rows = [
        (m["command"], "run-kafka" if "`make run-kafka`" in m["about"] else "run")
        for m in _ROW.finditer(EXAMPLES_README.read_text())
    ]
    assert len(rows) >= 5, "examples/README.md's table lost its commands"
    return rows


@dataclass(frozen=True)
class MadeRun:
    """The proxy `make run` started: where clients and the HTTP endpoint reach it."""

    bootstrap: str
    http: str
    log: Path


def _http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


@contextlib.contextmanager
def _made(target: str, log: Path) -> Iterator[MadeRun]:
    """`make TARGET` with the proxy and its endpoint on free ports, until it is ready."""
    port, metrics = free_port(), free_port()
    args = f"--listen 127.0.0.1:{port}" + (f" --upstream {UPSTREAM}" if UPSTREAM else "")
    with log.open("wb") as out:
        # Its own session: make, the proxy and its broker stop as one group.
        proc = subprocess.Popen(
            ["make", target, f"METRICS=127.0.0.1:{metrics}", f"ARGS={args}"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        http = f"http://127.0.0.1:{metrics}"
        deadline = time.monotonic() + _GUARD_S
        while _http(f"{http}/readyz")[0] != 200:
            assert proc.poll() is None, f"make exited {proc.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"never ready:\n{log.read_text()}"
            time.sleep(0.2)
        yield MadeRun(f"127.0.0.1:{port}", http, log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def made_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MadeRun]:
    with _made("run", tmp_path_factory.mktemp("make-run") / "make-run.log") as made:
        yield made


@pytest.fixture(scope="module")
def made_run_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MadeRun]:
    # With $KAFKA_BOOTSTRAP, `make run` already stands in front of that cluster.
    target = "run" if UPSTREAM else "run-kafka"
    with _made(target, tmp_path_factory.mktemp("make-run-kafka") / "make.log") as made:
        yield made


def test_make_run_serves_health_readiness_and_metrics(made_run: MadeRun) -> None:
    assert _http(f"{made_run.http}/healthz") == (200, "ok\n")
    assert _http(f"{made_run.http}/readyz")[0] == 200
    status, metrics = _http(f"{made_run.http}/metrics")
    assert status == 200 and "purgatory_proxy_ready 1.0" in metrics
    if UPSTREAM is None:
        said = "no upstream configured: started the embedded Tansu broker"
        assert said in made_run.log.read_text()


def test_make_examples_installs_the_python_clients() -> None:
    made = subprocess.run(["make", "examples"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    imported = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-c", "import aiokafka, kafka, confluent_kafka"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr


def _records(output: str, kind: str) -> list[tuple[int, int, str | None, str | None]]:
    return [
        (int(m["partition"]), int(m["offset"]), m["key"], m["value"])
        for m in _RECORD.finditer(output)
        if m["kind"] == kind
    ]


@pytest.mark.parametrize(("command", "target"), documented_commands())
def test_documented_example_command(
    request: pytest.FixtureRequest, command: str, target: str
) -> None:
    assert DOCUMENTED_BOOTSTRAP in command, command
    made: MadeRun = request.getfixturevalue("made_run" if target == "run" else "made_run_kafka")
    ran = subprocess.run(
        ["bash", "-c", command.replace(DOCUMENTED_BOOTSTRAP, made.bootstrap)],
        cwd=ROOT, capture_output=True, text=True, timeout=_GUARD_S, check=False,
    )  # fmt: skip
    output = ran.stdout
    assert ran.returncode == 0, f"exit {ran.returncode}\n{output}\n{ran.stderr[-3000:]}"
    produced, consumed = _records(output, "produced"), _records(output, "consumed")
    assert produced, output
    if command.startswith("examples/kcat.sh"):
        # kcat's delivery report names the slot, not the record: compare slots, and what it
        # read without a group with what the group consumed.
        assert {(p, o) for p, o, *_ in consumed} == {(p, o) for p, o, *_ in produced}
        assert sorted(_records(output, "read")) == sorted(consumed)
        assert f"consumed {len(produced)} in group" in output
    else:
        assert sorted(consumed) == sorted(produced), output
        assert len({value for *_, value in produced}) == len(produced)
        assert f"produced {len(produced)}, consumed {len(produced)}" in output
