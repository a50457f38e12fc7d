# Strategy: the embedded broker must live exactly as long as the proxy, including when the proxy
# is SIGKILLed and runs no cleanup. Linux's PR_SET_PDEATHSIG is the usual tool, but it fires
# when the *thread* that forked the child exits, and trio forks from a worker thread that it
# retires after 10 s idle: the broker died ten seconds after every start. So the
# proxy starts this keeper instead, with a lifeline: a pipe on the keeper's stdin whose write end
# only the proxy holds. The kernel closes that end when the proxy dies, however it dies, and the
# keeper sees EOF. The keeper is single-threaded, so PDEATHSIG on the broker *is* bound to the
# keeper's life; the chain is:
#
#     proxy dies -> lifeline EOF -> keeper terminates broker and exits
#     keeper killed -> PDEATHSIG kills broker
#     broker exits -> keeper exits with the broker's status (128 + signal, as a shell does)
#     SIGTERM/SIGINT to keeper -> forwarded to the broker, keeper exits with its status
#
# It waits on two descriptors in one select: stdin (the lifeline) and a pidfd of the broker.
"""``python -m proxy.broker.broker_keeper -- COMMAND...``: run COMMAND until stdin closes."""

from __future__ import annotations

import ctypes
import functools
import os
import selectors
import signal
import subprocess
import sys
from types import FrameType

__all__ = ["exit_status", "main"]

_PR_SET_PDEATHSIG = 1
#: How long the broker gets to stop after SIGTERM before it is killed.
_TERMINATE_GRACE_S = 5.0


def _die_with_keeper(keeper_pid: int) -> None:
    """In the child, before exec: SIGKILL it when the keeper (a single thread) exits. A keeper
    that died between the fork and this request would never signal: the child then finds it
    has a new parent, and exits at once."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != keeper_pid:
        os._exit(1)


def exit_status(returncode: int) -> int:
    """A Popen return code as a process exit status: a signal N becomes 128 + N, as in sh."""
    return 128 - returncode if returncode < 0 else returncode


def _stop(child: subprocess.Popen[bytes]) -> int:
    child.terminate()
    try:
        return child.wait(_TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


def main(argv: list[str]) -> int:
    """Run ``argv`` (after an optional ``--``) and keep it exactly as long as stdin is open."""
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m proxy.broker.broker_keeper -- COMMAND...", file=sys.stderr)
        return 2
    # Caught before the child starts: a SIGTERM that came while it starts would otherwise end
    # the keeper (the default action), and the broker with it by SIGKILL, instead of stopping it.
    started: list[subprocess.Popen[bytes]] = []
    early: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if started:
            started[0].send_signal(signum)
        else:
            early.append(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    child = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        preexec_fn=functools.partial(_die_with_keeper, os.getpid()),
    )
    started.append(child)
    for signum in early:
        child.send_signal(signum)
    child_exited = os.pidfd_open(child.pid)
    with selectors.DefaultSelector() as selector:
        selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "lifeline")
        selector.register(child_exited, selectors.EVENT_READ, "child")
        while True:
            for key, _ in selector.select():
                if key.data == "child":
                    return exit_status(child.wait())
                if not os.read(sys.stdin.fileno(), 4096):  # EOF: the proxy is gone
                    return exit_status(_stop(child))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
