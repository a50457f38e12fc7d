# Strategy: the trusted side of every comparison — kafka-python talking to the broker itself.
#
# After a client's round trip, `observe` reads the topic the plainest way there is: assign
# every partition, seek to the beginning, no group, no commits, and stop only when each
# partition's position has reached the high watermark the Fetch responses report. It does
# not stop at "n records", so extra or duplicated records are seen too. It never uses
# ListOffsets "latest": Tansu answers it wrongly (DESIGN "Known quirks"); the Fetch high
# watermark is right. The group's committed offsets are read back with OffsetFetch, so a
# commit the client believed in but the broker never stored is caught.
#
# When the matrix runs through the proxy, `observe` is still given the broker's own address:
# what the client saw through the proxy is compared with what is really there.

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from tests.compat._model import ClientFailed, Consumed, Observation
from tests.compat._tls import ClientSasl, ClientTls, kafka_python_options

__all__ = ["committed_offsets", "create_topic", "observe"]


def create_topic(
    client: str,
    bootstrap: str,
    topic: str,
    partitions: int,
    tls: ClientTls | None = None,
    sasl: ClientSasl | None = None,
) -> None:
    """Create ``topic`` with kafka-python's admin, for clients that have no admin API (kcat).

    Raises:
        ClientFailed: the broker refused (stage "create").
    """
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id=f"compat-admin-{client}",
        **kafka_python_options(tls, sasl),
    )
    try:
        response = admin.create_topics(
            {topic: {"num_partitions": partitions, "replication_factor": 1}},
            raise_errors=False,
        )
    finally:
        admin.close()
    for entry in response["topics"]:
        if entry["error_code"] != 0:
            raise ClientFailed(client, "create", f"{entry['name']}: {entry}")


def observe(
    bootstrap: str, topic: str, group: str, timeout_s: float = 30.0, **options: object
) -> Observation:
    """Every record in ``topic`` and ``group``'s committed offsets, read directly.

    ``options`` go to kafka-python (TLS and SASL on a secured broker:
    _tls.kafka_python_options).

    Raises:
        TimeoutError: the partitions were not read up to their high watermarks in time.
    """
    return Observation(
        records=_read_all(bootstrap, topic, timeout_s, options),
        committed=committed_offsets(bootstrap, group, topic, **options),
    )


def _read_all(
    bootstrap: str, topic: str, timeout_s: float, options: dict[str, object]
) -> tuple[Consumed, ...]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id="compat-direct-reader",
        **options,
    )
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise LookupError(f"topic {topic!r} has no partitions in metadata")
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning()
        records: list[Consumed] = []
        deadline = time.monotonic() + timeout_s
        while not _caught_up(consumer, assigned):
            if time.monotonic() > deadline:
                raise TimeoutError(f"direct read of {topic!r} not caught up in {timeout_s} s")
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(
                    Consumed(r.partition, r.offset, _text(r.key), _text(r.value)) for r in batch
                )
        return tuple(records)
    finally:
        consumer.close()


def _caught_up(consumer: KafkaConsumer, assigned: list[TopicPartition]) -> bool:
    """True once every partition's high watermark is known and reached.

    The watermark is None until a Fetch response for that partition arrived, so an empty
    partition still needs one round trip before it counts as read.
    """
    for tp in assigned:
        high = consumer.highwater(tp)
        if high is None or consumer.position(tp) < high:
            return False
    return True


def committed_offsets(bootstrap: str, group: str, topic: str, **options: object) -> dict[int, int]:
    """``group``'s committed offset per partition of ``topic`` (none: absent), read directly."""
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="compat-direct-offsets", **options
    )
    try:
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    finally:
        admin.close()
    return {
        tp.partition: meta.offset
        for tp, meta in offsets.items()
        if tp.topic == topic and meta.offset >= 0
    }


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()
