"""The request log: JSON lines, size rotation, and a request path that never waits for it.

Real files in tmp_path (and a FIFO nobody reads, for a stalled disk); the writer's worker
thread is real, so tests wait for it by condition (``_written``), never by time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import trio
import trio.testing

from proxy.observability.request_log import RequestLog, RequestRecord


def _record(i: int, **changes: object) -> RequestRecord:
    fields: dict[str, object] = dict(
        ts=1_700_000_000.0 + i, api="Fetch", api_version=12, client_id=f"c{i % 3}", conn=i,
        broker="1", latency_ms=1.5, upstream_ms=1.0, held_ms=0.0, muted_ms=0.0,
        request_bytes=100 + i, response_bytes=200, outcome="ok", error_code=0,
    )  # fmt: skip
    fields.update(changes)
    return RequestRecord(**fields)  # type: ignore[arg-type]


async def _written(request_log: RequestLog, lines: int) -> None:
    """Yield to the writer (and its thread) until ``lines`` lines are accounted for."""
    with trio.fail_after(60):  # a hang guard only, far above any real write
        while request_log.written_lines + request_log.dropped_lines < lines:
            await trio.to_thread.run_sync(lambda: None)  # lets a pending worker result in
            await trio.testing.wait_all_tasks_blocked()


async def test_lines_are_the_records_as_json(tmp_path: Path, nursery: trio.Nursery) -> None:
    path = tmp_path / "requests.jsonl"
    request_log = RequestLog(path, max_bytes=0, backups=0, queue_lines=100)
    await nursery.start(request_log.run)
    records = [_record(0), _record(1, client_id=None, error_code=None, outcome="no_response")]
    for record in records:
        assert request_log.submit_nowait(record)
    await _written(request_log, 2)
    request_log.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "ts": r.ts, "api": r.api, "api_version": r.api_version, "client_id": r.client_id,
            "conn": r.conn, "broker": r.broker, "latency_ms": r.latency_ms,
            "upstream_ms": r.upstream_ms, "held_ms": r.held_ms, "muted_ms": r.muted_ms,
            "request_bytes": r.request_bytes, "response_bytes": r.response_bytes,
            "outcome": r.outcome, "error_code": r.error_code,
        }
        for r in records
    ]  # fmt: skip
    assert request_log.dropped_lines == 0


async def test_rotation_by_size_keeps_backups(tmp_path: Path, nursery: trio.Nursery) -> None:
    path = tmp_path / "requests.jsonl"
    line_bytes = len(_record(0).to_json()) + 1
    request_log = RequestLog(path, max_bytes=3 * line_bytes, backups=2, queue_lines=100)
    await nursery.start(request_log.run)
    for i in range(10):  # one batch per record: wait for each before the next
        request_log.submit_nowait(_record(i))
        await _written(request_log, i + 1)
    request_log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["requests.jsonl", "requests.jsonl.1", "requests.jsonl.2"]
    for name in files:
        assert (tmp_path / name).stat().st_size <= 3 * line_bytes

    def conns(name: str) -> list[int]:
        return [json.loads(line)["conn"] for line in (tmp_path / name).read_text().split()]

    # 10 lines, 3 per file: 0-2, 3-5 (rotated away), 6-8 (.1), 9 (current); .2 is 3-5.
    assert conns("requests.jsonl.2") == [3, 4, 5]
    assert conns("requests.jsonl.1") == [6, 7, 8]
    assert conns("requests.jsonl") == [9]
    assert request_log.rotations == 3
    assert request_log.written_lines == 10


def test_full_queue_drops_and_counts_without_waiting(tmp_path: Path) -> None:
    # No writer is running at all: the queue fills and submit_nowait still returns at once.
    request_log = RequestLog(tmp_path / "r.jsonl", max_bytes=0, backups=0, queue_lines=5)
    accepted = [request_log.submit_nowait(_record(i)) for i in range(12)]
    assert accepted == [True] * 5 + [False] * 7
    assert (request_log.queued_lines, request_log.dropped_lines) == (5, 7)


async def test_stalled_destination_never_blocks_submitters(tmp_path: Path) -> None:
    # A FIFO with no reader: the writer thread blocks in open() for as long as nobody reads,
    # exactly like a hung disk. Submitting must stay instant and count what is lost.
    fifo = tmp_path / "stalled.fifo"
    os.mkfifo(fifo)
    request_log = RequestLog(fifo, max_bytes=1000, backups=1, queue_lines=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(request_log.run)
        request_log.submit_nowait(_record(0))
        await trio.testing.wait_all_tasks_blocked()  # the writer took it and is stuck
        assert request_log.queued_lines == 0
        results = [request_log.submit_nowait(_record(i)) for i in range(1, 51)]
        assert results == [True] * 10 + [False] * 40
        assert request_log.dropped_lines == 40
        nursery.cancel_scope.cancel()  # shutdown abandons the stuck write
    assert request_log.dropped_lines == 41  # the stuck batch is counted as lost too
    # Unblock the abandoned thread (open() returns once a reader appears) and tidy up.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    os.close(reader)
    assert not list(tmp_path.glob("stalled.fifo.*"))  # a FIFO is never rotated


async def test_full_disk_counts_drops_and_keeps_going(nursery: trio.Nursery) -> None:
    # /dev/full fails every write with ENOSPC. max_bytes=0: never rotated (it is not a
    # regular file anyway, which the writer checks before renaming anything).
    request_log = RequestLog(Path("/dev/full"), max_bytes=0, backups=0, queue_lines=100)
    await nursery.start(request_log.run)
    for i in range(3):
        request_log.submit_nowait(_record(i))
        await _written(request_log, i + 1)
    assert (request_log.written_lines, request_log.dropped_lines) == (0, 3)
    request_log.close()
