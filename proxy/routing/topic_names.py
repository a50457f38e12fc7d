# Strategy: clients on Fetch/Produce v13+ name topics by id, older ones by name, and the
# broker's watcher fetches by name. The rewriter learns id -> name pairs from the Metadata
# responses it passes on, so one partition has one key whichever way a client names it. Kept
# apart from what the proxy knows of partitions (proxy/held/partition_state.py) so that the
# rewriter and the broker directory take it without importing the held path.
"""Topic ids to names, and the one key a partition is known by."""

from __future__ import annotations

from uuid import UUID

__all__ = ["PartitionKey", "TopicNames"]

#: (topic name, or a topic id the registry does not know; partition index)
PartitionKey = tuple[str | UUID, int]


class TopicNames:
    """Topic ids to names, learned from Metadata responses (v10+ carry ids)."""

    def __init__(self) -> None:
        self._names: dict[UUID, str] = {}
        self._ids: dict[str, UUID] = {}

    def learn(self, topic_id: UUID, name: str) -> None:
        if topic_id.int and name:
            self._names[topic_id] = name
            self._ids[name] = topic_id

    def name_of(self, topic_id: UUID) -> str | None:
        return self._names.get(topic_id)

    def id_of(self, name: str) -> UUID | None:
        return self._ids.get(name)

    def key(self, topic: str, topic_id: UUID, partition: int) -> PartitionKey:
        """The canonical key of a partition named by ``topic`` (old versions) or ``topic_id``."""
        if topic_id.int:
            return self._names.get(topic_id, topic_id), partition
        return topic, partition
