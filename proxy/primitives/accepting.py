# Strategy: both accept loops (the client listeners, proxy/connection/listeners.py, and the
# operators' HTTP endpoint, proxy/observability/http.py) take their connections through
# `accept_or_wait`. accept() fails with EMFILE/ENFILE when the process or the system is out of
# descriptors, and with ENOBUFS/ENOMEM when the kernel is out of memory: neither is the listener's
# fault, and the clients waiting in the backlog get in once something closes. So the call waits 100
# ms and tries again instead of raising (an exception out of an accept loop ends its nursery and,
# for the HTTP endpoint, the proxy). That is what trio.serve_listeners does, and
# what it cites Twisted, Tornado and libuv for. One log line per streak of failures (the
# counter has every one) and one when accepting works again.
"""accept() that waits out a lack of descriptors or memory instead of failing."""

from __future__ import annotations

import errno
import logging
from typing import TypeVar

import trio
from prometheus_client import Counter

__all__ = ["RESOURCE_ERRORS", "RETRY_S", "accept_or_wait"]

log = logging.getLogger("purgatory_proxy.server")

#: accept() errors that mean "not now" (descriptor or memory limits), not a broken listener.
RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
RETRY_S = 0.1

_Stream = TypeVar("_Stream", bound=trio.abc.AsyncResource)


async def accept_or_wait(
    listener: trio.abc.Listener[_Stream], failures: Counter | None, where: str
) -> _Stream:
    """The next connection on ``listener``, however long the process is out of descriptors.

    Args:
        failures: counts every failed accept() (None: not counted).
        where: names the listener in the log lines ("the client listeners", ...).

    Raises:
        OSError: any other accept() error (a broken listener).
    """
    failing = False
    while True:
        try:
            stream = await listener.accept()
        except OSError as error:
            if error.errno not in RESOURCE_ERRORS:
                raise
            if failures is not None:
                failures.inc()
            if not failing:  # once per streak; the counter has the rest
                log.error("cannot accept a connection (%s) on %s; retrying every %.0f ms",
                          error.strerror, where, RETRY_S * 1000)  # fmt: skip
            failing = True
            await trio.sleep(RETRY_S)
            continue
        if failing:
            log.info("accepting connections on %s again", where)
        return stream
