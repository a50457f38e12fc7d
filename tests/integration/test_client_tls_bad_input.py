"""Issue 16, bad input on the client side of TLS listeners, and certificate rotation.

Each bad client (a stalled or half-sent handshake, an expired or untrusted certificate on a
mutual-TLS listener) must cost exactly that connection: closed with one log line naming the
reason, the proxy up, a client already connected and a new one unaffected. Rotation: after
SIGHUP with new files new handshakes get the new certificate while an open connection keeps
working; files that do not load leave the old certificate in place.

Real proxy processes before a real Tansu (plaintext upstream: the client side is under test);
raw TLS sockets from the standard ssl module, so exactly the bytes under test are sent. The
failure classes behind the metric are checked in-process on proxy.security.tls.ServerTls, whose
``on_failure`` hook feeds purgatory_proxy_tls_handshake_failures_total.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from cryptography import x509

from proxy.security.security_config import ClientTlsSection
from proxy.security.tls import ServerTls, TlsHandshakeFailed
from testbed.certs import CertFiles, Pki, make_pki
from testbed.processes import Broker, free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.integration._kafka_raw import metric_value
from tests.support.raw_tls_client import RawKafka, closed_by_peer, log_lines_about

FRAME_TIMEOUT_MS = 1500


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_env(cert: CertFiles, client_ca: Path | None = None, metrics: str = "") -> dict[str, str]:
    env = {
        "PURGATORY_PROXY_METRICS__LISTEN": metrics,
        "PURGATORY_PROXY_PROXY__TLS__CERT_FILE": str(cert.cert),
        "PURGATORY_PROXY_PROXY__TLS__KEY_FILE": str(cert.key),
        "PURGATORY_PROXY_CONNECTIONS__FRAME_TIMEOUT_MS": str(FRAME_TIMEOUT_MS),
    }
    if client_ca is not None:
        env["PURGATORY_PROXY_PROXY__TLS__CLIENT_CA_FILE"] = str(client_ca)
    return env


@dataclass(frozen=True)
class Served:
    """A running proxy and the address of its /metrics."""

    proxy: ProxyProcess
    metrics: str

    def failures(self, reason: str) -> float:
        return metric_value(
            self.metrics,
            "purgatory_proxy_tls_handshake_failures_total",
            listener="bootstrap",
            reason=reason,
        )


@pytest.fixture(scope="module")
def tls_proxy(kafka_broker: Broker, pki: Pki) -> Iterator[Served]:
    metrics = f"127.0.0.1:{free_port()}"
    env = _tls_env(pki.server, metrics=metrics)
    with running_proxy(kafka_broker.bootstrap, env=env) as proxy:
        yield Served(proxy, metrics)


@pytest.fixture(scope="module")
def mtls_proxy(kafka_broker: Broker, pki: Pki) -> Iterator[Served]:
    metrics = f"127.0.0.1:{free_port()}"
    env = _tls_env(pki.server, client_ca=pki.ca, metrics=metrics)
    with running_proxy(kafka_broker.bootstrap, env=env) as proxy:
        yield Served(proxy, metrics)


def _tls_connect(proxy: ProxyProcess, pki: Pki, client: CertFiles | None = None) -> RawKafka:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    raw = socket.create_connection((proxy.host, proxy.port), timeout=20)
    return RawKafka(context.wrap_socket(raw, server_hostname="127.0.0.1"))


def _client_hello() -> bytes:
    """The first flight of a real TLS client (a complete ClientHello record)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _one_close_line(proxy: ProxyProcess, port: int, reason: str) -> str:
    """Wait for the close line of the connection from ``port``; it must be its only line."""
    found = proxy.wait_for_log(
        rf"closed client connection from 127\.0\.0\.1:{port}: TLS handshake {reason}",
        timeout_s=FRAME_TIMEOUT_MS / 1000 + 15,
    )
    assert len(log_lines_about(proxy.log_text(), port)) == 1
    return found.group(0)


