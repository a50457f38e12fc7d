"""Fairness under memory pressure (issue 29), in process and in virtual time: while memory is
short a connection keeps one request in processing (Kafka's rule), the requests it has
forwarded count in the pool until answered, and with memory to spare it pipelines freely."""

from __future__ import annotations

import trio
import trio.testing

from proxy.primitives.memory import MemoryPool
from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import broker_with_topic, produce

KIB = 1024
#: Half the pool is the "tight" line: a 600 KiB request in processing crosses it.
SHORT_POOL = {"limit": "1MiB", "socket_request_max_bytes": "1MiB", "tight_fraction": 0.5}


async def _pipeline_three(memory: dict[str, object]) -> tuple[list[float], MemoryPool]:
    """A client pipelines three 600 KiB produces (the broker answers each 1 s after it reads
    it); when the proxy had read each one whole (the client's stream has no buffer, so a
    send ends when the proxy has read it)."""
    broker = broker_with_topic()
    broker.produce_delay_s = 1.0
    async with proxy_in_process(broker, memory=memory) as proxy:
        pool = proxy.running.services.pool
        client = await proxy.client(lockstep=True)
        read_at: list[float] = []

        async def send() -> None:
            for _ in range(3):
                await client.send(produce(acks=1, timeout_ms=30_000, records=b"x" * 600 * KIB), 9)
                read_at.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            for _ in range(3):
                _, answer, _ = await client.receive()
                [topic] = answer.responses
                assert [p.error_code for p in topic.partition_responses] == [0]
        await trio.testing.wait_all_tasks_blocked()
    return read_at, pool


async def test_while_memory_is_short_a_connection_keeps_one_request_in_processing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    read_at, pool = await _pipeline_three(SHORT_POOL)
    # Each produce is read once the one before it was answered.
    assert [round(at, 2) for at in read_at] == [0.0, 1.0, 2.0]
    assert pool.in_processing_bytes == 0 and pool.used_bytes == 0


async def test_with_memory_to_spare_a_connection_pipelines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    read_at, pool = await _pipeline_three({"limit": "256MiB"})
    assert [round(at, 2) for at in read_at] == [0.0, 0.0, 0.0]
    assert pool.in_processing_bytes == 0 and pool.used_bytes == 0
