"""A kafka-python round trip as an application does it: topic, acks=all produce, group consume.

Why one helper: the security tests (TLS, SASL, secrets) all prove "a real client still works"
the same way; the group's short session keeps Tansu's first group delivery at ~3 s instead of
the ~23 s its default 10 s session costs (measured directly, through the front and the proxy).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

__all__ = ["GROUP_TIMEOUTS", "group_round_trip"]

#: Consumer group timeouts short enough for Tansu's JoinGroup hold (about half the session).
GROUP_TIMEOUTS: dict[str, int] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


def group_round_trip(
    bootstrap: str,
    options: Mapping[str, object] | None = None,
    count: int = 20,
    prefix: str = "round-trip",
) -> None:
    """Create a topic, produce ``count`` records, read them back in a group; assert equality.

    Args:
        options: extra kafka-python settings for every client (TLS, SASL).
        prefix: the topic is ``<prefix>-<random>`` and the group ``group-<topic>`` (names
            a client's ACLs may be bound to).
    """
    extra = dict(options or {})
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **extra)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **extra)
    sent = [f"record-{i}".encode() for i in range(count)]
    for value in sent:
        producer.send(topic, value).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"group-{topic}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=30_000,
        **GROUP_TIMEOUTS,
        **extra,
    )
    received = []
    for message in consumer:
        received.append(message.value)
        if len(received) == count:
            break
    consumer.close()
    assert received == sent
