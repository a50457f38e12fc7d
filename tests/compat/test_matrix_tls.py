"""The client matrix over TLS and SASL (issue 16) on Apache Kafka: client TLS, client mutual TLS,
upstream TLS + SASL with the proxy's identity, and passthrough (each client's own SASL login).

Every client of tests/compat makes the same round trip as in test_matrix_proxy.py, checked
against a direct reader of the broker:

- ``client-tls``: the proxy's listeners serve TLS; clients verify its certificate (CA and
  hostname 127.0.0.1); upstream is the session's plaintext broker;
- ``client-mtls``: the same, and the proxy requires a client certificate signed by the CA;
- ``upstream-tls-sasl``: clients in plaintext; the proxy reaches a Kafka node's SASL_SSL
  listener (client certificates required, the testbed's PEM CA) as ``alice`` with
  SCRAM-SHA-512, its own identity (client_auth = none);
- ``upstream-tls-sasl-passthrough``: every client logs in to the proxy's plaintext listener as
  ``alice`` with SCRAM-SHA-512 (tests/compat/_tls.ClientSasl, translated per client family);
  the proxy (client_auth = passthrough) forwards that login on the client's own upstream
  connection to the same SASL_SSL listener, and uses its own identity ``bob`` for metadata
  and offsets.

The secured node runs the StandardAuthorizer: alice may do anything with topics and groups,
bob may only describe them (what docs/security.md says the proxy identity needs in
passthrough), admin is the super user the trusted reader logs in as (SASL_PLAINTEXT). Kafka's
own request log says who did what: with the proxy's identity the cluster saw alice only;
in passthrough every Fetch answer that carried records went to alice, and bob never fetched.

One proxy per variant for the whole module. 300 records per round trip: the point is the
secured path for every client, not volume (the plaintext matrix does 1,000).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import trio
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourceType,
)

from testbed.certs import Pki, make_pki
from testbed.kafka_cluster import USERS, KafkaCluster, running_kafka
from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat import CLIENTS, roundtrip_and_check
from tests.compat._tls import ClientSasl, ClientTls, kafka_python_options

VARIANTS = ("client-tls", "client-mtls", "upstream-tls-sasl", "upstream-tls-sasl-passthrough")
ADMIN = ClientSasl("admin", USERS["admin"], "SCRAM-SHA-512")
ALICE = ClientSasl("alice", USERS["alice"], "SCRAM-SHA-512")
BOB = ClientSasl("bob", USERS["bob"], "SCRAM-SHA-512")


@dataclass(frozen=True)
class Secured:
    proxy: ProxyProcess
    direct: str
    tls: ClientTls | None
    #: The secured Kafka node (upstream variants); None = the session's plaintext broker.
    cluster: KafkaCluster | None = None
    sasl: ClientSasl | None = None
    direct_sasl: ClientSasl | None = None


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _grant(cluster: KafkaCluster) -> None:
    """alice: everything on every topic and group; bob: describe them (the proxy identity)."""
    admin = KafkaAdminClient(
        bootstrap_servers=cluster.bootstrap("SASL_PLAINTEXT"),
        **kafka_python_options(None, ADMIN),  # type: ignore[arg-type]
    )
    try:
        grants: list[ACL] = []
        for resource in (ResourceType.TOPIC, ResourceType.GROUP):
            pattern = ResourcePattern(resource, "*", ACLResourcePatternType.LITERAL)
            grants.append(
                ACL("User:alice", "*", ACLOperation.ALL, ACLPermissionType.ALLOW, pattern)
            )
            grants.append(
                ACL("User:bob", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW, pattern)
            )
        created = admin.create_acls(grants)
        assert not created["failed"], created
    finally:
        admin.close()


@pytest.fixture(scope="module")
def secure_kafka() -> Iterator[KafkaCluster]:
    with running_kafka(
        1,
        listeners=("SASL_PLAINTEXT", "SASL_SSL"),
        ssl_client_auth="required",
        authorizer=True,
        request_log=True,
    ) as cluster:
        _grant(cluster)
        yield cluster


def _upstream_env(cluster: KafkaCluster, identity: ClientSasl) -> dict[str, str]:
    assert cluster.pki is not None
    return {
        "PURGATORY_PROXY_UPSTREAM__TLS__ENABLED": "true",
        "PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(cluster.pki.ca),
        "PURGATORY_PROXY_UPSTREAM__TLS__CERT_FILE": str(cluster.pki.client.cert),
        "PURGATORY_PROXY_UPSTREAM__TLS__KEY_FILE": str(cluster.pki.client.key),
        "PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM": identity.mechanism,
        "PURGATORY_PROXY_UPSTREAM__SASL__USERNAME": identity.username,
        "PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD": identity.password,
    }


@pytest.fixture(scope="module", params=VARIANTS)
def secured(request: pytest.FixtureRequest, kafka_broker: Broker, pki: Pki) -> Iterator[Secured]:
    variant: str = request.param
    if variant.startswith("upstream-tls-sasl"):
        cluster: KafkaCluster = request.getfixturevalue("secure_kafka")
        passthrough = variant.endswith("passthrough")
        env = _upstream_env(cluster, BOB if passthrough else ALICE)
        if passthrough:
            env["PURGATORY_PROXY_PROXY__CLIENT_AUTH"] = "passthrough"
        direct = cluster.bootstrap("SASL_PLAINTEXT")
        with running_proxy(cluster.bootstrap("SASL_SSL"), env=env) as proxy:
            yield Secured(proxy, direct, None, cluster, ALICE if passthrough else None, ADMIN)
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
        yield Secured(proxy, kafka_broker.bootstrap, tls)


@pytest.mark.parametrize("client", CLIENTS)
async def test_roundtrip_over_tls_matches_direct(secured: Secured, client: str) -> None:
    cluster = secured.cluster
    seen_before = len(_secured_requests(cluster)) if cluster is not None else 0
    result, problems = await trio.to_thread.run_sync(
        lambda: roundtrip_and_check(
            client,
            secured.proxy.bootstrap,
            secured.direct,
            n=300,
            tls=secured.tls,
            sasl=secured.sasl,
            direct_sasl=secured.direct_sasl,
        )
    )
    print(f"{client}: {result.elapsed_s:.2f} s, settings {result.report.settings}")
    assert problems == []
    assert len(result.report.consumed) == 300
    assert secured.proxy.alive()
    # Every client's handshakes succeeded (a client closing mid-answer may still be logged).
    assert "TLS handshake" not in secured.proxy.log_text()
    if cluster is not None:
        requests = _secured_requests(cluster)[seen_before:]
        assert requests, "nothing reached the secured listener"
        if secured.sasl is None:
            # The cluster saw the proxy's identity only.
            assert {entry["principal"] for entry in requests} == {"User:alice"}
        else:
            _check_passthrough(requests)


def _secured_requests(cluster: KafkaCluster | None) -> list[dict[str, Any]]:
    """What the secured node completed on its SASL_SSL listener (the proxy's side)."""
    assert cluster is not None
    entries = cluster.requests(cluster.nodes[0].node_id)
    return [entry for entry in entries if entry["listener"] == "SASL_SSL"]


def _record_bytes(entry: dict[str, Any]) -> int:
    response = entry.get("response") or {}
    return sum(
        partition.get("recordsSizeInBytes", 0)
        for topic in response.get("responses", [])
        for partition in topic.get("partitions", [])
    )


def _check_passthrough(requests: list[dict[str, Any]]) -> None:
    """Records went to alice's own connections only; the proxy's identity never fetched."""
    assert {entry["principal"] for entry in requests} <= {"User:alice", "User:bob"}
    fetches = [entry for entry in requests if entry["requestHeader"]["requestApiKey"] == 1]
    with_records = {entry["principal"] for entry in fetches if _record_bytes(entry)}
    assert with_records == {"User:alice"}, "no Fetch answer carried records to alice"
    assert [entry for entry in fetches if entry["principal"] == "User:bob"] == []
