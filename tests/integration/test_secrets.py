"""Issue 16: the upstream SASL password never reaches any output of the proxy.

A whole session with a known password, given each way the proxy takes it (``password`` in the
TOML file, ``password_file``, ``PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD``), with everything
that writes text turned on (DEBUG logging as text and as JSON, the request log, /metrics,
/readyz), a session whose password the cluster refuses, and start-ups that fail while the
password is set. Every output is then searched for the password. The cluster is Apache Kafka's
own SASL_SSL listener (``secure_kafka``: TLS, then SCRAM-SHA-256 as alice); it ran behind a
TLS + SCRAM front before Tansu until the broker could do it itself.

Each search is paired with a check that the output is not empty and holds what that session
must have produced, so a test cannot pass because an output was missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.certs import Pki
from testbed.kafka_cluster import USERS, KafkaCluster
from testbed.processes import free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.support.group_round_trip import group_round_trip
from tests.support.secure_kafka import http_get, readyz_saying

#: The secret searched for: alice's password on the cluster (testbed/kafka_cluster.USERS).
PASSWORD = USERS["alice"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sasl_ssl(secure_kafka: KafkaCluster) -> str:
    """The SASL_SSL bootstrap of the session's secured Kafka."""
    return secure_kafka.bootstrap("SASL_SSL")


@pytest.fixture(scope="module")
def pki(secure_kafka: KafkaCluster) -> Pki:
    assert secure_kafka.pki is not None
    return secure_kafka.pki


def _tls_env(pki: Pki) -> dict[str, str]:
    return {
        "PURGATORY_PROXY_UPSTREAM__TLS__ENABLED": "true",
        "PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(pki.ca),
    }


def _password_setup(source: str, password: str, tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    """Environment and extra arguments that give the proxy ``password`` through ``source``."""
    env = {
        "PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM": "SCRAM-SHA-256",
        "PURGATORY_PROXY_UPSTREAM__SASL__USERNAME": "alice",
    }
    if source == "env":
        env["PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD"] = password
        return env, []
    if source == "password_file":
        secret = tmp_path / "password"
        secret.write_text(password + "\n")
        env["PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD_FILE"] = str(secret)
        return env, []
    config = tmp_path / "proxy.toml"
    config.write_text(f'[upstream.sasl]\npassword = "{password}"\n')
    return env, ["--config", str(config)]


def _stopped_log(proxy: ProxyProcess) -> str:
    """Everything the proxy wrote to stdout and stderr, shutdown lines included."""
    assert proxy.stop() == 0
    return proxy.log_text()


@pytest.mark.parametrize(
    ("source", "log_format"),
    [("env", "json"), ("password_file", "text"), ("toml", "json")],
)
def test_a_whole_session_never_shows_the_password(
    source: str, log_format: str, sasl_ssl: str, pki: Pki, tmp_path: Path
) -> None:
    env, args = _password_setup(source, PASSWORD, tmp_path)
    metrics_port = free_port()
    request_log = tmp_path / "requests.jsonl"
    outputs: dict[str, str] = {}
    with running_proxy(
        sasl_ssl,
        *args,
        "--log-level",
        "DEBUG",
        "--log-format",
        log_format,
        "--metrics",
        f"127.0.0.1:{metrics_port}",
        "--request-log",
        str(request_log),
        env={**_tls_env(pki), **env},
    ) as proxy:
        group_round_trip(proxy.bootstrap, count=5)
        status, outputs["/readyz"] = http_get(metrics_port, "/readyz")
        assert status == 200
        status, outputs["/metrics"] = http_get(metrics_port, "/metrics")
        assert status == 200
        outputs["stdout+stderr"] = _stopped_log(proxy)
    outputs["request log"] = "".join(
        path.read_text() for path in sorted(tmp_path.glob("requests.jsonl*"))
    )
    # The outputs are real: DEBUG lines, served requests, the round trip's API calls.
    assert "DEBUG" in outputs["stdout+stderr"] or '"debug"' in outputs["stdout+stderr"].lower()
    assert "purgatory_proxy" in outputs["/metrics"]
    assert '"api"' in outputs["request log"] or "Produce" in outputs["request log"]
    leaks = [name for name, text in outputs.items() if PASSWORD in text]
    assert leaks == []


def test_a_refused_password_is_not_shown_either(sasl_ssl: str, pki: Pki, tmp_path: Path) -> None:
    """The cluster refuses the password: /readyz, the log and the closed clients' lines say
    why, naming mechanism and user, never the password tried."""
    wrong = PASSWORD + "-wrong"
    env, args = _password_setup("env", wrong, tmp_path)
    metrics_port = free_port()
    with running_proxy(
        sasl_ssl,
        *args,
        "--log-level",
        "DEBUG",
        "--metrics",
        f"127.0.0.1:{metrics_port}",
        env={**_tls_env(pki), **env},
    ) as proxy:
        proxy.wait_for_log("cannot fetch upstream metadata", timeout_s=20)
        status, readyz = readyz_saying(metrics_port, "authenticate")
        assert status == 503
        _, metrics = http_get(metrics_port, "/metrics")
        log = _stopped_log(proxy)
    assert "SCRAM-SHA-256" in readyz
    assert "'alice'" in readyz
    for text in (readyz, metrics, log):
        assert wrong not in text
        assert PASSWORD not in text


@pytest.mark.parametrize(
    ("extra_env", "toml", "words"),
    [
        # A section-level check fails while the password is set: the error shows the section.
        ({"PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD_FILE": "/nonexistent"}, "", "exactly one"),
        ({"PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM": "GSSAPI"}, "", "mechanism"),
        ({"PURGATORY_PROXY_UPSTREAM__SASL__PASSWORT": "x"}, "", "passwort"),
        ({}, '[upstream.sasl]\npassword = "{password}"\nusername = 7\n', "username"),
        ({}, '[upstream.sasl]\npassword = "{password}"\nusername = "u"\nbogus = 1\n', "bogus"),
        ({}, '[upstream.sasl]\npassword = ["{password}"]\n', "password"),
        ({}, 'upstream.sasl.password = "{password}"\n[[broken toml', "cannot read"),
    ],
)
def test_failing_starts_do_not_show_the_password(
    extra_env: dict[str, str], toml: str, words: str, tmp_path: Path
) -> None:
    env = {
        "PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM": "SCRAM-SHA-256",
        "PURGATORY_PROXY_UPSTREAM__SASL__USERNAME": "proxy",
        "PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD": PASSWORD,
        **extra_env,
    }
    args = ["--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--log-level", "DEBUG"]
    if toml:
        config = tmp_path / "proxy.toml"
        config.write_text(toml.replace("{password}", PASSWORD))
        args += ["--config", str(config)]
        del env["PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD"]
        del env["PURGATORY_PROXY_UPSTREAM__SASL__USERNAME"]  # the environment beats the file
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "run", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert words in done.stderr.lower()
    assert PASSWORD not in done.stdout + done.stderr
