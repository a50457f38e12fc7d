# Strategy: grepplabs/kafka-proxy, the Go sidecar, found rather than built here.
#
#   install   `go install github.com/grepplabs/kafka-proxy@v0.4.3` with GOBIN in the cache
#             (<cache>/kafka-proxy-v0.4.3/bin), once; a binary already there is used as is.
#             When the Go module proxy refuses the module (it does on the project's machine),
#             the binary comes from --kafka-proxy-bin PATH or $KAFKA_PROXY_BIN; with neither,
#             the benchmark runs without this route and says why in its rows. This module
#             never fetches or builds kafka-proxy's source any other way.
#   command   `kafka-proxy server` with one --bootstrap-server-mapping "UPSTREAM,LISTEN" per
#             broker (deterministic listeners: broker i gets the i-th consecutive local port),
#             --dynamic-listeners-disable, --http-disable (no fixed 9080 port),
#             --producer-acks-0-disabled (its README: faster; no producer here uses acks=0),
#             and its TLS flags towards clients (--proxy-listener-*) and the cluster (--tls-*).
"""Find (go install, or a given binary) and run kafka-proxy in front of a cluster."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.certs import Pki
from testbed.kafka_install import cache_root
from testbed.processes import free_port_run, running_process

__all__ = [
    "KAFKA_PROXY_MODULE",
    "KAFKA_PROXY_VERSION",
    "KafkaProxyBinary",
    "find_kafka_proxy",
    "running_kafka_proxy",
]

KAFKA_PROXY_MODULE = "github.com/grepplabs/kafka-proxy"
KAFKA_PROXY_VERSION = "v0.4.3"
BINARY_ENV = "KAFKA_PROXY_BIN"
_GO_INSTALL_TIMEOUT_S = 600


@dataclass(frozen=True)
class KafkaProxyBinary:
    """The kafka-proxy to run, or why there is none (``path`` None, ``reason`` says)."""

    path: Path | None
    #: How it was found ("go install v0.4.3", "--kafka-proxy-bin", ...), or why not.
    origin: str
    #: What `kafka-proxy version` printed ("" when there is no binary).
    version: str = ""


def _version(binary: Path) -> str:
    try:
        done = subprocess.run(
            [str(binary), "version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        return f"unknown ({exc})"
    return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else ""


def _go_install(gobin: Path) -> str | None:
    """Install the module into ``gobin``; None on success, else why it failed (one line)."""
    go = shutil.which("go")
    if go is None:
        return "go is not on PATH"
    gobin.mkdir(parents=True, exist_ok=True)
    target = f"{KAFKA_PROXY_MODULE}@{KAFKA_PROXY_VERSION}"
    try:
        done = subprocess.run(
            [go, "install", target],
            capture_output=True,
            text=True,
            timeout=_GO_INSTALL_TIMEOUT_S,
            check=False,
            env={**os.environ, "GOBIN": str(gobin)},
        )
    except subprocess.TimeoutExpired:
        return f"`go install {target}` took over {_GO_INSTALL_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    # go names the module at every level and the URL it read ("go: M@V: M@V: reading URL:
    # 403 Forbidden", then "server response: ..."): keep the status and the server's words.
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    said = " ".join(line.rpartition(": ")[2] if "reading " in line else line for line in lines[-2:])
    return f"`go install {target}` failed: {said}"


def find_kafka_proxy(given: str | None = None) -> KafkaProxyBinary:
    """kafka-proxy from the cache or `go install`, else ``given`` or $KAFKA_PROXY_BIN."""
    gobin = cache_root() / f"kafka-proxy-{KAFKA_PROXY_VERSION}" / "bin"
    installed = gobin / "kafka-proxy"
    failure = None
    if not installed.exists():
        failure = _go_install(gobin)
    if installed.exists():
        return KafkaProxyBinary(installed, f"go install {KAFKA_PROXY_VERSION}", _version(installed))
    explicit, origin = (
        (given, "--kafka-proxy-bin") if given else (os.environ.get(BINARY_ENV), BINARY_ENV)
    )
    if not explicit:
        return KafkaProxyBinary(
            None, f"{failure}; no binary given (--kafka-proxy-bin PATH or ${BINARY_ENV})"
        )
    path = Path(explicit).expanduser().resolve()
    if not os.access(path, os.X_OK):
        return KafkaProxyBinary(None, f"{failure}; {origin} {path} is not an executable")
    return KafkaProxyBinary(path, f"{origin} {path}", _version(path))


@contextlib.contextmanager
def running_kafka_proxy(
    binary: Path, upstreams: Sequence[str], tls: Pki | None = None
) -> Iterator[tuple[int, int]]:
    """kafka-proxy with one local listener per address in ``upstreams`` (every broker, in
    node-id order); yields the first listener's port (the bootstrap) and its PID. With
    ``tls``, clients get TLS (``tls.server``) and the brokers are reached over TLS (``tls.ca``)."""
    port = free_port_run(len(upstreams))
    command = [str(binary), "server", "--dynamic-listeners-disable", "--http-disable",
               "--producer-acks-0-disabled", "--log-level", "warning"]  # fmt: skip
    for offset, upstream in enumerate(upstreams):
        local = f"127.0.0.1:{port + offset}"
        command += ["--bootstrap-server-mapping", f"{upstream},{local}"]
    if tls is not None:
        command += [
            "--proxy-listener-tls-enable",
            "--proxy-listener-cert-file", str(tls.server.cert),
            "--proxy-listener-key-file", str(tls.server.key),
            "--tls-enable",
            "--tls-ca-chain-cert-file", str(tls.ca),
        ]  # fmt: skip
    with running_process(command, port) as pid:
        yield port, pid
