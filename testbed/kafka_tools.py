# Strategy: Apache Kafka judges its brokers with its own system tests, and those drive three
# clients from the kafka-tools jar: VerifiableProducer (increasing integers, one JSON line per
# acknowledgement or send error), VerifiableConsumer (one JSON line per rebalance, per poll, per
# commit and, with --verbose, per record) and TransactionalMessageCopier (one JSON status line
# per transaction loop). This runs them as Kafka's tests do (apache/kafka:tests/kafkatest/services/
# verifiable_producer.py and kin): one JVM each, the configuration in a properties file, stdout
# read line by line and kept as events; the process owned by a context manager that kills it by
# PID however the block ends.
#
#   events      every JSON line the tool printed, in order, with the wall-clock time it was
#               read (time.time()). The verifiable clients stamp each event themselves
#               ("timestamp", ms since the epoch, taken when the acknowledgement or the poll
#               happened), which `event_time_s` prefers, so a pipe's buffering never shifts a
#               measured time.
#   stop        SIGTERM, as Kafka's `stop_node`: the tools' shutdown hooks close the clients and
#               print "shutdown_complete" (the copier a "ShutdownComplete" status); SIGKILL if
#               they have not exited in time.
#   JVM         small heap, serial GC and the C1 compiler only: six of these clients start next
#               to three brokers on a two-core machine, and they are paced at a few hundred
#               records a second, so start-up cost matters more than peak speed.
#
# The classpath is Kafka's own, resolved from Maven Central (testbed/kafka_install.py,
# ensure_kafka_tools), the same version as the broker.
"""Kafka's verifiable clients (kafka-tools jar) as processes whose JSON events are kept."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from testbed.kafka_install import KAFKA_VERSION, ensure_kafka_tools
from testbed.processes import die_with_parent

T = TypeVar("T")

__all__ = [
    "KafkaTool",
    "ToolEvent",
    "event_time_s",
    "running_tool",
    "transactional_copier",
    "verifiable_consumer",
    "verifiable_producer",
]

_JVM = ["-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
_STOP_TIMEOUT_S = 60.0
#: Warnings and errors of the clients' own logging go to stderr (the tool's log file), so
#: stdout carries the JSON events only.
_LOG4J = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""


@dataclass(frozen=True)
class ToolEvent:
    """One JSON line a tool printed, and the wall-clock time (time.time()) it was read."""

    read_s: float
    data: Mapping[str, Any]

    @property
    def name(self) -> str:
        """The event's kind: "name" for the verifiable clients, "stage" for the copier."""
        return str(self.data.get("name", self.data.get("stage", "")))


def event_time_s(event: ToolEvent) -> float:
    """When the event happened: the tool's own stamp (ms since the epoch) if it has one."""
    stamp = event.data.get("timestamp")
    return stamp / 1000 if isinstance(stamp, int | float) else event.read_s


@dataclass
class KafkaTool:
    """One of Kafka's tools, started by ``start``; ``events`` fills as it prints.

    Resource handling: ``running_tool`` owns the process; ``stop`` and ``kill`` end it by PID.
    """

    name: str
    main_class: str
    arguments: list[str]
    directory: Path
    version: str = KAFKA_VERSION
    events: list[ToolEvent] = field(default_factory=list)
    #: Whether the last ``stop`` found the process already gone (it ended by itself).
    ended_by_itself: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _reader: threading.Thread | None = field(default=None, repr=False)
    #: ``events`` by kind, filled beside it: a poll of one kind costs that kind, not every event.
    _by_name: dict[str, list[ToolEvent]] = field(default_factory=dict, repr=False)
    #: (kind, converter) -> what ``converted`` made so far (it converts each event once).
    _converted: dict[tuple[str, Callable[[ToolEvent], Any]], list[Any]] = field(
        default_factory=dict, repr=False
    )

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        """Start the JVM (again, after a stop: the events of every run are kept)."""
        assert not self.alive(), f"{self.name} is running"
        libs = ensure_kafka_tools(self.version)
        self.directory.mkdir(parents=True, exist_ok=True)
        logging = self.directory / "log4j2.properties"
        if not logging.exists():
            logging.write_text(_LOG4J)
        command = [
            "java",
            *_JVM,
            f"-Dlog4j2.configurationFile={logging}",
            "-cp",
            f"{libs}/*",
            self.main_class,
            *self.arguments,
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,  # no JVM outlives a killed test
            )
        self._reader = threading.Thread(
            target=self._read, args=(self.process,), name=f"{self.name}-stdout", daemon=True
        )
        self._reader.start()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = _STOP_TIMEOUT_S) -> int:
        """Send ``signum`` and wait for the exit (SIGKILL after ``timeout_s``); its exit code.
        The events printed up to the exit are all in ``events`` when this returns."""
        process = self.process
        assert process is not None, f"{self.name} was never started"
        self.ended_by_itself = process.poll() is not None
        if not self.ended_by_itself:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        if self._reader is not None:
            self._reader.join(timeout=30)
        return process.returncode

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the tool to exit by itself; its exit code or None."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        if self._reader is not None:
            self._reader.join(timeout=30)
        return code

    def named(self, *names: str) -> list[ToolEvent]:
        """The events so far of these kinds, in order."""
        if len(names) == 1:
            return list(self._by_name.get(names[0], ()))
        return [event for event in list(self.events) if event.name in names]

    def converted(self, name: str, convert: Callable[[ToolEvent], T]) -> list[T]:
        """Every event of kind ``name`` so far through ``convert``, in order. Each event is
        converted once and the list extended, so polling costs what came since the last poll:
        a harness that rebuilt every event on each poll spent seconds per poll after an hour
        (millions of events) and, holding the GIL, starved the threads reading the tools'
        output until the tools blocked on it."""
        done = self._converted.setdefault((name, convert), [])
        source = self._by_name.get(name, [])
        if len(done) < len(source):
            done.extend(convert(event) for event in source[len(done) :])
        return list(done)

    def wait_for(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Hang guard: poll ``condition`` every 50 ms; fail after ``timeout_s`` (with the log)."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name}: {what} not within {timeout_s:g} s (alive: {self.alive()}); "
                    f"log {self.log_path}:\n{self.log_text()[-2000:]}"
                )
            time.sleep(0.05)

    def wait_for_events(self, name: str, more_than: int = 0, timeout_s: float = 90.0) -> None:
        """Hang guard: wait until more than ``more_than`` events of kind ``name`` came."""
        self.wait_for(
            lambda: len(self.named(name)) > more_than, timeout_s, f"more than {more_than} {name}"
        )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.strip()
            if not line.startswith(b"{"):
                continue
            with contextlib.suppress(ValueError):  # not JSON, or not UTF-8: not an event
                event = ToolEvent(time.time(), json.loads(line))
                self.events.append(event)
                self._by_name.setdefault(event.name, []).append(event)


