"""Create a topic for a test and wait until it can be used.

Why wait: Apache Kafka answers CreateTopics once the controller has committed the topic, but a
broker serves it only after its own metadata has caught up, and its replica manager becomes
leader a moment after its Metadata answers already name it; until then a fetch or produce gets
NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION (clients retry, raw test requests do not).
So this returns once every partition's leader answers ListOffsets for it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

__all__ = ["create_topic", "wait_for_leaders"]

_READY_TIMEOUT_S = 30.0


def create_topic(
    bootstrap: str,
    prefix: str = "topic",
    *,
    partitions: int = 1,
    replication_factor: int = -1,
    configs: Mapping[str, str] | None = None,
    name: str | None = None,
    replicas: Sequence[int] | None = None,
    assignment: Mapping[int, Sequence[int]] | None = None,
    **admin_options: Any,
) -> str:
    """Create ``name`` (default ``<prefix>-<random>``) through ``bootstrap``; return its name.

    ``replication_factor`` -1 takes the cluster's default (3 on the three-node test cluster,
    1 on one node). ``replicas``: one partition on these nodes instead, the first its
    preferred leader; ``assignment``: partition -> its nodes, for several partitions (two
    topics with one assignment have the same leaders). ``admin_options`` go to kafka-python's
    KafkaAdminClient (TLS, SASL).
    """
    topic = name or f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=30_000, **admin_options
    )
    topic_configs = dict(configs or {})
    if replicas is not None:
        assignment = {0: replicas}
    if assignment is None:
        new = NewTopic(topic, partitions, replication_factor, topic_configs=topic_configs)
    else:
        replica_assignments = {p: list(nodes) for p, nodes in assignment.items()}
        new = NewTopic(topic, replica_assignments=replica_assignments, topic_configs=topic_configs)
        partitions = len(replica_assignments)
    try:
        admin.create_topics([new])
        wait_for_leaders(admin, topic, partitions)
    finally:
        admin.close()
    # ListOffsets goes to each partition's leader, and kafka-python retries it on
    # NOT_LEADER_OR_FOLLOWER until the leader serves the partition.
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, request_timeout_ms=30_000, **admin_options
    )
    try:
        consumer.end_offsets([TopicPartition(topic, index) for index in range(partitions)])
    finally:
        consumer.close()
    return topic


def wait_for_leaders(admin: KafkaAdminClient, topic: str, partitions: int) -> None:
    """Block until Metadata names a leader for each of ``topic``'s ``partitions``."""
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while True:
        described = admin.describe_topics([topic])[0]
        leaders = [p["leader_id"] for p in described.get("partitions", [])]
        if described["error_code"] == 0 and len(leaders) == partitions and min(leaders) >= 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} has no leader for every partition: {described}")
        time.sleep(0.05)
