"""Lint the Dockerfile's essentials (no Docker engine here) and run its HEALTHCHECK command.

What a build would catch first is checked as text: stages, a non-root final USER, the console
script as ENTRYPOINT, EXPOSEd ports that agree with the image's default config, a HEALTHCHECK
on /healthz at the metrics port, and that every COPY source survives .dockerignore. The
default config itself is loaded by the proxy's own loader, and the HEALTHCHECK one-liner is
executed against a real HTTP server answering 200 and 503.
"""

from __future__ import annotations

import http.server
import os
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from proxy.config import load_config, parse_host_port
from tests.deploy._dockerfile import Stage, exec_form, ignored, read_stages

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
IMAGE_CONFIG = "/etc/purgatory-proxy/config.toml"


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return read_stages(DOCKERFILE)[1]


@pytest.fixture(scope="module")
def runtime(stages: list[Stage]) -> Stage:
    # The last stage is what `docker build .` produces.
    return stages[-1]


def _env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for arguments in stage.all("ENV"):
        for word in shlex.split(arguments):
            name, _, value = word.partition("=")
            env[name] = value
    return env


def _default_config_source(runtime: Stage) -> Path:
    for arguments in runtime.all("COPY"):
        words = arguments.split()
        if not words[0].startswith("--from") and words[-1] == IMAGE_CONFIG:
            return ROOT / words[0]
    raise AssertionError(f"the runtime stage copies no file to {IMAGE_CONFIG}")


def test_multi_stage_on_slim_python_311(stages: list[Stage], runtime: Stage) -> None:
    assert len(stages) >= 2
    assert all(s.base.startswith("python:3.11-slim") for s in stages), [s.base for s in stages]
    names = {s.name for s in stages}
    assert {"build", "runtime"} <= names
    # The runtime takes the installed virtualenv from the build stage, not the sources.
    copies_from_build = [a for a in runtime.all("COPY") if a.startswith("--from=build")]
    assert copies_from_build, runtime.all("COPY")
    assert not any(a.split()[0] in ("wire", "proxy", ".") for a in runtime.all("COPY"))


def test_runtime_runs_as_a_numeric_non_root_user(runtime: Stage) -> None:
    user = runtime.last("USER")
    assert user is not None
    uid, _, gid = user.partition(":")
    # Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
    assert uid.isdigit() and int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    # The user the chart's securityContext asks for.
    values = (ROOT / "helm/purgatory-proxy/values.yaml").read_text()
    assert f"runAsUser: {uid}" in values


def test_entrypoint_is_the_console_script(runtime: Stage) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (script,) = pyproject["project"]["scripts"]
    entrypoint = runtime.last("ENTRYPOINT")
    assert entrypoint is not None
    assert exec_form(entrypoint) == [script]
    cmd = runtime.last("CMD")
    assert cmd is not None
    assert exec_form(cmd) == ["run", "--config", IMAGE_CONFIG]


def test_default_config_loads_and_env_overrides_validate(
    runtime: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _default_config_source(runtime)
    for name in list(os.environ):
        if name.startswith("PURGATORY_PROXY_"):
            monkeypatch.delenv(name)
    config = load_config(source)
    assert parse_host_port(config.proxy.listen)[0] == "0.0.0.0"
    assert config.metrics.listen
    # How the Dockerfile's header says to set the upstream: a JSON list in the environment.
    monkeypatch.setenv("PURGATORY_PROXY_UPSTREAM__BOOTSTRAP", '["kafka-1:9092","kafka-2:9092"]')
    monkeypatch.setenv("PURGATORY_PROXY_PROXY__ADVERTISED_HOST", "proxy.example")
    config = load_config(source)
    assert config.upstream.bootstrap == ["kafka-1:9092", "kafka-2:9092"]
    assert config.proxy.advertised_host == "proxy.example"
    # The image's own variables are outside the proxy's prefix and never trip its loader.
    for name, value in _env(runtime).items():
        monkeypatch.setenv(name, value)
    load_config(source)


def test_exposed_ports_match_the_default_config(runtime: Stage) -> None:
    exposed: set[int] = set()
    for arguments in runtime.all("EXPOSE"):
        for word in arguments.split():
            low, _, high = word.split("/")[0].partition("-")
            exposed.update(range(int(low), int(high or low) + 1))
    config = load_config(_default_config_source(runtime))
    bootstrap = parse_host_port(config.proxy.listen)[1]
    metrics = parse_host_port(config.metrics.listen)[1]
    first = config.proxy.first_broker_port
    assert first > 0, "the image must give broker listeners fixed ports to EXPOSE"
    assert {bootstrap, metrics, first, first + 1, first + 2} <= exposed


def test_healthcheck_probes_healthz_on_the_metrics_port(runtime: Stage) -> None:
    healthcheck = runtime.last("HEALTHCHECK")
    assert healthcheck is not None
    options, _, command = healthcheck.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = exec_form(command)
    assert argv[:2] == ["python", "-c"]  # slim images have no curl
    compile(argv[2], "<HEALTHCHECK>", "exec")
    url = _env(runtime)["HEALTHCHECK_URL"]
    parts = urlsplit(url)
    config = load_config(_default_config_source(runtime))
    assert parts.path == "/healthz"
    assert parts.port == parse_host_port(config.metrics.listen)[1]


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_healthcheck_command_exit_code(
    runtime: Stage, health_server: http.server.HTTPServer, status: int, healthy: bool
) -> None:
    command = exec_form(runtime.last("HEALTHCHECK").partition("CMD ")[2])  # type: ignore[union-attr]
    _Health.status = status
    port = health_server.server_address[1]
    proc = subprocess.run(
        [sys.executable, *command[1:]],
        env={**os.environ, "HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert (proc.returncode == 0) == healthy, proc.stderr


def test_every_copy_source_reaches_the_build_context(stages: list[Stage]) -> None:
    sources = []
    for stage in stages:
        for arguments in stage.all("COPY"):
            words = arguments.split()
            if words[0].startswith("--from"):
                continue
            sources += [w for w in words[:-1] if not w.startswith("--")]
    assert sources
    for source in sources:
        path = ROOT / source
        assert path.exists(), source
        files = [path] if path.is_file() else [p for p in path.rglob("*.py")] or [path]
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            assert not ignored(relative, DOCKERIGNORE), f"{relative} is excluded by .dockerignore"


def test_dockerignore_keeps_the_context_small() -> None:
    for relative in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "bench/wire.py"):
        assert ignored(relative, DOCKERIGNORE), relative
    assert ignored("proxy/__pycache__/cli.cpython-311.pyc", DOCKERIGNORE)
