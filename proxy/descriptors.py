# Strategy: the proxy's descriptor budget, read once at start (issue 29). Out of descriptors,
# accept() fails for every listener alike, so the operators' endpoint would stop answering
# with the clients (and it did: EMFILE out of its accept loop ended the proxy). The proxy
# therefore caps its client connections below what the process may open:
#
#   client connections <= (RLIMIT_NOFILE - reserved - PER_BROKER x brokers) / PER_CONNECTION
#
#   PER_CONNECTION  2: the client's socket and its own upstream connection (held fetches'
#                   reads go on that one in passthrough, on the shared channels otherwise);
#   PER_BROKER      6: a broker's listener, its four re-fetch channels and its watcher;
#   reserved        [connections] reserved_descriptors (64): standard streams, the event
#                   loop, the bootstrap and HTTP listeners, up to 16 HTTP connections (health
#                   probes and scrapes), the metadata refresher, the request log, the
#                   embedded broker's pipes and files opened now and then (certificates on
#                   SIGHUP, password and token files, /proc for the process metrics).
#
# At start the soft limit is raised to the hard one (what Go's runtime does, and systemd's
# advice: a soft limit of 1024 exists for select(), which trio does not use), the cap is
# computed and one log line reports the limit and every effective connection limit.
"""The process's descriptor limit and the client connections it can afford."""

from __future__ import annotations

import resource
from dataclasses import dataclass

__all__ = [
    "PER_BROKER",
    "PER_CONNECTION",
    "DescriptorLimit",
    "affordable_connections",
    "raise_descriptor_limit",
]

PER_CONNECTION = 2
PER_BROKER = 6


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


def affordable_connections(limit: int, reserved: int, brokers: int) -> int:
    """Client connections a process limited to ``limit`` descriptors can serve with
    ``brokers`` brokers and ``reserved`` descriptors kept for itself (at least 0)."""
    if limit == resource.RLIM_INFINITY or limit < 0:
        return 2**31 - 1
    return max(0, (limit - reserved - PER_BROKER * brokers) // PER_CONNECTION)
