# Strategy: a request's latency is the time to its answer, and for a few APIs the protocol tells
# the server to wait before answering: a Fetch may wait up to the client's max_wait_ms for data,
# a JoinGroup until the group's members have joined, a SyncGroup for the leader's assignment.
# Such a wait is long by design, and its length is set by the client or by other clients, not
# by how fast the broker or the proxy work. Drawn next to service latency it reads as a tail
# to chase, so the report keeps the two apart, from this one list.
#
# Produce is not on it: its wait for acks is replication, work whose slowness (a slow follower,
# a full disk) is a real tail. Nor are the heartbeats: Heartbeat and the KIP-848 family
# (ConsumerGroupHeartbeat, ShareGroupHeartbeat, StreamsGroupHeartbeat) are answered as soon as
# the coordinator has written the member's state; a new assignment comes in a later heartbeat,
# not by holding this one.
"""The APIs whose answers the protocol lets wait, and how the report sorts fetch answers."""

from __future__ import annotations

from typing import Final

__all__ = [
    "BOOTSTRAP",
    "EXPIRED",
    "FETCH",
    "FETCH_ANSWERS",
    "FETCH_ERROR",
    "FORWARDED",
    "NOT_HELD",
    "PROTOCOL_WAITS",
    "WOKEN",
    "is_wait",
]

FETCH: Final = "Fetch"

#: API name (as in the log) -> why its answer may wait, in the report's words.
PROTOCOL_WAITS: Final[dict[str, str]] = {
    FETCH: "long-poll: waits up to the client's max_wait_ms for min_bytes of new data",
    "JoinGroup": "rebalance: waits until the group's members have joined "
    "(up to the rebalance timeout)",
    "SyncGroup": "rebalance: a follower waits for the leader's assignment",
    "ShareFetch": "long-poll (KIP-932 share groups): waits up to max_wait_ms for records "
    "to acquire; forwarded, the broker waits",
}

# How a Fetch was answered, from its outcome, held_ms and broker (pipeline/tables.py's
# fetch_answer; the same words in the tables, the plots and report.md).
NOT_HELD: Final = "not held"
WOKEN: Final = "held, woken by data"
EXPIRED: Final = "held to the deadline (expired)"
FORWARDED: Final = "forwarded (bootstrap port)"
FETCH_ERROR: Final = "error"
#: The ``broker`` of requests on the bootstrap port, whose fetches the proxy forwards as they are.
BOOTSTRAP: Final = "bootstrap"

#: Each kind of fetch answer and what it means, in the order the report lists them.
FETCH_ANSWERS: Final[dict[str, str]] = {
    NOT_HELD: "not held in the proxy's purgatory (held_ms = 0), on a broker port: the proxy's "
    "first look had data for it, or the client asked not to wait. Not held is not always "
    "quick: answers go back in request order, so a fetch sent behind a held one on the same "
    "connection (a Java consumer's closing fetch behind its long-poll) waits for that one's "
    "answer first, and its latency has that wait; with [fetch] hold = false every fetch is "
    "here and the broker did the waiting, inside its latency",
    WOKEN: "held in the proxy's purgatory, then answered before max_wait_ms because data came "
    "(or something else to tell the client, such as a moved log start)",
    EXPIRED: "held until the client's max_wait_ms passed with no new data (outcome expired): "
    "an idle consumer's long-poll ending as it should",
    FORWARDED: "sent on the bootstrap port, where the proxy does not hold fetches (a fetch "
    "session belongs to one broker): forwarded as it was, the broker did any waiting, inside "
    "its latency",
    FETCH_ERROR: "answered with a top-level error code",
}


def is_wait(api: str) -> bool:
    """Whether ``api``'s answer may wait by protocol (see :data:`PROTOCOL_WAITS`)."""
    return api in PROTOCOL_WAITS
