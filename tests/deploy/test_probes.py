"""The image's HEALTHCHECK and the chart's probes, against the real proxy.

The Dockerfile's one-liner and the probes the chart renders (HTTP paths, and the TCP-connect
exec probe used without metrics) are taken from those files and pointed at a proxy started
with --metrics (embedded broker behind it), so a renamed endpoint or a broken one-liner fails
here rather than in a cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.proxy_process import ProxyProcess, running_proxy
from tests.deploy._chart import pod_spec, proxy_container, render
from tests.deploy._dockerfile import exec_form, read_stages

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def running() -> Iterator[ProxyProcess]:
    proxy: ProxyProcess
    with running_proxy(None, "--metrics", "127.0.0.1:0") as proxy:
        proxy.wait_for_log(r"metrics endpoint on (http://\S+)")
        yield proxy
        # SIGTERM, not the context's SIGKILL: a clean exit also stops the embedded broker.
        proxy.stop()


@pytest.fixture(scope="module")
def metrics_url(running: ProxyProcess) -> str:
    return running.wait_for_log(r"metrics endpoint on (http://\S+)")[1]


@pytest.fixture(scope="module")
def proxy_bootstrap(running: ProxyProcess) -> str:
    return running.bootstrap


def test_dockerfile_healthcheck_passes_against_the_proxy(metrics_url: str) -> None:
    runtime = read_stages(ROOT / "Dockerfile")[1][-1]
    healthcheck = runtime.last("HEALTHCHECK")
    assert healthcheck is not None
    command = exec_form(healthcheck.partition("CMD ")[2])
    proc = subprocess.run(
        [sys.executable, *command[1:]],
        env={**os.environ, "HEALTHCHECK_URL": f"{metrics_url}/healthz"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("values", [{"mode": "gateway"}, {"mode": "sidecar"}])
def test_chart_probe_paths_answer_200(metrics_url: str, values: dict[str, Any]) -> None:
    proxy = proxy_container(pod_spec(render(values)))
    probes = {
        name: proxy[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert {name: probe["port"] for name, probe in probes.items()} == dict.fromkeys(
        probes, "metrics"
    )
    paths = [probe["path"] for probe in probes.values()]
    assert paths == ["/healthz", "/healthz", "/readyz"]
    for path in paths:
        with urllib.request.urlopen(f"{metrics_url}{path}", timeout=10) as response:
            assert response.status == 200, path


def test_chart_exec_probe_passes_against_the_proxy(proxy_bootstrap: str) -> None:
    """metrics.enabled=false: the exec probe (a TCP connect) against the real listener."""
    port = int(proxy_bootstrap.rpartition(":")[2])
    values = {"mode": "sidecar", "metrics": {"enabled": False}, "proxy": {"port": port}}
    proxy = proxy_container(pod_spec(render(values)))
    command = proxy["livenessProbe"]["exec"]["command"]
    assert command[0] == "python"
    proc = subprocess.run(
        [sys.executable, *command[1:]], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
