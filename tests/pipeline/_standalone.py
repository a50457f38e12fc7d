"""A standalone Spark cluster (one master, one worker) on loopback, from the pyspark package.

Why: ``purgatory-proxy report --master spark://...`` must work against a real cluster, where the
executors, not the driver, read the logs and write the tables. The pyspark wheel carries the
whole Spark distribution's jars and ``bin/spark-class``, which runs the standalone Master and
Worker classes directly (no sbin scripts, no daemons): each is one JVM child of the test, bound
to 127.0.0.1 on free ports, and stopped by its PID when the block ends, even on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from testbed.processes import free_port, wait_for_port

__all__ = ["SPARK_HOME", "Cluster", "standalone_cluster"]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
_START_S = 120.0  # hang guard: JVM start on two busy cores


def _env(work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work),
        "SPARK_WORKER_DIR": str(work / "worker"),
    }


@contextlib.contextmanager
def _jvm(name: str, args: list[str], port: int, work: Path) -> Iterator[int]:
    """``spark-class`` running ``args`` until the block ends; yields its PID once it listens."""
    log_path = work / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_env(work),
        )  # fmt: skip
    try:
        try:
            wait_for_port("127.0.0.1", port, _START_S, proc)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{name}: {exc}\n{log_path.read_text()[-3000:]}") from exc
        yield proc.pid
    finally:
        proc.terminate()  # a worker's shutdown hook also stops its executors
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass(frozen=True)
class Cluster:
    """A running standalone cluster: its master URL, and the master's state as JSON."""

    url: str
    ui_port: int

    def state(self) -> dict[str, Any]:
        """The master web UI's /json/ document (workers, running and completed apps)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            state: dict[str, Any] = json.load(answer)
        return state


@contextlib.contextmanager
def standalone_cluster(work: Path, *, cores: int = 1, memory: str = "1g") -> Iterator[Cluster]:
    """A master and one worker with ``cores`` and ``memory``, for the block."""
    (work / "worker").mkdir(parents=True, exist_ok=True)
    port, ui_port = free_port(), free_port()
    master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui_port)]  # fmt: skip
    cluster = Cluster(f"spark://127.0.0.1:{port}", ui_port)
    with _jvm("master", master, port, work):
        worker_port = free_port()
        worker = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                  "--port", str(worker_port), "--webui-port", str(free_port()),
                  "--cores", str(cores), "--memory", memory,
                  "--work-dir", str(work / "worker"), cluster.url]  # fmt: skip
        with _jvm("worker", worker, worker_port, work):
            deadline = time.monotonic() + _START_S
            while cluster.state().get("aliveworkers", 0) < 1:  # registered with the master
                assert time.monotonic() < deadline, (work / "worker.log").read_text()[-3000:]
                time.sleep(0.2)
            yield cluster
