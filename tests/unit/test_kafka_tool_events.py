"""The verifiable clients' events as the fault tests poll them (testbed/kafka_tools.py): each
event is converted once however often a cell polls, and a cell looks at the events around its
fault only. Both keep a poll's cost to what came since the last: a long run that rebuilt every
event on each poll held the GIL for seconds per poll after an hour, the threads reading the
clients' output fell behind, the clients blocked on it, and every route seemed to resume late."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from testbed.kafka_tools import KafkaTool, ToolEvent
from tests.support.fault_cells import LOOKBACK_EVENTS
from tests.support.verifiable_judge import Ack, acks_of, resumed_after


def _tool(tmp_path: Path) -> KafkaTool:
    return KafkaTool("producer", "Main", [], tmp_path)


def _printed(tool: KafkaTool, *events: dict[str, Any]) -> None:
    """What the tool's stdout reader keeps of these lines (the reader itself, on a fake pipe)."""
    lines = [json.dumps(event).encode() + b"\n" for event in events]
    tool._read(SimpleNamespace(stdout=lines))  # type: ignore[arg-type]


def _ack(offset: int, at_ms: int) -> dict[str, Any]:
    return {"name": "producer_send_success", "value": str(offset), "partition": 0,
            "offset": offset, "timestamp": at_ms}  # fmt: skip


def test_each_event_is_converted_once_and_kinds_are_kept_apart(tmp_path: Path) -> None:
    tool = _tool(tmp_path)
    converted: list[ToolEvent] = []

    def convert(event: ToolEvent) -> int:
        converted.append(event)
        return int(event.data["offset"])

    _printed(tool, _ack(0, 1_000), {"name": "startup_complete"}, _ack(1, 1_001))
    assert tool.converted("producer_send_success", convert) == [0, 1]
    _printed(tool, _ack(2, 1_002))
    assert tool.converted("producer_send_success", convert) == [0, 1, 2]
    assert tool.converted("producer_send_success", convert) == [0, 1, 2]
    assert len(converted) == 3  # polled three times, each event converted once
    assert [e.name for e in tool.named("startup_complete")] == ["startup_complete"]
    assert len(tool.events) == 4  # every event is still kept in order
    assert acks_of(tool) == [Ack(str(n), 0, n, (1_000 + n) / 1000) for n in range(3)]


def test_a_cells_window_finds_the_resume_the_whole_stream_gives() -> None:
    # 200 acknowledgements a second, a 7 s outage at the fault, then 200 a second again.
    before = [Ack(str(n), 0, n, 100.0 - (3_000 - n) / 200) for n in range(3_000)]
    after = [Ack(str(3_000 + n), 0, 3_000 + n, 107.0 + n / 200) for n in range(400)]
    stream = before + after
    window = stream[max(0, len(before) - LOOKBACK_EVENTS) :]
    whole = resumed_after(stream, 100.0, 110.0, {0})
    assert whole is not None and abs(whole - 7.0) < 0.01
    assert resumed_after(window, 100.0, 110.0, {0}) == whole
