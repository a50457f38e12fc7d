"""Run the real proxy (``python -m proxy run``) as a process for integration tests.

Why a process: that is how users run it, it lets any client library (threads, asyncio, JVM,
librdkafka) talk to it over TCP, and a test can read its log lines and kill it by PID.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from testbed.processes import stop_gracefully

__all__ = ["ProxyProcess", "running_proxy"]

_READY = re.compile(r"purgatory-proxy listening on (?P<host>\S+):(?P<port>\d+)")


@dataclass
class ProxyProcess:
    """A running proxy: its bootstrap address, PID and everything it has logged so far."""

    host: str
    port: int
    pid: int
    log_path: Path
    _proc: subprocess.Popen[bytes] = field(repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, timeout_s: float = 10.0) -> re.Match[str]:
        """Wait until a log line matches ``pattern`` (a regex); fail with the log if not."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = regex.search(self.log_text())
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no log line matched {pattern!r}:\n{self.log_text()}")

    def alive(self) -> bool:
        return self._proc.poll() is None

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 15.0) -> int:
        """Send ``signum`` and wait for the process to exit; return its exit code."""
        self._proc.send_signal(signum)
        return self._proc.wait(timeout=timeout_s)


def _limit_descriptors(nofile: int) -> None:
    """Runs in the child before exec."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


@contextlib.contextmanager
def running_proxy(
    upstream: str | None,
    *args: str,
    env: dict[str, str] | None = None,
    nofile: int | None = None,
    root: Path | None = None,
) -> Iterator[ProxyProcess]:
    """Start ``python -m proxy run`` on a free loopback port; kill it (by PID) afterwards.
    ``nofile``: its RLIMIT_NOFILE, soft and hard, from the start (a descriptor-starved host);
    ``root``: the checkout whose proxy runs (default: this one)."""
    command = [sys.executable, "-m", "proxy", "run", "--listen", "127.0.0.1:0", *args]
    if upstream is not None:
        command += ["--upstream", upstream]
    log = tempfile.NamedTemporaryFile(prefix="proxy-", suffix=".log", delete=False)  # noqa: SIM115
    # The repository this testbed belongs to: `-m proxy` then imports that checkout's proxy,
    # whatever the interpreter's editable install points at.
    root = root or Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
        env={**os.environ, **(env or {})},
        preexec_fn=None if nofile is None else functools.partial(_limit_descriptors, nofile),
    )
    log_path = Path(log.name)
    try:
        deadline = time.monotonic() + 60
        while True:
            found = _READY.search(log_path.read_text(errors="replace"))
            if found:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"proxy did not become ready:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield ProxyProcess(found["host"], int(found["port"]), proc.pid, log_path, proc)
    finally:
        # SIGTERM first, so the proxy stops what it owns (the embedded broker) itself.
        stop_gracefully(proc)
        log.close()
        if os.environ.get("KEEP_PROXY_LOGS"):
            print(f"proxy log kept at {log_path}", file=sys.stderr)
        else:
            log_path.unlink(missing_ok=True)
