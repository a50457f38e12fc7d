"""The embedded broker's keeper with real processes (``sleep`` stands in for the broker).

What the keeper promises (proxy/broker/broker_keeper.py): the child lives exactly as long as the
keeper's stdin (the lifeline) is open and the keeper itself lives; a child that exits on its own
is reported with its status. None of this depends on which thread started the keeper, which is
what broke with PR_SET_PDEATHSIG under trio's worker threads (issue 15).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from proxy.broker.broker_keeper import _die_with_keeper

_GONE_WITHIN_S = 5.0


@pytest.fixture
def keeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.broker.broker_keeper", "--", "sleep", "1000"],
        stdin=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        for child in _children(proc.pid):
            child.kill()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _the_child(keeper: subprocess.Popen[bytes]) -> psutil.Process:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = _children(keeper.pid)
        if children:
            [child] = children
            return child
        time.sleep(0.02)
    raise AssertionError("the keeper started no child")


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE  # dead, waiting for init to reap it
    except psutil.NoSuchProcess:
        return True


def _wait_gone(process: psutil.Process) -> bool:
    deadline = time.monotonic() + _GONE_WITHIN_S
    while time.monotonic() < deadline:
        if _gone(process):
            return True
        time.sleep(0.05)
    return False


def test_the_child_outlives_idle_time_and_stops_when_the_lifeline_closes(
    keeper: subprocess.Popen[bytes],
) -> None:
    child = _the_child(keeper)
    time.sleep(1)
    assert not _gone(child) and keeper.poll() is None
    assert keeper.stdin is not None
    keeper.stdin.close()  # what the kernel does when the proxy dies, however it dies
    assert _wait_gone(child)
    # The child was asked to stop (SIGTERM): the keeper reports it as a shell would.
    assert keeper.wait(timeout=_GONE_WITHIN_S) == 128 + signal.SIGTERM


def test_a_killed_keeper_takes_the_child_with_it(keeper: subprocess.Popen[bytes]) -> None:
    child = _the_child(keeper)
    os.kill(keeper.pid, signal.SIGKILL)
    assert _wait_gone(child)


def test_a_child_that_exits_by_itself_is_reported_with_its_status(
    keeper: subprocess.Popen[bytes],
) -> None:
    child = _the_child(keeper)
    child.kill()
    assert keeper.wait(timeout=_GONE_WITHIN_S) == 128 + signal.SIGKILL


def test_sigterm_to_the_keeper_stops_the_child(keeper: subprocess.Popen[bytes]) -> None:
    child = _the_child(keeper)
    keeper.terminate()
    assert keeper.wait(timeout=_GONE_WITHIN_S) == 128 + signal.SIGTERM
    assert _wait_gone(child)


def test_a_child_whose_keeper_died_before_it_asked_to_die_with_it_exits() -> None:
    """The keeper killed between the fork and the child's PR_SET_PDEATHSIG: no signal would
    ever come, so the child checks it still has the keeper for a parent (here it never had)."""
    not_the_parent = os.getppid()  # the test's parent, never the child's
    child = subprocess.Popen(
        ["sleep", "1000"], preexec_fn=functools.partial(_die_with_keeper, not_the_parent)
    )
    try:
        assert child.wait(timeout=_GONE_WITHIN_S) == 1
    finally:
        child.kill()
        child.wait()
