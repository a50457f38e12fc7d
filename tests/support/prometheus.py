# Strategy: Debian's prometheus (scripts/install-system-deps.sh) run as a process on a free
# loopback port with a config and a storage directory of its own, stopped by PID when the block
# ends however it ends; queried over its HTTP API with urllib (JSON in, JSON out), so a test
# asks exactly what Grafana or an alert rule would ask.
"""A real Prometheus for tests: start, scrape, query, stop."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.processes import free_port, stop_gracefully

__all__ = ["Prometheus", "PrometheusError", "running_prometheus", "tool"]

_START_TIMEOUT_S = 30.0


class PrometheusError(AssertionError):
    """Prometheus answered a query with an error (a bad expression, a type mismatch)."""


def tool(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; fails with how to install them."""
    path = shutil.which(name)
    assert path, f"{name} not found: run scripts/install-system-deps.sh (Debian's prometheus)"
    return path


@dataclass(frozen=True)
class Prometheus:
    """A running Prometheus: its base URL and where it logs."""

    url: str
    log_path: Path

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the ``data`` of a success, else PrometheusError."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as error:  # 400/422: the expression is wrong
            body = json.load(error)
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (vector or scalar as a list of samples)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_until(self, expr: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Poll ``expr`` until it returns a series; fail with Prometheus's log if it never does."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{expr!r} returned nothing within {timeout_s:g} s\n"
                    + self.log_path.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.25)


@contextlib.contextmanager
def running_prometheus(
    directory: Path,
    targets: list[str],
    *,
    job: str,
    rule_files: Sequence[Path] = (),
    interval_s: float = 1.0,
) -> Iterator[Prometheus]:
    """Run Prometheus scraping ``targets`` (host:port, /metrics) as ``job`` every
    ``interval_s``, evaluating ``rule_files`` as often, with its data in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    interval = f"{int(interval_s * 1000)}ms"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": interval, "evaluation_interval": interval},
                "rule_files": [str(path) for path in rule_files],
                "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
            }
        )
    )
    port = free_port()
    log_path = directory / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    prometheus = Prometheus(f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield prometheus
    finally:
        stop_gracefully(proc)  # its TSDB closes cleanly on SIGTERM
