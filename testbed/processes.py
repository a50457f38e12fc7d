"""Start real broker processes for tests on free loopback ports and always stop them by PID.

Why: integration tests talk to a real Kafka-compatible broker over TCP. Each process is
owned by a context manager, so it is killed even when the test fails or is interrupted.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

from proxy.broker.embedded_broker import free_port, tansu_command

__all__ = [
    "Broker",
    "die_with_parent",
    "free_port",
    "free_port_run",
    "running_process",
    "running_tansu",
    "stop_gracefully",
    "wait_for_port",
]


def die_with_parent() -> None:
    """A ``preexec_fn``: runs in the child before exec, so the child is killed (SIGKILL) when
    the process that started it dies, even by kill -9 (Linux's PR_SET_PDEATHSIG)."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def wait_for_port(host: str, port: int, timeout_s: float, proc: subprocess.Popen[bytes]) -> None:
    """Block until ``host:port`` accepts TCP connections, or fail with the process's log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.pid} exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on {host}:{port} within {timeout_s} s")


def stop_gracefully(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM, so the process stops what it owns itself; SIGKILL if it has not exited within
    ``timeout_s``; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait(timeout=timeout_s)


@dataclass(frozen=True)
class Broker:
    """A running broker: where to reach it and its process id (None when external)."""

    host: str
    port: int
    pid: int | None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


@contextlib.contextmanager
def running_process(
    command: list[str], port: int, *, env: dict[str, str] | None = None, timeout_s: float = 30.0
) -> Iterator[int]:
    """Run ``command`` until the block ends; yield its PID once 127.0.0.1:``port`` accepts.

    Output goes to a temporary log whose tail is in the error if the process never listens.
    The process is killed by PID and the log removed, even when the block fails.
    """
    log = tempfile.NamedTemporaryFile(prefix="proc-", suffix=".log", delete=False)  # noqa: SIM115
    full_env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn"), **(env or {})}
    proc = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env
    )
    try:
        try:
            wait_for_port("127.0.0.1", port, timeout_s, proc)
        except (RuntimeError, TimeoutError) as exc:
            log.flush()
            with open(log.name, encoding="utf-8", errors="replace") as text:
                tail = text.read()[-2000:]
            raise RuntimeError(
                f"{command[1:2]} on port {port} did not start: {exc}\n{tail}"
            ) from exc
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)
        log.close()
        os.unlink(log.name)


@contextlib.contextmanager
def running_tansu(
    storage: str = "memory://tansu/", port: int | None = None, env: dict[str, str] | None = None
) -> Iterator[Broker]:
    """Run one Tansu broker on ``port`` (default: a free loopback port) for the block."""
    port = port or free_port()
    with running_process(tansu_command(port, storage=storage), port, env=env) as pid:
        yield Broker("127.0.0.1", port, pid)


def free_port_run(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive ports that are all free now.

    Chosen below the kernel's ephemeral range (32768 and up on Linux), where outgoing
    connections of other tests cannot be sitting on the neighbours of a free port.
    """
    for base in random.sample(range(20_000, 32_000 - count), 200):
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports found on {host}")
