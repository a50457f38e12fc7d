# Strategy: the proxy's own faults, which no broker test covers, done to a real proxy process
# while clients run through it:
#
#   ProxyReplica    a proxy on fixed loopback ports (its bootstrap port, consecutive broker
#                   ports from `first_broker_port`, its /metrics port), so it can be stopped
#                   (SIGTERM: the drain; SIGKILL: a crash) and started again where clients
#                   expect it, as an orchestrator restarts a pod. Two replicas, each with its
#                   own ports, behind one bootstrap list are a rolling restart's setting.
#   cut_upstream    the proxy's connections to the brokers reset while both processes live on:
#                   `ss -K` (sock_destroy through the kernel's inet_diag, which needs
#                   CONFIG_INET_DIAG_DESTROY and CAP_NET_ADMIN) destroys each of the proxy's
#                   sockets to a broker port, found by its 4-tuple in the proxy's own table of
#                   connections (psutil), so clients' direct connections to the same brokers
#                   are untouched. The broker's end gets a reset; the proxy's next read or write
#                   on it fails (ECONNABORTED).
#   can_cut         whether this machine can do that: one throwaway loopback connection is
#                   destroyed the same way and must read as aborted.
#
# Every process is stopped by PID when the block ends (testbed/proxy_process.running_proxy).
"""A proxy process restartable on its ports, and its upstream connections cut."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable

import psutil

from testbed.processes import free_port, free_port_run
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.support.broker_faults import ProxyHttp

__all__ = ["ProxyReplica", "can_cut", "cut_upstream"]

_READY_BOUND_S = 60.0


class ProxyReplica:
    """A proxy process in front of ``upstream`` on ports fixed at construction.

    Resource handling: a context manager; the running process is stopped by PID on exit.
    """

    def __init__(self, upstream: str, brokers: int, *extra: str) -> None:
        self.upstream, self.extra = upstream, extra
        self.listen_port = free_port()
        self.first_broker_port = free_port_run(brokers)
        self.http = ProxyHttp(free_port())
        self._stack = contextlib.ExitStack()
        self._process: ProxyProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    @property
    def process(self) -> ProxyProcess:
        assert self._process is not None, "not running"
        return self._process

    def __enter__(self) -> ProxyReplica:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def start(self) -> float:
        """Start the proxy on its ports; the seconds until it said it listens."""
        started = time.monotonic()
        self._process = self._stack.enter_context(
            running_proxy(
                self.upstream,
                "--listen", self.bootstrap,
                "--metrics", f"127.0.0.1:{self.http.port}",
                *self.extra,
                env={"PURGATORY_PROXY_PROXY__FIRST_BROKER_PORT": str(self.first_broker_port)},
            )
        )  # fmt: skip
        return time.monotonic() - started

    def stop(self, signum: int) -> tuple[int, float]:
        """Send ``signum``; its exit code and the seconds until it exited."""
        started = time.monotonic()
        code = self.process.stop(signum, timeout_s=60)
        took = time.monotonic() - started
        self._stack.close()  # the finished process's context (log, reaping)
        self._stack = contextlib.ExitStack()
        self._process = None
        return code, took

    def restart(self, signum: int) -> tuple[int, float, float]:
        """Stop with ``signum`` and start again on the same ports: the exit code, seconds to
        exit, seconds to listen again."""
        code, stopped = self.stop(signum)
        return code, stopped, self.start()

    def connections_to(self, ports: Iterable[int]) -> list[tuple[int, int]]:
        """The proxy's established TCP connections to any of ``ports``: (its port, theirs)."""
        wanted = set(ports)
        return [
            (c.laddr.port, c.raddr.port)
            for c in psutil.Process(self.process.pid).net_connections(kind="tcp")
            if c.raddr and c.raddr.port in wanted and c.status == psutil.CONN_ESTABLISHED
        ]


def _destroy(pairs: list[tuple[int, int]]) -> subprocess.CompletedProcess[str]:
    """`ss -K` on each loopback (local port, remote port) pair."""
    ss = shutil.which("ss")
    assert ss is not None, "ss (iproute2) is not on PATH"
    terms = " or ".join(f"( sport = :{local} and dport = :{remote} )" for local, remote in pairs)
    return subprocess.run(
        [ss, "-K", "-t", "-n", "src", "127.0.0.1", "and", f"( {terms} )"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def cut_upstream(replica: ProxyReplica, broker_ports: Iterable[int]) -> int:
    """Reset every connection the proxy has open to ``broker_ports``; how many there were.

    Raises:
        AssertionError: `ss -K` failed or left one of them open.
    """
    ports = list(broker_ports)
    pairs = replica.connections_to(ports)
    assert pairs, "the proxy has no connection to the brokers to cut"
    done = _destroy(pairs)
    assert done.returncode == 0, f"ss -K failed: {done.stderr}"
    left = set(pairs) & set(replica.connections_to(ports))
    assert not left, f"ss -K left {left} open"
    return len(pairs)


def can_cut() -> str | None:
    """None if `ss -K` can destroy a loopback connection here, else why not."""
    if shutil.which("ss") is None:
        return "ss (iproute2) is not installed"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                local = client.getsockname()[1]
                done = _destroy([(local, port)])
                if done.returncode != 0:
                    return f"ss -K failed: {done.stderr.strip()}"
                client.settimeout(1.0)
                try:
                    client.recv(1)
                except OSError:
                    return None
                return (
                    "ss -K did not destroy the socket (the kernel lacks "
                    "CONFIG_INET_DIAG_DESTROY, or the process lacks CAP_NET_ADMIN)"
                )
