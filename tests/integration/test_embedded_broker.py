"""The embedded Tansu broker lives exactly as long as the proxy (issue 15).

The bug this guards against: the broker died about 10 s after every start, because
PR_SET_PDEATHSIG fired when trio retired the idle worker thread that had started it. Every
check here therefore runs longer than that thread timeout, or kills something on purpose.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.error
import urllib.request

import psutil
import trio

from proxy.broker.embedded_broker import EmbeddedBroker, tansu_binary
from proxy.observability.readiness import Readiness
from testbed.processes import free_port
from testbed.proxy_process import running_proxy
from tests.support.aiokafka_roundtrip import aiokafka_roundtrip

#: Longer than trio's worker-thread idle timeout (10 s), with margin: what killed the broker.
_PAST_THREAD_IDLE_S = 30.0


def _tansu_under(pid: int, port: int | None = None) -> psutil.Process:
    """The Tansu process started (through its keeper) by process ``pid`` (on ``port``).

    Why the port: in process, the test run's own session broker is a child of pytest too.
    """
    binary = os.path.realpath(tansu_binary())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                ours = port is None or f"tcp://127.0.0.1:{port}" in child.cmdline()
                if ours and os.path.realpath(child.exe()) == binary:
                    return child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.05)
    raise AssertionError(f"no Tansu process under {pid}")


def _gone_within(process: psutil.Process, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_real_round_trip_30_s_after_start_then_a_clean_exit() -> None:
    """What a new user does: `make run`, then a producer and a consumer group a while later."""
    with running_proxy(None) as proxy:
        proxy.wait_for_log(r"no upstream configured: started the embedded Tansu broker")
        started = time.monotonic()
        time.sleep(max(0.0, _PAST_THREAD_IDLE_S - (time.monotonic() - started)))
        got = asyncio.run(aiokafka_roundtrip(proxy.bootstrap))
        assert got == [(b"k%d" % i, b"v%d" % i) for i in range(10)]
        assert proxy.stop(signal.SIGTERM) == 0
        assert "embedded Tansu broker exited" not in proxy.log_text()


def test_kill_9_of_the_proxy_leaves_no_broker_within_5_s() -> None:
    with running_proxy(None) as proxy:
        broker = _tansu_under(proxy.pid)
        os.kill(proxy.pid, signal.SIGKILL)
        assert _gone_within(broker, 5.0), f"broker {broker.pid} outlived the proxy"


def test_a_broker_killed_behind_the_proxys_back_stops_the_proxy_with_status_1() -> None:
    metrics_port = free_port()
    with running_proxy(None, "--metrics", f"127.0.0.1:{metrics_port}") as proxy:
        readyz = f"http://127.0.0.1:{metrics_port}/readyz"
        deadline = time.monotonic() + 30
        while _status(readyz) != 200:
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.1)
        _tansu_under(proxy.pid).kill()
        line = proxy.wait_for_log(r".*the embedded Tansu broker exited with status 137.*")
        assert "not restarted" in line.group(0)
        assert proxy._proc.wait(timeout=15) == 1
        assert "Traceback" not in proxy.log_text()


async def test_a_broker_that_exits_blocks_readiness_and_begins_the_shutdown() -> None:
    """In process, against the real broker: /readyz's reason and the shutdown it starts."""
    readiness = Readiness()
    shutdown = trio.CancelScope()
    broker = EmbeddedBroker(readiness, shutdown)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(broker.run)
        assert readiness.reasons() == []
        tansu = _tansu_under(os.getpid(), address.port)
        tansu.send_signal(signal.SIGKILL)
        with trio.fail_after(15):
            while not shutdown.cancel_called:
                await trio.sleep(0.05)
    assert broker.exit is not None and broker.exit.status == 128 + signal.SIGKILL
    assert readiness.reasons() == ["the embedded broker exited with status 137"]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code
