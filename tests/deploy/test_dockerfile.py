"""Lint the Dockerfile's essentials (no Docker engine here) and run its HEALTHCHECK command.

What a build would catch first is checked as text: stages, a non-root final USER, the console
script as ENTRYPOINT, EXPOSEd ports that agree with the image's default config, a HEALTHCHECK
on /healthz at the metrics port, and that every COPY source survives .dockerignore. The
default config itself is loaded by the proxy's own loader, and the HEALTHCHECK one-liner is
executed against a real HTTP server answering 200 and 503. The dependency lock the build
installs from (constraints/image.txt) is checked against pyproject.toml, and resolved against
PyPI with pip's dry run (PyPI is where `make test` installs from too).
"""

from __future__ import annotations

import http.server
import json
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
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from proxy.config import load_config, parse_host_port
from tests.deploy._dockerfile import Stage, exec_form, ignored, read_stages

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
IMAGE_CONFIG = "/etc/purgatory-proxy/config.toml"
LOCK = ROOT / "constraints" / "image.txt"
LOCK_IN_CONTEXT = "constraints/image.txt"
PYPI = "https://pypi.org/simple"


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


# -- the dependency lock ---------------------------------------------------------------------


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _lock() -> dict[str, tuple[str, list[str]]]:
    """The lock's pins: canonical name -> (version, sha256 hashes); raises on a non-== line."""
    pins: dict[str, tuple[str, list[str]]] = {}
    logical = ""
    lines = [line.split(" #")[0].strip() for line in LOCK.read_text().splitlines()]
    for line in [*lines, ""]:
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        if logical.strip():
            words = logical.split()
            requirement = Requirement(words[0])
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"not pinned with ==: {words[0]}"
            hashes = [w.removeprefix("--hash=sha256:") for w in words[1:]]
            assert all(len(h) == 64 for h in hashes) and hashes, f"no sha256 hashes: {words[0]}"
            pins[canonicalize_name(requirement.name)] = (specifier.version, hashes)
        logical = ""
    return pins


def _runtime_requirements() -> list[Requirement]:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    return [Requirement(spec) for spec in project["dependencies"]]


def _build_requirements() -> list[Requirement]:
    build = _pyproject()["build-system"]
    assert isinstance(build, dict)
    return [Requirement(spec) for spec in build["requires"]]


def test_lock_pins_every_runtime_dependency() -> None:
    pins = _lock()
    for requirement in [*_runtime_requirements(), *_build_requirements()]:
        name = canonicalize_name(requirement.name)
        assert name in pins, (
            f"{requirement} is not in {LOCK_IN_CONTEXT}: regenerate it (Dockerfile)"
        )
        version = pins[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)
    # The image has no extras: the embedded test broker, the report's Spark, the test tools.
    optional = _pyproject()["project"]["optional-dependencies"]  # type: ignore[index]
    for extra in ("broker", "pipeline"):
        for spec in optional[extra]:
            assert canonicalize_name(Requirement(spec).name) not in pins, (extra, spec)


def _build_stage(stages: list[Stage]) -> Stage:
    (build,) = [s for s in stages if s.name == "build"]
    return build


def test_dockerfile_installs_only_from_the_lock(stages: list[Stage]) -> None:
    build = _build_stage(stages)
    steps = [(i.keyword, i.arguments) for i in build.instructions]
    copy_lock = steps.index(("COPY", f"{LOCK_IN_CONTEXT} ./{LOCK_IN_CONTEXT}"))
    installs = [
        (index, arguments)
        for index, (keyword, arguments) in enumerate(steps)
        if keyword == "RUN" and "pip install" in arguments
    ]
    assert len(installs) == 2, installs
    (deps_at, deps), (project_at, project) = installs
    assert copy_lock < deps_at < project_at
    # The dependencies: exactly the lock's files, hash-checked, nothing resolved beyond it.
    assert f"-r {LOCK_IN_CONTEXT}" in deps
    assert "--require-hashes" in deps.split() and "--no-deps" in deps.split()
    # The project: no resolution, no index, the locked build backend; then pip check.
    words = project.split("&&")[0].split()
    assert words[-1] == "."
    assert {"--no-deps", "--no-index", "--no-build-isolation"} <= set(words)
    assert "pip check" in project
    assert not ignored(LOCK_IN_CONTEXT, DOCKERIGNORE)


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    # Only PyPI, as in a docker build: no local wheel directories or extra indexes from this
    # machine's pip configuration.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_lock_resolves_on_pypi(tmp_path: Path) -> None:
    """pip's dry run: the pinned files exist with those hashes, and the lock is complete.

    First the Dockerfile's own step (--require-hashes --no-deps -r lock). Then pyproject's
    runtime requirements resolved with the lock as constraints: every package the resolver picks
    must be a pinned one at its pinned version, so nothing in the image comes from outside it.
    """
    pins = _lock()
    hashed = _pip("--no-deps", "--require-hashes", "--index-url", PYPI, "-r", str(LOCK))
    assert hashed.returncode == 0, hashed.stderr
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, (version, _) in pins.items()))
    report = tmp_path / "report.json"
    resolved = _pip(
        "--index-url",
        PYPI,
        "--report",
        str(report),
        "-c",
        str(constraints),
        *(str(r) for r in _runtime_requirements()),
    )
    assert resolved.returncode == 0, resolved.stderr
    installed = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    build_only = {canonicalize_name(r.name) for r in _build_requirements()}
    assert installed == {n: v for n, (v, _) in pins.items() if n not in build_only}