@contextlib.contextmanager
def running_tool(tool: KafkaTool) -> Iterator[KafkaTool]:
    """Start ``tool`` for the block; kill it by PID afterwards, however the block ends."""
    tool.start()
    try:
        yield tool
    finally:
        process = tool.process
        if process is not None:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)  # a paused JVM cannot die
                process.kill()
            process.wait(timeout=30)
        if tool._reader is not None:
            tool._reader.join(timeout=30)


def _properties_file(directory: Path, name: str, properties: Mapping[str, object]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    return path


def verifiable_producer(
    name: str,
    bootstrap: str,
    topic: str,
    directory: Path,
    *,
    throughput: int,
    value_prefix: int | None = None,
    max_messages: int = -1,
    properties: Mapping[str, object] | None = None,
) -> KafkaTool:
    """org.apache.kafka.tools.VerifiableProducer: increasing integers to ``topic``, at about
    ``throughput`` records a second, acks=all; ``properties`` for the producer (Kafka's
    system tests set enable.idempotence, retries and max.in.flight there)."""
    config = _properties_file(directory, name, properties or {})
    arguments = [
        "--bootstrap-server", bootstrap, "--topic", topic, "--throughput", str(throughput),
        "--max-messages", str(max_messages), "--acks", "-1", "--command-config", str(config),
    ]  # fmt: skip
    if value_prefix is not None:
        arguments += ["--value-prefix", str(value_prefix)]
    return KafkaTool(name, "org.apache.kafka.tools.VerifiableProducer", arguments, directory)


def verifiable_consumer(
    name: str,
    bootstrap: str,
    topic: str,
    group: str,
    directory: Path,
    *,
    protocol: str = "classic",
    properties: Mapping[str, object] | None = None,
    extra: Sequence[str] = (),
) -> KafkaTool:
    """org.apache.kafka.tools.VerifiableConsumer in ``group`` with the ``protocol`` group
    protocol ("classic", or "consumer": KIP-848), every record reported (--verbose), offsets
    committed synchronously after each poll (its default)."""
    config = _properties_file(directory, name, properties or {})
    arguments = [
        "--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group,
        "--group-protocol", protocol, "--verbose", "--reset-policy", "earliest",
        "--command-config", str(config), *extra,
    ]  # fmt: skip
    return KafkaTool(name, "org.apache.kafka.tools.VerifiableConsumer", arguments, directory)


def transactional_copier(
    name: str,
    bootstrap: str,
    input_topic: str,
    input_partition: int,
    output_topic: str,
    directory: Path,
    *,
    transactional_id: str,
    group: str,
    transaction_size: int,
    transaction_timeout_ms: int,
    random_aborts: bool = True,
) -> KafkaTool:
    """org.apache.kafka.tools.TransactionalMessageCopier: ``input_partition`` of
    ``input_topic`` to ``output_topic`` in transactions of ``transaction_size`` records, the
    consumed offsets committed in each transaction (with the group's metadata), a third of the
    transactions aborted at random when ``random_aborts``; it exits once it copied everything
    that was in the partition when it started."""
    arguments = [
        "--broker-list", bootstrap, "--transactional-id", transactional_id,
        "--consumer-group", group, "--input-topic", input_topic,
        "--input-partition", str(input_partition), "--output-topic", output_topic,
        "--transaction-size", str(transaction_size),
        "--transaction-timeout", str(transaction_timeout_ms), "--use-group-metadata",
    ]  # fmt: skip
    if random_aborts:
        arguments.append("--enable-random-aborts")
    return KafkaTool(
        name, "org.apache.kafka.tools.TransactionalMessageCopier", arguments, directory
    )
