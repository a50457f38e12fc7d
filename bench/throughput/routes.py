# Strategy: a "route" is how a client reaches the broker: straight to it (direct), through our
# proxy, or through `tansu proxy` (the peer). Every route is started fresh around a fresh
# broker (Tansu's memory storage keeps every record in RAM, so a long run would otherwise
# measure a growing heap), and each exposes the PID that does the forwarding so the benchmark
# can read its CPU time and RSS with psutil. Processes are always stopped by PID.
"""Start the broker plus one forwarding route for bench.throughput and stop them after."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from proxy.broker.embedded_broker import tansu_binary
from testbed.processes import free_port, running_process, running_tansu
from testbed.proxy_process import running_proxy

__all__ = ["BASELINE_PREFIX", "ROUTES", "Route", "running_route"]

#: Display order; a run alternates A B C A B C so slow drift of the machine cancels.
ROUTES = ("direct", "purgatory-proxy", "tansu-proxy")
#: A route named BASELINE_PREFIX + a directory runs the proxy from that source tree (say a
#: `git worktree` of an older commit), so a change is measured side by side with what it
#: replaces, on the same machine in the same minutes.
BASELINE_PREFIX = "purgatory-proxy@"


@dataclass(frozen=True)
class Route:
    """Where a client connects, and which process forwards (None for direct)."""

    name: str
    bootstrap: str
    broker_pid: int
    forwarder_pid: int | None


@contextlib.contextmanager
def _running_tansu_proxy(origin: str) -> Iterator[tuple[int, int]]:
    """``tansu proxy`` on a free port in front of ``origin``; yields its port and PID."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    command = [
        tansu_binary(),
        "proxy",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--origin-url",
        f"tcp://{origin}",
    ]
    with running_process(command, port) as pid:
        yield port, pid


@contextlib.contextmanager
def _running_proxy_from(root: str, upstream: str) -> Iterator[tuple[int, int]]:
    """The proxy's code in ``root`` (``python -P``: the working directory is not on the path,
    PYTHONPATH is) on a free port in front of ``upstream``; yields its port and PID."""
    port = free_port()
    command = [sys.executable, "-P", "-m", "proxy", "run", "--listen", f"127.0.0.1:{port}",
               "--upstream", upstream]  # fmt: skip
    with running_process(command, port, env={"PYTHONPATH": root}) as pid:
        yield port, pid


@contextlib.contextmanager
def running_route(name: str) -> Iterator[Route]:
    """A fresh broker and, unless ``name`` is "direct", the forwarder in front of it."""
    with running_tansu() as broker:
        assert broker.pid is not None
        if name == "direct":
            yield Route(name, broker.bootstrap, broker.pid, None)
        elif name == "purgatory-proxy":
            with running_proxy(broker.bootstrap) as proxy:
                yield Route(name, proxy.bootstrap, broker.pid, proxy.pid)
        elif name.startswith(BASELINE_PREFIX):
            with _running_proxy_from(name.removeprefix(BASELINE_PREFIX), broker.bootstrap) as (
                port,
                pid,
            ):
                yield Route(name, f"127.0.0.1:{port}", broker.pid, pid)
        elif name == "tansu-proxy":
            with _running_tansu_proxy(broker.bootstrap) as (port, pid):
                yield Route(name, f"127.0.0.1:{port}", broker.pid, pid)
        else:
            raise ValueError(f"unknown route {name!r}; expected one of {ROUTES}")
