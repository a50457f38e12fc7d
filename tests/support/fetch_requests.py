"""Fetch requests of any shape for raw and in-process clients, built with the wire codec."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from wire.messages import FetchRequest
from wire.messages.fetch_request import FetchPartition, FetchTopic

__all__ = ["fetch_partitions"]


def fetch_partitions(
    partitions: Mapping[str, Iterable[int]],
    *,
    offset: int = 0,
    max_wait_ms: int = 500,
    partition_max_bytes: int = 1 << 20,
    session: tuple[int, int] = (0, -1),
    leader_epoch: int = -1,
) -> FetchRequest:
    """A fetch of ``partitions`` (topic name -> indexes), each from ``offset``; ``session``:
    (id, epoch), sessionless by default, (0, 0) opens one; ``leader_epoch``: the current leader
    epoch named for each partition (-1: unknown)."""
    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=session[0],
        session_epoch=session[1],
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=index,
                        current_leader_epoch=leader_epoch,
                        fetch_offset=offset,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for index in indexes
                ],
            )
            for topic, indexes in partitions.items()
        ],
    )
