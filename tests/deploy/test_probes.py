"""The image's HEALTHCHECK and the chart's probes, against the real proxy's HTTP endpoint.

The Dockerfile's one-liner and the paths the chart probes are taken from those files and
pointed at a proxy started with --metrics (embedded broker behind it), so a renamed endpoint
or a broken one-liner fails here rather than in a cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.deploy._dockerfile import exec_form, read_stages
from tests.support.proxy_process import ProxyProcess, running_proxy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def metrics_url() -> Iterator[str]:
    proxy: ProxyProcess
    with running_proxy(None, "--metrics", "127.0.0.1:0") as proxy:
        found = proxy.wait_for_log(r"metrics endpoint on (http://\S+)")
        yield found[1]
        # SIGTERM, not the context's SIGKILL: a clean exit also stops the embedded broker.
        proxy.stop()


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


def test_chart_probe_paths_answer_200(metrics_url: str) -> None:
    values = yaml.safe_load((ROOT / "helm/purgatory-proxy/values.yaml").read_text())
    paths = [values[probe]["httpGet"]["path"] for probe in ("livenessProbe", "readinessProbe")]
    assert paths == ["/healthz", "/readyz"]
    for path in paths:
        with urllib.request.urlopen(f"{metrics_url}{path}", timeout=10) as response:
            assert response.status == 200, path
