"""The proxy's own identity against Apache Kafka's security (issue 29 item 6, first half).

The cluster is the session's ``secure_kafka`` (tests/support/secure_kafka.py): Kafka's own
SSL listener (it requires the proxy's client certificate), SASL_SSL and SASL_PLAINTEXT with
PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (Kafka's unsecured JWS), and on SASL_PLAINTEXT a
session lifetime (KIP-368): the broker closes a connection that sends a request after its
session expired. No test front: the broker checks the certificates and runs the exchanges.
Clients are real kafka-python clients making a round trip through the proxy (produce with
acks=all, then consume in a group).

These tests moved here from a TLS + SASL front before Tansu (test_tls_sasl.py): the round trips
per mechanism, client mutual TLS, re-authentication, the refused password and the plaintext
client on a TLS port. Bad upstream certificates are in test_kafka_bad_certs.py.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import ssl
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from testbed.kafka_cluster import USERS, KafkaCluster
from testbed.processes import free_port
from testbed.proxy_process import running_proxy
from testbed.topics import create_topic
from tests.integration._kafka_raw import metric_value
from tests.support.group_round_trip import GROUP_TIMEOUTS, group_round_trip
from tests.support.raw_tls_client import RawKafka
from tests.support.secure_kafka import (
    REAUTH_MS,
    expired_channels,
    proxy_env,
    readyz_saying,
    sasl_options,
)
from wire.apis import ApiKey
from wire.messages import MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest


def _tls_client(cluster: KafkaCluster, *, client_cert: bool = False) -> dict[str, object]:
    """kafka-python options for a client of the proxy's TLS listeners (its CA, 127.0.0.1)."""
    assert cluster.pki is not None
    options: dict[str, object] = {
        "security_protocol": "SSL",
        "ssl_cafile": str(cluster.pki.ca),
        "ssl_check_hostname": True,
    }
    if client_cert:
        options |= {
            "ssl_certfile": str(cluster.pki.client.cert),
            "ssl_keyfile": str(cluster.pki.client.key),
        }
    return options


def _listener_tls(cluster: KafkaCluster) -> dict[str, str]:
    """TLS on the proxy's own listeners, with the cluster's test certificate."""
    assert cluster.pki is not None
    return {
        "PURGATORY_PROXY_PROXY__TLS__CERT_FILE": str(cluster.pki.server.cert),
        "PURGATORY_PROXY_PROXY__TLS__KEY_FILE": str(cluster.pki.server.key),
    }


def test_upstream_tls_with_the_host_checked_and_the_proxys_certificate(
    secure_kafka: KafkaCluster, tmp_path: Path
) -> None:
    """Kafka's SSL listener wants a client certificate; its own is for 127.0.0.1, which the
    proxy dials and checks (the wrong-host case is in test_kafka_bad_certs.py)."""
    env = proxy_env("", tmp_path, pki=secure_kafka.pki, client_certificate=True)
    with running_proxy(secure_kafka.bootstrap("SSL"), env=env) as proxy:
        group_round_trip(proxy.bootstrap)
        assert "cannot fetch upstream metadata" not in proxy.log_text()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_each_mechanism_with_the_proxys_identity_over_tls(
    mechanism: str, secure_kafka: KafkaCluster, tmp_path: Path
) -> None:
    env = proxy_env(mechanism, tmp_path, pki=secure_kafka.pki)
    with running_proxy(secure_kafka.bootstrap("SASL_SSL"), env=env) as proxy:
        group_round_trip(proxy.bootstrap)
        assert "cannot fetch upstream metadata" not in proxy.log_text()


def _authenticated_raw(address: str) -> RawKafka:
    """A connection that logs in with PLAIN and will never re-authenticate."""
    host, _, port = address.rpartition(":")
    connection = RawKafka(socket.create_connection((host, int(port)), timeout=30))
    handshake = connection.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert handshake is not None and handshake.error_code == 0
    login = f"\0alice\0{USERS['alice']}".encode()
    answer = connection.call(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=login))
    assert answer is not None and answer.error_code == 0
    assert answer.session_lifetime_ms == REAUTH_MS
    return connection


