# Strategy: confluent-kafka (librdkafka from the wheel) round trip, callback style.
#
# AdminClient creates the topic; an idempotent acks=all producer produces everything with a
# delivery callback that records partition and offset, then flushes; a group consumer
# consumes from earliest until it has as many records as were sent and commits
# synchronously. librdkafka's idempotent producer works against Tansu.

from __future__ import annotations

import functools
import time

from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # what confluent_kafka.admin re-exports

from tests.compat import _tls
from tests.compat._model import ClientFailed, ClientReport, Consumed, Delivered, Job, Record

__all__ = ["run"]

CLIENT = "confluent-kafka"


def run(job: Job) -> ClientReport:
    """Create, produce, consume in a group and commit with confluent-kafka."""
    deadline = time.monotonic() + job.deadline_s
    _create(job)
    produced = _produce(job)
    consumed = _consume(job, deadline)
    return ClientReport(
        produced,
        consumed,
        {
            "acks": "all",
            "enable.idempotence": "true",
            "session.timeout.ms": str(job.session_timeout_ms),
            "heartbeat.interval.ms": str(job.session_timeout_ms // 4),
        }
        | _tls.settings(job.tls, job.sasl),
    )


def _create(job: Job) -> None:
    admin = AdminClient(
        {"bootstrap.servers": job.bootstrap, **_tls.librdkafka_config(job.tls, job.sasl)}
    )
    futures = admin.create_topics([NewTopic(job.topic, job.partitions, 1)])
    for future in futures.values():
        try:
            future.result(timeout=job.deadline_s)
        except Exception as exc:
            raise ClientFailed(CLIENT, "create", repr(exc)) from exc


def _produce(job: Job) -> tuple[Delivered, ...]:
    producer = Producer(
        {
            "bootstrap.servers": job.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            **_tls.librdkafka_config(job.tls, job.sasl),
        }
    )
    delivered: list[Delivered] = []
    failures: list[str] = []

    def on_delivery(record: Record, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(f"{record}: {err}")
        else:
            partition, offset = _slot(msg)
            delivered.append(Delivered(partition, offset, record.key, record.value))

    for record in job.records:
        producer.produce(
            job.topic,
            key=record.key.encode(),
            value=record.value.encode(),
            on_delivery=functools.partial(on_delivery, record),
        )
        producer.poll(0)
    left = producer.flush(job.deadline_s)
    if failures or left:
        raise ClientFailed(CLIENT, "produce", f"{left} undelivered; errors: {failures[:3]}")
    return tuple(delivered)


def _consume(job: Job, deadline: float) -> tuple[Consumed, ...]:
    consumer = Consumer(
        {
            "bootstrap.servers": job.bootstrap,
            "group.id": job.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": job.session_timeout_ms,
            "heartbeat.interval.ms": job.session_timeout_ms // 4,
            **_tls.librdkafka_config(job.tls, job.sasl),
        }
    )
    try:
        consumer.subscribe([job.topic])
        consumed: list[Consumed] = []
        while len(consumed) < len(job.records):
            if time.monotonic() > deadline:
                raise ClientFailed(
                    CLIENT, "consume", f"{len(consumed)} of {len(job.records)} by the deadline"
                )
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is not None:
                    raise ClientFailed(CLIENT, "consume", str(msg.error()))
                partition, offset = _slot(msg)
                consumed.append(Consumed(partition, offset, _text(msg.key()), _text(msg.value())))
        consumer.commit(asynchronous=False)
        return tuple(consumed)
    finally:
        consumer.close()


def _text(raw: str | bytes | None) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else raw


def _slot(msg: Message) -> tuple[int, int]:
    """Partition and offset of a delivered or consumed message (None only for errors)."""
    partition, offset = msg.partition(), msg.offset()
    if partition is None or offset is None:
        raise ClientFailed(CLIENT, "consume", f"message without a slot: {msg}")
    return partition, offset
