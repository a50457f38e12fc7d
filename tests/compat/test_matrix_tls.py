"""The client matrix over TLS (issue 16): client TLS, client mutual TLS, and upstream TLS + SASL.

Every client of tests/compat (aiokafka, kafka-python, confluent-kafka, kcat, Java, sarama)
makes the same round trip as in test_matrix_proxy.py, checked against a direct reader of the
broker (sarama without a consumer group, see _matrix.GROUPLESS):

- ``client-tls``: the proxy's listeners serve TLS; clients verify its certificate (CA and
  hostname 127.0.0.1);
- ``client-mtls``: the same, and the proxy requires a client certificate signed by the CA;
- ``upstream-tls-sasl``: clients in plaintext; the proxy reaches the cluster through
  testbed/sasl_front.SecureFront (TLS requiring the proxy's certificate, then
  SCRAM-SHA-512) before the real Tansu, with its own identity (client_auth = none).

One proxy (and front) per variant for the whole module. 300 records per round trip: the
point is the secured path for every client, not volume (the plaintext matrix does 1,000).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import trio

from testbed.certs import Pki, make_pki
from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.sasl_front import SaslPolicy, SecureFront
from tests.compat import CLIENTS, roundtrip_and_check
from tests.compat._tls import ClientTls

VARIANTS = ("client-tls", "client-mtls", "upstream-tls-sasl")
PASSWORD = "compat-scram-password"


@dataclass(frozen=True)
class Secured:
    proxy: ProxyProcess
    tls: ClientTls | None
    front: SecureFront | None = None


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module", params=VARIANTS)
def secured(request: pytest.FixtureRequest, kafka_broker: Broker, pki: Pki) -> Iterator[Secured]:
    variant: str = request.param
    if variant == "upstream-tls-sasl":
        policy = SaslPolicy(password=PASSWORD, mechanisms=("SCRAM-SHA-512",))
        front = SecureFront(
            (kafka_broker.host, kafka_broker.port),
            tls=pki.server_context(require_client_cert=True),
            sasl=policy,
        )
        front.start()
        env = {
            "PURGATORY_PROXY_UPSTREAM__TLS__ENABLED": "true",
            "PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(pki.ca),
            "PURGATORY_PROXY_UPSTREAM__TLS__CERT_FILE": str(pki.client.cert),
            "PURGATORY_PROXY_UPSTREAM__TLS__KEY_FILE": str(pki.client.key),
            "PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM": "SCRAM-SHA-512",
            "PURGATORY_PROXY_UPSTREAM__SASL__USERNAME": "proxy",
            "PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD": PASSWORD,
        }
        try:
            with running_proxy(front.bootstrap, env=env) as proxy:
                yield Secured(proxy, None, front)
        finally:
            front.stop()
        return
    env = {
        "PURGATORY_PROXY_PROXY__TLS__CERT_FILE": str(pki.server.cert),
        "PURGATORY_PROXY_PROXY__TLS__KEY_FILE": str(pki.server.key),
    }
    tls = ClientTls(str(pki.ca))
    if variant == "client-mtls":
        env["PURGATORY_PROXY_PROXY__TLS__CLIENT_CA_FILE"] = str(pki.ca)
        tls = ClientTls(str(pki.ca), str(pki.client.cert), str(pki.client.key))
    with running_proxy(kafka_broker.bootstrap, env=env) as proxy:
        yield Secured(proxy, tls)


@pytest.mark.parametrize("client", CLIENTS)
async def test_roundtrip_over_tls_matches_direct(
    kafka_broker: Broker, secured: Secured, client: str
) -> None:
    result, problems = await trio.to_thread.run_sync(
        lambda: roundtrip_and_check(
            client, secured.proxy.bootstrap, kafka_broker.bootstrap, n=300, tls=secured.tls
        )
    )
    print(f"{client}: {result.elapsed_s:.2f} s, settings {result.report.settings}")
    assert problems == []
    assert len(result.report.consumed) == 300
    assert secured.proxy.alive()
    # Every client's handshakes succeeded (a client closing mid-answer may still be logged).
    assert "TLS handshake" not in secured.proxy.log_text()
    if secured.front is not None:
        # The cluster saw the proxy's identity only, and every connection authenticated.
        assert secured.front.sasl is not None
        assert {mechanism for mechanism, _ in secured.front.sasl.log} == {"SCRAM-SHA-512"}
        assert secured.front.errors == []
