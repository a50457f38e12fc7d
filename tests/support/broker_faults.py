# Strategy: fault injection for the broker-fault scenarios of the reliability campaign (issue 9).
#
# A scenario needs a broker it can hurt and a proxy it can watch:
#
#   FaultyBroker   one Tansu process on a fixed loopback port that the test can kill -9 and
#                  start again on the SAME port with the same storage (so the proxy's upstream
#                  address stays valid and `s3://` storage brings the records back), or freeze
#                  with SIGSTOP and thaw with SIGCONT. Each incarnation is owned by
#                  testbed.processes.running_process inside its own ExitStack, so every
#                  process is killed by PID and reaped however the test ends; a frozen process
#                  is thawed before that, so nothing is left stopped behind the test. Tansu
#                  advertises the address of a ProduceTap (broker_faults_tap) in front of it,
#                  which records every Produce answer the broker gave; the tap outlives the
#                  broker's incarnations, as the proxy's upstream address must.
#   ProxyHttp      the proxy's /healthz and /metrics, read with the standard library and the
#                  Prometheus text parser the metrics tests already use.
#
# Nothing here mocks Kafka: the broker is the real binary and the faults are real signals.
"""Kill, restart, freeze and thaw a real Tansu broker; read the proxy's health and metrics."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from proxy.embedded_broker import tansu_command
from testbed.processes import free_port, running_process
from tests.support.broker_faults_tap import ProduceTap, running_tap

__all__ = ["FaultyBroker", "ProxyHttp", "faulty_broker"]


class FaultyBroker:
    """A Tansu broker on one fixed port that can be killed, restarted, frozen and thawed.

    ``bootstrap`` is the tap in front of it (what Tansu advertises); ``port`` is Tansu's own.

    Task-safety: call it from one thread (the test's); client threads only use its address.
    """

    def __init__(
        self, storage: str, env: dict[str, str] | None, port: int, tap: ProduceTap
    ) -> None:
        self.storage = storage
        self.env = env
        self.port = port
        self.tap = tap
        self._incarnation: contextlib.ExitStack | None = None
        self._pid: int | None = None
        self._frozen = False
        #: How many times the broker process was started (1 before any restart).
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.tap.host}:{self.tap.listen_port}"

    @property
    def pid(self) -> int:
        if self._pid is None:
            raise RuntimeError("the broker is not running")
        return self._pid

    def start(self) -> None:
        """Start an incarnation on ``port``; return once it accepts connections."""
        if self._incarnation is not None:
            raise RuntimeError("the broker is already running")
        command = tansu_command(self.port, storage=self.storage)
        command[command.index("--advertised-listener-url") + 1] = f"tcp://{self.bootstrap}"
        stack = contextlib.ExitStack()
        try:
            self._pid = stack.enter_context(running_process(command, self.port, env=self.env))
        except BaseException:
            stack.close()
            raise
        self._incarnation = stack
        self.starts += 1

    def kill(self) -> None:
        """kill -9 the running incarnation and reap it (no chance to flush anything)."""
        os.kill(self.pid, signal.SIGKILL)
        self._close()

    def freeze(self) -> None:
        """SIGSTOP: the process keeps its sockets (the kernel still accepts connections into
        the listen backlog) but answers nothing, which is what a hung broker looks like."""
        os.kill(self.pid, signal.SIGSTOP)
        self._frozen = True

    def thaw(self) -> None:
        """SIGCONT a frozen broker."""
        os.kill(self.pid, signal.SIGCONT)
        self._frozen = False

    def close(self) -> None:
        """Stop whatever incarnation runs (thawing it first); safe to call twice."""
        if self._frozen:
            with contextlib.suppress(ProcessLookupError):
                self.thaw()
        self._close()

    def _close(self) -> None:
        stack, self._incarnation, self._pid = self._incarnation, None, None
        if stack is not None:
            stack.close()  # running_process kills by PID (harmless if already dead) and reaps


@contextlib.contextmanager
def faulty_broker(
    storage: str = "memory://tansu/", env: dict[str, str] | None = None
) -> Iterator[FaultyBroker]:
    """A started FaultyBroker (and its tap) on free loopback ports, for the block.

    Resource handling: the broker is stopped by PID and the tap's thread joined on exit.
    """
    port = free_port()
    with running_tap(free_port(), port) as tap:
        broker = FaultyBroker(storage, env, port, tap)
        try:
            broker.start()
            yield broker
        finally:
            broker.close()


@dataclass(frozen=True)
class ProxyHttp:
    """The proxy's HTTP endpoint (``--metrics 127.0.0.1:PORT``)."""

    port: int

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
        """Status and body of ``GET path``; (0, reason) when nothing answers."""
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, repr(error)

    def healthy(self) -> bool:
        return self.get("/healthz") == (200, "ok\n")

    def scrape(self) -> dict[str, float]:
        """Every sample of /metrics, keyed ``name`` or ``name{label="value",...}``."""
        status, text = self.get("/metrics")
        if status != 200:
            raise AssertionError(f"/metrics answered {status}: {text[:200]}")
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def wait_until(self, name: str, want: float, timeout_s: float) -> tuple[float, float]:
        """Poll /metrics until sample ``name`` equals ``want``; return (value, seconds waited).

        The value returned is the last one seen, so a caller asserting on it gets the figure
        that did not settle. This is a hang guard, not a timing measurement.
        """
        started = time.monotonic()
        value = float("nan")
        while True:
            value = self.scrape().get(name, float("nan"))
            waited = time.monotonic() - started
            if value == want or waited > timeout_s:
                return value, waited
            time.sleep(0.1)
