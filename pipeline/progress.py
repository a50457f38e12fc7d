# Strategy: one line per finished stage ("[n/N] elapsed  what: result (stage time)"), on stderr
# so stdout keeps only the result. A stage that runs longer than the heartbeat period also gets
# a line every period saying it is still running and how many of Spark's tasks are done (from
# the SparkContext's status tracker, polled by a daemon thread), so a run over a day of logs is
# never silent for minutes. Spark's own console bar is off by default (pipeline/session.py).
"""Progress lines for the report: which table is being built, how far, how long."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from pyspark import SparkContext

__all__ = ["Progress", "Stage"]


class Stage:
    """One stage in progress; the caller sets :attr:`result` to what the stage produced."""

    def __init__(self, number: int, what: str) -> None:
        self.number = number
        self.what = what
        self.result = "done"


class Progress:
    """Numbered stage lines out of ``total``, with heartbeats for long stages."""

    def __init__(
        self, total: int, *, stream: TextIO | None = None, heartbeat_s: float = 10.0
    ) -> None:
        self._total = total
        self._stream = stream if stream is not None else sys.stderr
        self._heartbeat_s = heartbeat_s
        self._started = time.monotonic()
        self._number = 0
        self._context: SparkContext | None = None
        self._lock = threading.Lock()

    def attach(self, context: SparkContext) -> None:
        """Report Spark's task counts in heartbeats from now on."""
        self._context = context

    def _line(self, stage: Stage, text: str) -> None:
        width = len(str(self._total))
        elapsed = time.monotonic() - self._started
        with self._lock:
            print(
                f"[{stage.number:>{width}}/{self._total}] {elapsed:6.1f} s  {stage.what}: {text}",
                file=self._stream,
                flush=True,
            )

    def _tasks(self) -> str:
        if self._context is None:
            return ""
        tracker = self._context.statusTracker()
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done, total = done + info.numCompletedTasks, total + info.numTasks
        return f", Spark tasks {done}/{total}" if total else ""

    def _beat(self, stage: Stage, stop: threading.Event) -> None:
        started = time.monotonic()
        while not stop.wait(self._heartbeat_s):
            with contextlib.suppress(Exception):  # a heartbeat never fails the report
                running = time.monotonic() - started
                self._line(stage, f"running for {running:.0f} s{self._tasks()}")

    @contextlib.contextmanager
    def stage(self, what: str) -> Iterator[Stage]:
        """Time the block as the next stage; print its line when it ends without error."""
        self._number += 1
        stage = Stage(self._number, what)
        stop = threading.Event()
        beat = threading.Thread(target=self._beat, args=(stage, stop), daemon=True)
        started = time.monotonic()
        beat.start()
        try:
            yield stage
        finally:
            stop.set()
            beat.join()
        self._line(stage, f"{stage.result} ({time.monotonic() - started:.1f} s)")
