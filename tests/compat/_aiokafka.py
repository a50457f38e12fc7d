# Strategy: aiokafka's round trip on its own asyncio loop.
#
# The driver interface is synchronous (a trio test runs it in a worker thread), so this
# module owns one `asyncio.run` per round trip. Admin creates the topic; an acks=all
# producer sends everything concurrently and gathers the RecordMetadata futures; a group
# consumer uses getmany from earliest until it has as many records as were sent, then
# commits. Idempotence is OFF: aiokafka's InitProducerId fails against Tansu with
# UnknownError (DESIGN "Known quirks"), which is a broker quirk, not a proxy concern.

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.compat import _tls
from tests.compat._model import ClientFailed, ClientReport, Consumed, Delivered, Job

__all__ = ["run"]

CLIENT = "aiokafka"


def run(job: Job) -> ClientReport:
    """Create, produce, consume in a group and commit with aiokafka."""
    return asyncio.run(asyncio.wait_for(_run(job), timeout=job.deadline_s))


async def _run(job: Job) -> ClientReport:
    deadline = time.monotonic() + job.deadline_s
    await _create(job)
    produced = await _produce(job)
    consumed = await _consume(job, deadline)
    return ClientReport(
        produced,
        consumed,
        {
            "acks": "all",
            "enable_idempotence": "False (InitProducerId fails against Tansu)",
            "session_timeout_ms": str(job.session_timeout_ms),
            "heartbeat_interval_ms": str(job.session_timeout_ms // 4),
        }
        | _tls.settings(job.tls, job.sasl),
    )


async def _create(job: Job) -> None:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=job.bootstrap, **_tls.aiokafka_options(job.tls, job.sasl)
    )
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(job.topic, job.partitions, 1)])
    finally:
        await admin.close()
    # aiokafka returns per-topic errors in the response instead of raising.
    for topic, code, *message in response.topic_errors:
        if code != 0:
            raise ClientFailed(CLIENT, "create", f"{topic}: error {code} {message}")


async def _produce(job: Job) -> tuple[Delivered, ...]:
    producer = AIOKafkaProducer(
        bootstrap_servers=job.bootstrap,
        acks="all",
        enable_idempotence=False,
        linger_ms=5,
        **_tls.aiokafka_options(job.tls, job.sasl),
    )
    await producer.start()
    try:
        futures = [
            await producer.send(job.topic, key=r.key.encode(), value=r.value.encode())
            for r in job.records
        ]
        metadata = await asyncio.gather(*futures)
    except Exception as exc:
        raise ClientFailed(CLIENT, "produce", repr(exc)) from exc
    finally:
        await producer.stop()
    return tuple(
        Delivered(md.partition, md.offset, r.key, r.value)
        for r, md in zip(job.records, metadata, strict=True)
    )


async def _consume(job: Job, deadline: float) -> tuple[Consumed, ...]:
    consumer = AIOKafkaConsumer(
        job.topic,
        bootstrap_servers=job.bootstrap,
        group_id=job.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=job.session_timeout_ms,
        heartbeat_interval_ms=job.session_timeout_ms // 4,
        **_tls.aiokafka_options(job.tls, job.sasl),
    )
    await consumer.start()
    try:
        consumed: list[Consumed] = []
        while len(consumed) < len(job.records):
            if time.monotonic() > deadline:
                raise ClientFailed(
                    CLIENT, "consume", f"{len(consumed)} of {len(job.records)} by the deadline"
                )
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                consumed.extend(
                    Consumed(r.partition, r.offset, _text(r.key), _text(r.value)) for r in batch
                )
        await consumer.commit()
        return tuple(consumed)
    finally:
        await consumer.stop()


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()
