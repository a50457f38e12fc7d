"""The client matrix over TLS and SASL (issue 16): client TLS, client mutual TLS, upstream TLS +
SASL with the proxy's identity, and passthrough (each client's own SASL login to the cluster).

Every client of tests/compat (aiokafka, kafka-python, confluent-kafka, kcat, Java, sarama)
makes the same round trip as in test_matrix_proxy.py, checked against a direct reader of the
broker (sarama without a consumer group, see _matrix.GROUPLESS):

- ``client-tls``: the proxy's listeners serve TLS; clients verify its certificate (CA and
  hostname 127.0.0.1);
- ``client-mtls``: the same, and the proxy requires a client certificate signed by the CA;
- ``upstream-tls-sasl``: clients in plaintext; the proxy reaches the cluster through
  testbed/sasl_front.SecureFront (TLS requiring the proxy's certificate, then
  SCRAM-SHA-512) before the real Tansu, with its own identity (client_auth = none);
- ``upstream-tls-sasl-passthrough``: every client logs in to the proxy's plaintext listener as
  ``alice`` with SCRAM-SHA-512 (tests/compat/_tls.ClientSasl, translated per client family);
  the proxy (client_auth = passthrough) forwards that login on the client's own upstream
  connection through the same TLS front, and uses its own identity ``proxy`` (upstream TLS +
  SCRAM-SHA-512) only for metadata and offsets. The front denies ``proxy`` every Fetch
  (TOPIC_AUTHORIZATION_FAILED) and audits each connection, so the check adds: every Fetch
  answer that carried records went to an ``alice`` connection, and the proxy's identity never
  sent a Fetch.

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
from tests.compat._tls import ClientSasl, ClientTls
from wire.apis import ApiKey

VARIANTS = ("client-tls", "client-mtls", "upstream-tls-sasl", "upstream-tls-sasl-passthrough")
PASSWORD = "compat-scram-password"
ALICE = ClientSasl("alice", "compat-alice-password", "SCRAM-SHA-512")


@dataclass(frozen=True)
class Secured:
    proxy: ProxyProcess
    tls: ClientTls | None
    front: SecureFront | None = None
    sasl: ClientSasl | None = None


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module", params=VARIANTS)
def secured(request: pytest.FixtureRequest, kafka_broker: Broker, pki: Pki) -> Iterator[Secured]:
    variant: str = request.param
    if variant.startswith("upstream-tls-sasl"):
        passthrough = variant.endswith("passthrough")
        policy = SaslPolicy(
            password=PASSWORD,
            mechanisms=("SCRAM-SHA-512",),
            users={ALICE.username: ALICE.password} if passthrough else {},
            # Passthrough: records may reach clients only through their own login.
            fetch_denied=frozenset({"proxy"}) if passthrough else frozenset(),
        )
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
        if passthrough:
            env["PURGATORY_PROXY_PROXY__CLIENT_AUTH"] = "passthrough"
        try:
            with running_proxy(front.bootstrap, env=env) as proxy:
                yield Secured(proxy, None, front, ALICE if passthrough else None)
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
            client,
            secured.proxy.bootstrap,
            kafka_broker.bootstrap,
            n=300,
            tls=secured.tls,
            sasl=secured.sasl,
        )
    )
    print(f"{client}: {result.elapsed_s:.2f} s, settings {result.report.settings}")
    assert problems == []
    assert len(result.report.consumed) == 300
    assert secured.proxy.alive()
    # Every client's handshakes succeeded (a client closing mid-answer may still be logged).
    assert "TLS handshake" not in secured.proxy.log_text()
    if secured.front is not None:
        # Every connection authenticated with SCRAM-SHA-512, and the front saw no broken frame.
        assert secured.front.sasl is not None
        assert {mechanism for mechanism, _ in secured.front.sasl.log} == {"SCRAM-SHA-512"}
        assert secured.front.errors == []
        connections = secured.front.audit.connections()
        if secured.sasl is None:
            # The cluster saw the proxy's identity only.
            assert {c.username for c in connections} <= {"proxy", None}
        else:
            _check_passthrough_audit(secured.front)


def _check_passthrough_audit(front: SecureFront) -> None:
    """Records went to alice's own connections only; the proxy's identity never fetched."""
    connections = front.audit.connections()
    assert {c.username for c in connections} <= {"alice", "proxy", None}
    with_records = [
        (c.number, c.username) for c in connections for entry in c.requests if entry.record_bytes
    ]
    assert with_records, "no Fetch answer carried records: the round trip did not fetch"
    assert {user for _, user in with_records} == {"alice"}
    proxy_fetches = [
        (c.number, entry)
        for c in front.audit.by_user("proxy")
        for entry in c.requests
        if entry.api_key == ApiKey.FETCH
    ]
    assert proxy_fetches == []