def test_kip368_the_proxys_connections_outlive_three_session_lifetimes(
    secure_kafka: KafkaCluster, tmp_path: Path
) -> None:
    """Sessions of REAUTH_MS (5 s). For three lifetimes and more, a producer writes through
    the proxy (acks=all, on its own upstream connection) and a second one writes behind the
    proxy's back, while a group consumer's fetches are held in the proxy and woken by both
    (the produce path, and the per-broker watcher's long-polls and re-fetches on the proxy's
    own channels); metadata is refreshed every second. Every record arrives, in order, no
    client sees an error, the proxy re-authenticates its connections, and the broker closes
    none of them, though it closes a connection that does not re-authenticate (the control).
    """
    bootstrap = secure_kafka.bootstrap("SASL_PLAINTEXT")
    direct = sasl_options("SCRAM-SHA-512")
    through, behind = (create_topic(bootstrap, prefix, **direct) for prefix in ("in", "behind"))
    control = _authenticated_raw(bootstrap)
    control_address = f"127.0.0.1:{control.local_port}"
    env = proxy_env("SCRAM-SHA-512", tmp_path) | {
        "PURGATORY_PROXY_UPSTREAM__METADATA_REFRESH_MS": "1000"
    }
    with running_proxy(bootstrap, "--log-level", "DEBUG", env=env) as proxy:
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
        outsider = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all", client_id="outsider", **direct
        )
        consumer = KafkaConsumer(
            through,
            behind,
            bootstrap_servers=proxy.bootstrap,
            group_id=f"reauth-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=3000,  # held in the proxy until a record comes
            **GROUP_TIMEOUTS,
        )
        sent: dict[str, list[bytes]] = {through: [], behind: []}
        received: dict[str, list[bytes]] = {through: [], behind: []}

        def poll(timeout_ms: int) -> None:
            for partition, records in consumer.poll(timeout_ms=timeout_ms).items():
                received[partition.topic] += [record.value for record in records]

        end = time.monotonic() + 3 * REAUTH_MS / 1000 + 3
        for turn in itertools.count():
            if time.monotonic() > end:
                break
            topic, client = (through, producer) if turn % 3 else (behind, outsider)
            value = f"{topic}-{len(sent[topic])}".encode()
            client.send(topic, value).get(timeout=30)
            sent[topic].append(value)
            poll(200)
        deadline = time.monotonic() + 30
        while received != sent and time.monotonic() < deadline:
            poll(500)
        producer.close()
        outsider.close()
        consumer.close()
        log = proxy.log_text()
    assert received == sent
    assert len(sent[through]) > 20 and len(sent[behind]) > 10
    # The control: the broker does close a connection that outlives its session.
    assert control.call(ApiKey.METADATA, 1, MetadataRequest(topics=None)) is None
    control.sock.close()
    killed = expired_channels(secure_kafka)
    assert killed.pop(control_address) == "raw-security-test"
    # None of the proxy's (client id purgatory-proxy on its own channels, the clients' on
    # theirs), nor the outsider's: every other connection re-authenticated in time.
    assert killed == {}
    reauthenticated = Counter(
        line.split("re-authenticated on the connection from ")[1].split(" ")[0]
        for line in log.splitlines()
        if "re-authenticated on the connection from" in line
    )
    long_lived = [address for address, count in reauthenticated.items() if count >= 2]
    assert len(long_lived) >= 3, reauthenticated
    assert " WARNING " not in log and " ERROR " not in log, log


