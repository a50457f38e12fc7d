# Strategy: what a forwarder's memory costs, idle and per idle client connection.
#
#   idle   a fresh forwarder, after one client asked it for the topic's metadata (so it knows
#          the cluster, as it would a moment after its first client) and left: its RSS.
#   held   `connections` clients then connect to the partition leader's port, each doing what
#          a client does first (TCP, then ApiVersions: bench/fanin/client.Connection) and
#          nothing more, all held open; after a settle, its RSS and descriptors again.
#
# RSS per 1,000 connections is the difference over the connections that came up, times 1,000.
# A JVM's heap grows in steps and its collector runs when it likes, so one measurement is one
# sample: the run's rounds give the median.
"""RSS idle and per 1,000 idle client connections of one forwarder."""

from __future__ import annotations

import trio

from bench.fanin.client import Connection, KafkaError, lookup
from bench.fanin.stack import open_descriptors, rss_bytes
from bench.peers.load import MB, Row
from bench.peers.routes import Route
from wire.errors import WireError

__all__ = ["memory_row"]

#: Clients connecting at once: a ramp, not a SYN flood (as bench/fanin/measure.py does).
_CONNECT_CONCURRENCY = 200
_ERRORS = (OSError, trio.BrokenResourceError, KafkaError, WireError)


async def _measure(route: Route, topic: str, connections: int, settle_s: float) -> Row:
    pid = route.forwarder_pid
    assert pid is not None, "the direct route has no forwarder to weigh"
    host, _, port = route.bootstrap.rpartition(":")
    leader = await lookup(host, int(port), topic)
    await trio.sleep(settle_s)
    idle_rss, idle_fds = rss_bytes(pid), open_descriptors(pid)
    held: list[Connection] = []
    failures: list[str] = []
    limiter = trio.CapacityLimiter(_CONNECT_CONCURRENCY)

    async def connect(index: int) -> None:
        async with limiter:
            try:
                held.append(
                    await Connection.open(leader.leader_host, leader.leader_port, f"idle-{index}")
                )
            except _ERRORS as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

    try:
        async with trio.open_nursery() as nursery:
            for index in range(connections):
                nursery.start_soon(connect, index)
        await trio.sleep(settle_s)
        held_rss, held_fds = rss_bytes(pid), open_descriptors(pid)
    finally:
        with trio.CancelScope(shield=True):
            for connection in held:
                await connection.aclose()
    up = len(held)
    return {
        "phase": "memory",
        "connections": connections,
        "connections_up": up,
        "rss_idle_mb": idle_rss / MB,
        "rss_held_mb": held_rss / MB,
        "rss_per_1000_mb": (held_rss - idle_rss) / MB * 1000 / up if up else None,
        "fds_idle": idle_fds,
        "fds_held": held_fds,
        "fds_per_connection": (held_fds - idle_fds) / up if up else None,
        "first_failure": failures[0] if failures else None,
    }


def memory_row(route: Route, topic: str, connections: int, settle_s: float) -> Row:
    """Weigh ``route``'s fresh forwarder idle and holding ``connections`` idle clients, each
    after ``settle_s``."""
    return trio.run(_measure, route, topic, connections, settle_s)
