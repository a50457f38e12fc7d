"""Settings checked where they are read, on the real command line (issue 28 item 2, issue 29
item 5): each refused start is exit code 2 and one line (one JSON object with
--log-format json) that names the flag or key and never repeats a value given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.proxy_process import running_proxy

#: An upstream nobody listens on: these tests stop before any connection.
_NOWHERE = "127.0.0.1:1"
SECRET = "Hunter2-startup-secret"


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PURGATORY_PROXY_")}
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "run", "--listen", "127.0.0.1:0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    assert lines[0].startswith("purgatory-proxy: ")
    return lines[0]


def _one_json_error(stderr: str) -> dict[str, object]:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{stderr}"
    record = json.loads(lines[0])
    assert isinstance(record, dict)
    assert record["level"] == "ERROR"
    assert {"time", "logger", "message"} <= set(record)
    return record


@pytest.mark.parametrize(
    "where", ["missing-dir/requests.jsonl", "a-directory"], ids=["no directory", "a directory"]
)
def test_an_unwritable_request_log_stops_the_start(where: str, tmp_path: Path) -> None:
    (tmp_path / "a-directory").mkdir()
    path = tmp_path / where
    code, _, stderr = _run("--upstream", _NOWHERE, "--request-log", str(path))
    assert code == 2
    line = _one_line(stderr)
    assert f"log.requests (--request-log) {path}: cannot write the request log" in line


def test_a_writable_request_log_is_created_at_start(tmp_path: Path) -> None:
    """The check opens the file as the writer will; an existing log is appended to, so the
    check must not truncate it (and the run then stops at the next check, a bad size)."""
    path = tmp_path / "requests.jsonl"
    path.write_text('{"kept": true}\n')
    code, _, stderr = _run(
        "--upstream", _NOWHERE, "--request-log", str(path), "--memory-limit", "1GiB!"
    )
    assert code == 2
    assert "memory.limit: expected a size in bytes" in _one_line(stderr)
    assert path.read_text() == '{"kept": true}\n'


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--memory-limit", "256MB!"], {}, "memory.limit: expected a size in bytes"),
        (["--listen", "0.0.0.0:0"], {}, "set --advertised-host"),
        ([], {"PURGATORY_PROXY_UPSTREAM__SASL": f'{{"password": "{SECRET}", '}, "expected JSON"),
        (["--request-log", "/nonexistent-dir/x.jsonl"], {}, "cannot write the request log"),
    ],
    ids=["size", "wildcard", "secret json", "request log"],
)
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_startup_errors_honour_the_log_format_and_never_show_a_value(
    args: list[str], env: dict[str, str], words: str, log_format: str
) -> None:
    code, stdout, stderr = _run("--upstream", _NOWHERE, "--log-format", log_format, *args, env=env)
    assert code == 2
    assert stdout == ""
    if log_format == "json":
        record = _one_json_error(stderr)
        assert words in str(record["message"])
        assert record["exit_code"] == 2
    else:
        assert words in _one_line(stderr)
    assert SECRET not in stderr


def test_a_wildcard_listen_names_the_flag_and_starts_with_an_advertised_host() -> None:
    code, _, stderr = _run("--upstream", _NOWHERE, "--listen", "0.0.0.0:0")
    assert code == 2
    line = _one_line(stderr)
    assert "clients would be told to connect to 0.0.0.0" in line
    assert "set --advertised-host" in line and "(from --listen)" in line
    with running_proxy(
        _NOWHERE, "--listen", "0.0.0.0:0", "--advertised-host", "127.0.0.1"
    ) as proxy:
        assert proxy.host == "0.0.0.0"
        assert proxy.stop() == 0