def test_client_mutual_tls_in_front_of_sasl_over_tls(
    secure_kafka: KafkaCluster, tmp_path: Path
) -> None:
    assert secure_kafka.pki is not None
    env = proxy_env("SCRAM-SHA-256", tmp_path, pki=secure_kafka.pki) | _listener_tls(secure_kafka)
    env["PURGATORY_PROXY_PROXY__TLS__CLIENT_CA_FILE"] = str(secure_kafka.pki.ca)
    with running_proxy(secure_kafka.bootstrap("SASL_SSL"), env=env) as proxy:
        group_round_trip(proxy.bootstrap, _tls_client(secure_kafka, client_cert=True))
        # Without a client certificate: that handshake fails, with one line naming why.
        context = ssl.create_default_context(cafile=str(secure_kafka.pki.ca))
        refused = False
        try:
            with (
                socket.create_connection((proxy.host, proxy.port), timeout=10) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                tls.sendall(b"\0\0\0\0")
                refused = tls.recv(1) == b""  # TLS 1.3: the refusal shows at the first read
        except (ssl.SSLError, ConnectionError):
            refused = True
        assert refused
        proxy.wait_for_log(r"closed client connection from 127\.0\.0\.1:\d+: TLS handshake failed")
        assert proxy.alive()


def test_a_refused_password_readyz_503_and_clients_are_not_left_hanging(
    secure_kafka: KafkaCluster, tmp_path: Path
) -> None:
    wrong = "not-" + USERS["alice"]
    metrics_port = free_port()
    env = proxy_env("SCRAM-SHA-256", tmp_path, pki=secure_kafka.pki, password=wrong)
    env |= _listener_tls(secure_kafka)
    env["PURGATORY_PROXY_METRICS__LISTEN"] = f"127.0.0.1:{metrics_port}"
    assert secure_kafka.pki is not None
    with running_proxy(secure_kafka.bootstrap("SASL_SSL"), env=env) as proxy:
        proxy.wait_for_log("cannot fetch upstream metadata", timeout_s=20)
        status, text = readyz_saying(metrics_port, "authenticate")
        assert status == 503
        assert "cannot authenticate upstream" in text
        assert "SCRAM-SHA-256" in text and "'alice'" in text
        assert wrong not in text
        # A client gets a closed connection, not a hang.
        context = ssl.create_default_context(cafile=str(secure_kafka.pki.ca))
        with (
            socket.create_connection((proxy.host, proxy.port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"\0\0\0\x0e\0\x12\0\0\0\0\0\x01\0\x04test")
            assert tls.recv(4) == b""
        proxy.wait_for_log(r"closed client connection .*SASL SCRAM-SHA-256 authentication")
        assert wrong not in proxy.log_text()


def test_a_plaintext_client_on_a_tls_port_is_closed_with_one_line(
    secure_kafka: KafkaCluster, tmp_path: Path
) -> None:
    env = proxy_env("PLAIN", tmp_path, pki=secure_kafka.pki) | _listener_tls(secure_kafka)
    with running_proxy(secure_kafka.bootstrap("SASL_SSL"), env=env) as proxy:
        with socket.create_connection((proxy.host, proxy.port), timeout=10) as raw:
            raw.sendall(b"\0\0\0\x0e\0\x12\0\0\0\0\0\x01\0\x04test")
            assert raw.recv(64) == b""
        proxy.wait_for_log(r"closed client connection from .*: TLS handshake failed: \S+")
        group_round_trip(proxy.bootstrap, _tls_client(secure_kafka), count=3)


def test_sighup_reloads_the_upstream_ca(secure_kafka: KafkaCluster, tmp_path: Path) -> None:
    """The proxy starts trusting another CA, so the broker's certificate fails; the right CA
    written to the same file and a SIGHUP make new connections work. A file that does not load
    keeps the previous context, counted as a failed reload."""
    pki = secure_kafka.pki
    assert pki is not None
    ca = tmp_path / "ca.pem"
    shutil.copy(pki.other_ca, ca)
    metrics = f"127.0.0.1:{free_port()}"
    env = proxy_env("SCRAM-SHA-512", tmp_path, pki=pki)
    env |= {"PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(ca)}
    reloads = "purgatory_proxy_tls_reloads_total"
    with running_proxy(secure_kafka.bootstrap("SASL_SSL"), "--metrics", metrics, env=env) as proxy:
        proxy.wait_for_log(r"cannot fetch upstream metadata .*unable to get local issuer")
        shutil.copy(pki.ca, ca)
        os.kill(proxy.pid, signal.SIGHUP)
        proxy.wait_for_log("upstream TLS files reloaded")
        group_round_trip(proxy.bootstrap)
        assert metric_value(metrics, reloads, side="upstream", result="ok") == 1
        ca.write_text("not a certificate\n")
        os.kill(proxy.pid, signal.SIGHUP)
        proxy.wait_for_log("upstream TLS files not reloaded, keeping the previous ones")
        assert metric_value(metrics, reloads, side="upstream", result="failed") == 1
        group_round_trip(proxy.bootstrap, count=3)  # new connections: the context that loaded
        assert proxy.alive()
