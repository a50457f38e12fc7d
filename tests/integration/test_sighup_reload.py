"""SIGHUP (issue 29 item 5): harmless without TLS; with TLS it re-reads the listeners' client CA
and revocation list (``[proxy.tls] crl_file``); a reload that fails keeps the previous files,
is counted in purgatory_proxy_tls_reloads_total{result="failed"} and logged in one line.

Real proxy processes before the suite's broker; raw TLS sockets from the standard ssl module,
so a refused handshake is seen exactly. The upstream side of SIGHUP needs a TLS broker and is
in tests/integration/test_kafka_security.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.certs import CertFiles, Pki, make_pki, write_crl
from testbed.processes import Broker, free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.integration._kafka_raw import metric_value
from tests.support.raw_tls_client import RawKafka
from wire.apis import ApiKey
from wire.messages import ApiVersionsRequest

RELOADS = "purgatory_proxy_tls_reloads_total"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def metrics() -> str:
    return f"127.0.0.1:{free_port()}"


def _connect(proxy: ProxyProcess) -> RawKafka:
    return RawKafka(socket.create_connection((proxy.host, proxy.port), timeout=20))


def _tls_connect(proxy: ProxyProcess, pki: Pki, client: CertFiles) -> RawKafka:
    """A TLS connection with ``client``'s certificate; raises if the handshake is refused."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(client.cert, client.key)
    raw = socket.create_connection((proxy.host, proxy.port), timeout=20)
    return RawKafka(context.wrap_socket(raw, server_hostname="127.0.0.1"))


def _served(proxy: ProxyProcess, pki: Pki, client: CertFiles) -> bool:
    """Whether a new connection with ``client``'s certificate gets an ApiVersions answer.
    Under TLS 1.3 a refused client certificate shows at the first read, not the handshake."""
    try:
        connection = _tls_connect(proxy, pki, client)
    except (ssl.SSLError, ConnectionError):
        return False
    with connection.sock:
        try:
            connection.send(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="raw"))
        except (ssl.SSLError, ConnectionError):
            return False
        return connection.read_frame() is not None


def _sighup(proxy: ProxyProcess, log_line: str, *, seen_before: int) -> None:
    """Send SIGHUP and wait for the ``seen_before + 1``-th ``log_line`` (a regex)."""
    os.kill(proxy.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while len(re.findall(log_line, proxy.log_text())) <= seen_before:
        assert time.monotonic() < deadline, f"no {log_line!r} after SIGHUP:\n{proxy.log_text()}"
        assert proxy.alive(), f"the proxy died on SIGHUP:\n{proxy.log_text()}"
        time.sleep(0.05)


def test_sighup_without_tls_is_harmless(kafka_broker: Broker, metrics: str) -> None:
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics) as proxy:
        before = _connect(proxy)
        with before.sock:
            assert before.api_versions().error_code == 0
            for count in range(2):
                _sighup(proxy, "received SIGHUP: no TLS files to reload", seen_before=count)
            assert before.api_versions().error_code == 0  # an open connection carries on
            with _connect(proxy).sock as fresh:
                assert RawKafka(fresh).api_versions().error_code == 0
            assert metric_value(metrics, RELOADS) == 0  # nothing to reload, nothing counted
        # Still the proxy's own orderly stop: exit 0 after the drain, not 129 (killed).
        assert proxy.stop() == 0
        assert "draining connections" in proxy.log_text()


def test_sighup_rereads_the_client_ca(
    kafka_broker: Broker, pki: Pki, metrics: str, tmp_path: Path
) -> None:
    client_ca = tmp_path / "client-ca.pem"
    shutil.copy(pki.other_ca, client_ca)  # trusts untrusted_client, not client
    env = {
        "PURGATORY_PROXY_PROXY__TLS__CERT_FILE": str(pki.server.cert),
        "PURGATORY_PROXY_PROXY__TLS__KEY_FILE": str(pki.server.key),
        "PURGATORY_PROXY_PROXY__TLS__CLIENT_CA_FILE": str(client_ca),
    }
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics, env=env) as proxy:
        assert _served(proxy, pki, pki.untrusted_client)
        assert not _served(proxy, pki, pki.client)
        shutil.copy(pki.ca, client_ca)
        _sighup(proxy, "TLS certificates reloaded from", seen_before=0)
        assert _served(proxy, pki, pki.client)
        assert not _served(proxy, pki, pki.untrusted_client)
        assert metric_value(metrics, RELOADS, side="listeners", result="ok") == 1


@pytest.fixture
def crl_proxy(
    kafka_broker: Broker, pki: Pki, metrics: str, tmp_path: Path
) -> Iterator[tuple[ProxyProcess, Path]]:
    crl = tmp_path / "clients.crl.pem"
    write_crl(pki, [], crl)
    env = {
        "PURGATORY_PROXY_PROXY__TLS__CERT_FILE": str(pki.server.cert),
        "PURGATORY_PROXY_PROXY__TLS__KEY_FILE": str(pki.server.key),
        "PURGATORY_PROXY_PROXY__TLS__CLIENT_CA_FILE": str(pki.ca),
        "PURGATORY_PROXY_PROXY__TLS__CRL_FILE": str(crl),
    }
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics, env=env) as proxy:
        yield proxy, crl


def test_a_revoked_client_certificate_is_refused_after_sighup(
    crl_proxy: tuple[ProxyProcess, Path], pki: Pki, metrics: str
) -> None:
    proxy, crl = crl_proxy
    assert _served(proxy, pki, pki.client)
    assert _served(proxy, pki, pki.second_client)
    held = _tls_connect(proxy, pki, pki.second_client)  # opened before the revocation
    with held.sock:
        assert held.api_versions().error_code == 0
        write_crl(pki, [pki.second_client], crl)
        _sighup(proxy, r"TLS certificates reloaded from \S+ and CRL", seen_before=0)
        assert not _served(proxy, pki, pki.second_client)
        proxy.wait_for_log(r"closed client connection from .*: TLS handshake failed: .*revoked")
        assert _served(proxy, pki, pki.client)
        # Open connections keep the context they were accepted with, as on rotation.
        assert held.api_versions().error_code == 0
        # A list that does not load: the previous one stays, counted and logged once.
        crl.write_text("not a revocation list\n")
        _sighup(proxy, "TLS certificates not reloaded, keeping the previous ones", seen_before=0)
        assert metric_value(metrics, RELOADS, side="listeners", result="failed") == 1
        assert "proxy.tls.crl_file" in proxy.log_text()
        assert not _served(proxy, pki, pki.second_client)
        assert _served(proxy, pki, pki.client)
    assert metric_value(metrics, RELOADS, side="listeners", result="ok") == 1
    assert proxy.alive()


def test_an_expired_revocation_list_refuses_every_client(
    crl_proxy: tuple[ProxyProcess, Path], pki: Pki
) -> None:
    """OpenSSL's rule, documented in docs/security.md: a CRL past its nextUpdate is no
    proof that a certificate is not revoked, so nobody gets in until a fresh one is loaded."""
    proxy, crl = crl_proxy
    assert _served(proxy, pki, pki.client)
    write_crl(pki, [], crl, expired=True)
    _sighup(proxy, r"TLS certificates reloaded from \S+ and CRL", seen_before=0)
    assert not _served(proxy, pki, pki.client)
    proxy.wait_for_log(r"TLS handshake failed: .*CRL has expired")
    write_crl(pki, [], crl)
    _sighup(proxy, r"TLS certificates reloaded from \S+ and CRL", seen_before=1)
    assert _served(proxy, pki, pki.client)