@pytest.mark.parametrize("sent", ["nothing", "half a ClientHello"])
def test_a_stalled_handshake_is_closed_at_the_frame_timeout(
    sent: str, tls_proxy: Served, pki: Pki
) -> None:
    served, proxy = tls_proxy, tls_proxy.proxy
    timeouts = served.failures("timeout")
    bystander = _tls_connect(proxy, pki)
    with bystander.sock, socket.create_connection((proxy.host, proxy.port)) as stall:
        assert bystander.api_versions().error_code == 0
        if sent != "nothing":
            hello = _client_hello()
            stall.sendall(hello[: len(hello) // 2])
        stall.settimeout(FRAME_TIMEOUT_MS / 1000 + 15)
        assert closed_by_peer(stall)
        _one_close_line(proxy, stall.getsockname()[1], "not complete within 1.5 s")
        assert served.failures("timeout") == timeouts + 1
        assert proxy.alive()
        assert bystander.api_versions().error_code == 0
    with _tls_connect(proxy, pki).sock as fresh:
        assert RawKafka(fresh).api_versions().error_code == 0


@pytest.mark.parametrize(
    ("client", "reason"),
    [
        ("expired_client", "certificate has expired"),
        ("untrusted_client", "unable to get local issuer certificate"),
        (None, "PEER_DID_NOT_RETURN_A_CERTIFICATE|peer did not return a certificate"),
    ],
)
def test_mutual_tls_refuses_bad_client_certificates(
    client: str | None, reason: str, mtls_proxy: Served, pki: Pki
) -> None:
    served, proxy = mtls_proxy, mtls_proxy.proxy
    refusals = served.failures("client_certificate")
    good = _tls_connect(proxy, pki, pki.client)
    with good.sock:
        assert good.api_versions().error_code == 0
        bad: RawKafka | None = None
        try:
            bad = _tls_connect(proxy, pki, getattr(pki, client) if client else None)
            # TLS 1.3: the client's side completes first; the refusal arrives at the read.
            bad.sock.sendall(b"\0\0\0\0")
            refused = closed_by_peer(bad.sock)
            port = bad.local_port
        except (ssl.SSLError, ConnectionError):
            refused = True
            port = 0
        finally:
            if bad is not None:
                bad.sock.close()
        assert refused
        line = proxy.wait_for_log(
            rf"closed client connection from 127\.0\.0\.1:(\d+): TLS handshake failed: .*({reason})"
        )
        if port:
            assert line.group(1) == str(port)
            assert len(log_lines_about(proxy.log_text(), port)) == 1
        assert served.failures("client_certificate") == refusals + 1
        assert proxy.alive()
        assert good.api_versions().error_code == 0


def _serial(sock: ssl.SSLSocket) -> int:
    der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _file_serial(cert: CertFiles) -> int:
    return x509.load_pem_x509_certificate(cert.cert.read_bytes()).serial_number


def test_sighup_rotates_the_certificate_for_new_handshakes_only(
    kafka_broker: Broker, pki: Pki, tmp_path: Path
) -> None:
    live = CertFiles(tmp_path / "live.pem", tmp_path / "live.key")
    shutil.copy(pki.server.cert, live.cert)
    shutil.copy(pki.server.key, live.key)
    with running_proxy(kafka_broker.bootstrap, env=_tls_env(live)) as proxy:
        before = _tls_connect(proxy, pki)
        with before.sock:
            assert _serial(before.sock) == _file_serial(pki.server)
            assert before.api_versions().error_code == 0
            # Files that do not load: the old certificate stays, one error line says why.
            live.cert.write_text("not a certificate\n")
            os.kill(proxy.pid, signal.SIGHUP)
            proxy.wait_for_log("TLS certificates not reloaded, keeping the previous ones")
            with _tls_connect(proxy, pki).sock as still_old:
                assert _serial(still_old) == _file_serial(pki.server)
            # The rotated pair: new handshakes see it, the open connection carries on.
            shutil.copy(pki.rotated.key, live.key)
            shutil.copy(pki.rotated.cert, live.cert)
            os.kill(proxy.pid, signal.SIGHUP)
            proxy.wait_for_log("TLS certificates reloaded from")
            after = _tls_connect(proxy, pki)
            with after.sock:
                assert _serial(after.sock) == _file_serial(pki.rotated)
                assert after.api_versions().error_code == 0
            assert _serial(before.sock) == _file_serial(pki.server)
            assert before.api_versions().error_code == 0
        assert "closed client connection" not in proxy.log_text()


# -- the failure classes behind purgatory_proxy_tls_handshake_failures_total --------------


async def _handshake_classes(pki: Pki, client_ca: bool, send: bytes | None) -> list[str]:
    """Accept one connection on a real loopback listener with ServerTls; the classes seen."""
    section = ClientTlsSection(
        cert_file=str(pki.server.cert),
        key_file=str(pki.server.key),
        client_ca_file=str(pki.ca) if client_ca else "",
    )
    seen: list[tuple[str, str]] = []
    server = ServerTls(section, on_failure=lambda listener, reason: seen.append((listener, reason)))
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:

        async def client() -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            if send is None:  # a TLS client without a certificate
                context = ssl.create_default_context(cafile=str(pki.ca))
                tls = trio.SSLStream(stream, context, server_hostname="127.0.0.1")
                try:
                    await tls.do_handshake()
                    await tls.receive_some(1)
                except trio.BrokenResourceError:
                    pass
                await trio.aclose_forcefully(tls)
                return
            if send:
                await stream.send_all(send)
                await stream.aclose()  # then EOF, or silence when nothing was sent
            else:
                await trio.sleep(1)
                await stream.aclose()

        nursery.start_soon(client)
        accepted = await listeners[0].accept()
        with pytest.raises(TlsHandshakeFailed):
            await server.accept(accepted, timeout_s=0.5 if send == b"" else 5, listener="bootstrap")
        await trio.aclose_forcefully(accepted)
        await listeners[0].aclose()
    assert [listener for listener, _ in seen] == ["bootstrap"]
    return [reason for _, reason in seen]


@pytest.mark.parametrize(
    ("client_ca", "send", "expected"),
    [
        (False, b"", "timeout"),
        (False, b"\0\0\0\x0e\0\x12\0\0\0\0\0\x01\0\x04test", "not_tls"),
        (False, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not_tls"),
        (True, None, "client_certificate"),
    ],
)
def test_failed_handshakes_are_counted_by_class(
    client_ca: bool, send: bytes | None, expected: str, pki: Pki
) -> None:
    assert trio.run(_handshake_classes, pki, client_ca, send) == [expected]


def test_half_a_client_hello_then_eof_counts_as_closed(pki: Pki) -> None:
    hello = _client_hello()
    assert trio.run(_handshake_classes, pki, False, hello[: len(hello) // 2]) == ["closed"]
