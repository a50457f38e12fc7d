# Strategy: the proxy's descriptor budget. Out of descriptors, accept() fails for
# every listener alike, so the operators' endpoint would stop answering with the clients (and
# it did: EMFILE out of its accept loop ended the proxy). The proxy therefore counts the
# descriptors its client connections hold, one per descriptor actually open, against what the
# process may open:
#
#   capacity = RLIMIT_NOFILE - reserved - PER_BROKER x brokers
#
#   taken by   a client's socket (at accept: the connection is refused without one) and its
#              own upstream connection while it is open (opened on need, closed when idle: a
#              consumer whose fetches the purgatory answers has none, so 10,000 idle
#              consumers cost 10,000 descriptors, not 20,000). A connection that needs its
#              upstream connection when none is left is closed with one line.
#   PER_BROKER 7: a broker's listener, its four re-fetch channels and its watcher's two;
#   reserved   [connections] reserved_descriptors (64): standard streams, the event loop, the
#              bootstrap and HTTP listeners, up to 16 HTTP connections (health probes and
#              scrapes), the metadata refresher, the request log, the embedded broker's pipes
#              and files opened now and then (certificates on SIGHUP, password and token
#              files, /proc for the process metrics).
#
# At start the soft limit is raised to the hard one (what Go's runtime does, and systemd's
# advice: a soft limit of 1024 exists for select(), which trio does not use), and one log line
# reports the limit, the capacity and the connection limits.
"""The process's descriptor limit and the client connections it can afford."""

from __future__ import annotations

import resource
from dataclasses import dataclass

__all__ = ["PER_BROKER", "DescriptorBudget", "DescriptorLimit", "raise_descriptor_limit"]

PER_BROKER = 7
_UNLIMITED = 2**31 - 1


@dataclass(frozen=True, slots=True)
class DescriptorLimit:
    """RLIMIT_NOFILE as the proxy runs with it, and what it was before the proxy raised it."""

    soft: int
    hard: int
    soft_before: int

    def describe(self) -> str:
        raised = f" (raised from {self.soft_before})" if self.soft != self.soft_before else ""
        return f"descriptor limit {self.soft}{raised}"


def raise_descriptor_limit() -> DescriptorLimit:
    """Raise the soft RLIMIT_NOFILE to the hard limit, if it is lower; the limit now.
    (An unlimited hard limit, or a raise the system refuses, leaves the soft one.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    if soft != resource.RLIM_INFINITY and hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return DescriptorLimit(soft, hard, before)


class DescriptorBudget:
    """The descriptors client connections may hold, and how many they hold now.

    Args:
        limit: the process's RLIMIT_NOFILE (negative or RLIM_INFINITY: unlimited).
        reserved: descriptors kept for the proxy itself.

    Pure bookkeeping, like ConnectionAdmission: whoever takes a descriptor gives it back.
    """

    __slots__ = ("_brokers", "in_use", "limit", "reserved")

    def __init__(self, limit: int, reserved: int) -> None:
        self.limit = limit
        self.reserved = reserved
        self._brokers = 0
        #: Descriptors client connections hold now (sockets and their upstream connections).
        self.in_use = 0

    def __repr__(self) -> str:
        return f"<DescriptorBudget {self.in_use} of {self.capacity}>"

    @property
    def capacity(self) -> int:
        """Descriptors client connections may hold at once (at least 0)."""
        if self.limit == resource.RLIM_INFINITY or self.limit < 0:
            return _UNLIMITED
        return max(0, self.limit - self.reserved - PER_BROKER * self._brokers)

    def add_broker(self) -> None:
        """A broker's listener and channels now take their descriptors."""
        self._brokers += 1

    def try_take(self) -> bool:
        """Take one descriptor if the budget has one left."""
        if self.in_use >= self.capacity:
            return False
        self.in_use += 1
        return True

    def give(self) -> None:
        """Give back one descriptor taken with ``try_take``."""
        self.in_use -= 1
