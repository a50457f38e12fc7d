# Strategy: kafka-python's round trip, the plain synchronous way its README shows.
#
# Admin creates the topic; an idempotent acks=all producer sends everything and waits on
# every future (each gives partition and offset); a group consumer polls from earliest until
# it has as many records as were sent, then commits synchronously. kafka-python 3's
# idempotent producer gets a producer id from Tansu, so idempotence is on.

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from tests.compat import _tls
from tests.compat._model import ClientFailed, ClientReport, Consumed, Delivered, Job

__all__ = ["run"]

CLIENT = "kafka-python"


def run(job: Job) -> ClientReport:
    """Create, produce, consume in a group and commit with kafka-python."""
    deadline = time.monotonic() + job.deadline_s
    _create(job)
    produced = _produce(job)
    consumed = _consume(job, deadline)
    return ClientReport(
        produced,
        consumed,
        {
            "acks": "all",
            "enable_idempotence": "True",
            "session_timeout_ms": str(job.session_timeout_ms),
            "heartbeat_interval_ms": str(job.session_timeout_ms // 4),
        }
        | _tls.settings(job.tls, job.sasl),
    )


def _create(job: Job) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=job.bootstrap,
        client_id="compat-kafka-python",
        **_tls.kafka_python_options(job.tls, job.sasl),
    )
    try:
        response = admin.create_topics(
            {job.topic: {"num_partitions": job.partitions, "replication_factor": 1}},
            raise_errors=False,
        )
    finally:
        admin.close()
    for entry in response["topics"]:
        if entry["error_code"] != 0:
            raise ClientFailed(CLIENT, "create", str(entry))


def _produce(job: Job) -> tuple[Delivered, ...]:
    producer = KafkaProducer(
        bootstrap_servers=job.bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        **_tls.kafka_python_options(job.tls, job.sasl),
    )
    try:
        futures = [
            producer.send(job.topic, key=r.key.encode(), value=r.value.encode())
            for r in job.records
        ]
        producer.flush(timeout=job.deadline_s)
        delivered = []
        for record, future in zip(job.records, futures, strict=True):
            metadata = future.get(timeout=job.deadline_s)
            delivered.append(
                Delivered(metadata.partition, metadata.offset, record.key, record.value)
            )
        return tuple(delivered)
    except Exception as exc:
        raise ClientFailed(CLIENT, "produce", repr(exc)) from exc
    finally:
        producer.close()


def _consume(job: Job, deadline: float) -> tuple[Consumed, ...]:
    consumer = KafkaConsumer(
        job.topic,
        bootstrap_servers=job.bootstrap,
        group_id=job.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=job.session_timeout_ms,
        heartbeat_interval_ms=job.session_timeout_ms // 4,
        **_tls.kafka_python_options(job.tls, job.sasl),
    )
    try:
        consumed: list[Consumed] = []
        while len(consumed) < len(job.records):
            if time.monotonic() > deadline:
                raise ClientFailed(
                    CLIENT, "consume", f"{len(consumed)} of {len(job.records)} by the deadline"
                )
            for batch in consumer.poll(timeout_ms=200).values():
                consumed.extend(
                    Consumed(r.partition, r.offset, _text(r.key), _text(r.value)) for r in batch
                )
        consumer.commit()
        return tuple(consumed)
    finally:
        consumer.close()


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()
