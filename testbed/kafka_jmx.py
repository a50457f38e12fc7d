"""How many requests of each kind an Apache Kafka broker has completed, read from its own meters.

Why JMX and not the request log: Kafka counts every completed request in its
``kafka.network:type=RequestMetrics,name=RequestsPerSec`` meters anyway, so reading them costs
the broker nothing per request, where the request log (testbed/kafka_cluster.py) JSON-encodes
each one. A benchmark counting thousands of fetches a second must not slow the broker it
measures. The reader is testbed/kafka/RequestMeters.java (JDK only), kept running for the
block, so each read is a line on a pipe rather than a JVM start.

The counts are since the broker started, by Kafka's request name: ``Fetch`` (every fetch),
``FetchConsumer`` (clients' fetches only), ``FetchFollower`` (replication), ``Produce``, ...
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from testbed.java_build import compiled_classes
from testbed.kafka_cluster import KafkaNode

__all__ = ["RequestMeters", "request_meters"]

_SOURCE = Path(__file__).resolve().parent / "kafka" / "RequestMeters.java"
_JVM = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx64m"]


class RequestMeters:
    """One node's request counters; :meth:`counts` reads them now.

    Task safety: one caller at a time (a request and its answer share the pipe).
    """

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._process = process

    def counts(self) -> dict[str, int]:
        """Completed requests so far by request name (zero for kinds not seen yet: absent).

        Raises:
            RuntimeError: the reader has exited (its error output is in the message).
        """
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write("\n")
            stdin.flush()
            line = stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            error = self._process.stderr.read() if self._process.stderr else ""
            raise RuntimeError(f"the JMX reader exited: {error[-2000:]}")
        counts: dict[str, int] = json.loads(line)
        return counts


@contextlib.contextmanager
def request_meters(node: KafkaNode) -> Iterator[RequestMeters]:
    """Read ``node``'s request meters for the block (the cluster must run with ``jmx=True``).

    Raises:
        RuntimeError: no JMX port, no JDK, or the reader cannot connect.
    """
    if node.jmx_port is None:
        raise RuntimeError(f"node {node.node_id} serves no JMX: start it with jmx=True")
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH")
    classes = compiled_classes(_SOURCE)
    command = [java, *_JVM, "-cp", str(classes), _SOURCE.stem, f"127.0.0.1:{node.jmx_port}"]
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        meters = RequestMeters(process)
        meters.counts()  # connected, or the error now
        yield meters
    finally:
        process.kill()
        process.wait(timeout=10)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()
