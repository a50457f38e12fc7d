"""What README.md and examples/README.md tell a new user to run, run as written.

`make run` itself (the ports moved to free ones: the one change a test has to make) with the
embedded Tansu broker behind it, or `--upstream $KAFKA_BOOTSTRAP` when that is set, waited for
as README says (its `ready:` line, /readyz 200); its /healthz, /readyz and /metrics; a second
`make run` while the first holds METRICS, and README's line for one beside it; `make
examples`; then every command of examples/README.md's "run it" column, with the proxy's
address in place of 127.0.0.1:9092: through `make run`, or through `make run-kafka` (the proxy
in front of a local Apache Kafka) where the row says so. Each must exit 0 having printed one
"produced" and one "consumed" line per record on stdout (and none on stderr: a terminal shows
both), the consumed records exactly the produced ones; pointed at a port nobody answers, the
Python and Java ones must give up within their --timeout-s in one line. The Java client's
classpath.sh, resolving from scratch, must not leak Maven's colour codes.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxy.observability.readiness import READY_LINE
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
def _made(target: str, log: Path, command: list[str] | None = None) -> Iterator[MadeRun]:
    """`make TARGET` with the proxy and its endpoint on free ports, until it is ready
    (``command``: make's arguments as written, its ports already free ones)."""
    port, metrics = free_port(), free_port()
    args = f"--listen 127.0.0.1:{port}" + (f" --upstream {UPSTREAM}" if UPSTREAM else "")
    if command is None:
        command = ["make", target, f"METRICS=127.0.0.1:{metrics}", f"ARGS={args}"]
    else:
        port, metrics = _ports_of(command)
    with log.open("wb") as out:
        # Its own session: make, the proxy and its broker stop as one group.
        proc = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        http = f"http://127.0.0.1:{metrics}"
        deadline = time.monotonic() + _GUARD_S
        # README: wait for the ready line or /readyz 200 (here both: they mean one thing).
        while READY_LINE not in log.read_text() or _http(f"{http}/readyz")[0] != 200:
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


def _ports_of(command: list[str]) -> tuple[int, int]:
    """The bootstrap and metrics ports of a `make run METRICS=... ARGS="--listen ..."`."""
    text = " ".join(command)
    listen = re.search(r"--listen 127\.0\.0\.1:(\d+)", text)
    metrics = re.search(r"METRICS=127\.0\.0\.1:(\d+)", text)
    assert listen is not None and metrics is not None, text
    return int(listen[1]), int(metrics[1])


def _with_free_ports(command: str) -> str:
    """``command`` with each documented loopback port replaced by a free one."""
    ports = {port: str(free_port()) for port in re.findall(r"127\.0\.0\.1:(\d+)", command)}
    return re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{ports[m[1]]}", command)


def _readme_line(start: str) -> str:
    """README.md's command line that starts with ``start``, without its comment."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith(start):
            return line.split(" # ", 1)[0].strip()
    raise AssertionError(f"README.md has no line starting {start!r}")


def test_a_second_make_run_says_metrics_is_taken_and_readme_line_runs_beside_it(
    tmp_path: Path,
) -> None:
    """The first `make run` holds the Makefile's METRICS: a second one says so, naming the
    variable, and exits 2 before starting anything; README's line for a second proxy (its own
    METRICS and --listen) then runs beside it."""
    with socket.socket() as first:  # the first `make run`'s metrics port
        first.bind(("127.0.0.1", 0))
        first.listen()
        taken = first.getsockname()[1]
        second = subprocess.run(
            ["make", "run", f"METRICS=127.0.0.1:{taken}"],
            cwd=ROOT, capture_output=True, text=True, timeout=_GUARD_S, check=False,
        )  # fmt: skip
    assert second.returncode == 2, second.stdout + second.stderr
    assert "purgatory-proxy run" not in second.stdout, "the proxy was started"
    start = f"make run: cannot serve /metrics on 127.0.0.1:{taken}, the Makefile's METRICS: "
    said = next((line for line in second.stderr.splitlines() if line.startswith(start)), "")
    assert "address already in use (another make run?)" in said, second.stderr
    assert "make run METRICS=127.0.0.1:9465" in said and "METRICS=" in said
    documented = _readme_line("make run METRICS=")
    command = shlex.split(_with_free_ports(documented))
    assert command[:2] == ["make", "run"], documented
    if UPSTREAM:
        command = [*command[:-1], f"{command[-1]} --upstream {UPSTREAM}"]
    with _made("run", tmp_path / "second.log", command) as made:
        assert _http(f"{made.http}/readyz")[0] == 200


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
    # A terminal shows stderr beside stdout: a record line there reads as a second delivery.
    assert _RECORD.search(ran.stderr) is None, ran.stderr
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


@pytest.mark.parametrize(
    "command", [c for c, _ in documented_commands() if not c.startswith("examples/kcat.sh")]
)
def test_example_gives_up_within_its_timeout_on_a_dead_address(command: str) -> None:
    """examples/README.md: --timeout-s S, "give up after this"; also when nothing answers, in
    one line, not a stack trace. (The Python and Java examples take it; kcat.sh does not.
    The guard is the test's hang guard, well above the timeout: no timing is asserted.)"""
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
    ran = subprocess.run(
        ["bash", "-c", f"{command.replace(DOCUMENTED_BOOTSTRAP, dead)} --timeout-s 3"],
        cwd=ROOT, capture_output=True, text=True, timeout=_GUARD_S, check=False,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stderr and "\n\tat " not in ran.stderr, ran.stderr
    assert f"no answer from {dead} within --timeout-s 3" in ran.stderr, ran.stderr


def test_java_classpath_resolved_from_scratch_prints_no_colour_codes(tmp_path: Path) -> None:
    """examples/README.md's `CP=$(examples/java/classpath.sh)`, with nothing cached yet: Maven
    runs, and its colour resets must not reach the terminal (run.sh shows its stderr)."""
    ran = subprocess.run(
        ["bash", "-c", 'CP=$(examples/java/classpath.sh) && echo "$CP"'],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PURGATORY_CACHE": str(tmp_path)},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "+ mvn dependency:build-classpath" in ran.stderr, "Maven did not run"
    assert "\x1b" not in ran.stderr + ran.stdout, repr(ran.stderr)
    assert "kafka-clients-4.4.0.jar" in ran.stdout
