# Strategy: the security tests talk to Apache Kafka's own TLS and SASL listeners, not to a test
# front: the broker checks the proxy's certificate, runs the SASL exchanges (PLAIN, SCRAM with
# the users testbed/kafka_cluster.py created at format time, OAUTHBEARER with Kafka's unsecured
# JWS validator) and, on the listener with a session lifetime, closes any connection that sends
# a request after its session expired (KIP-368), logging it when kafka.network.Processor is at
# DEBUG. This module holds what those tests share: the cluster's shape, the proxy's settings
# for each way of reaching it, kafka-python options for direct clients, and the broker's
# record of the connections it killed.
"""Apache Kafka with TLS and SASL for the security tests, and the proxy's settings for it."""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from testbed.certs import Pki
from testbed.kafka_cluster import USERS, KafkaCluster, running_kafka

__all__ = [
    "REAUTH_MS",
    "expired_channels",
    "http_get",
    "proxy_env",
    "readyz_saying",
    "running_secure_kafka",
    "sasl_options",
    "unsecured_token",
]

#: Session lifetime on the SASL_PLAINTEXT listener (connections.max.reauth.ms there only).
REAUTH_MS = 5000
#: The Processor's DEBUG line when it closes a connection whose session expired; the channel
#: id is "<broker address>-<client address>-<processor>-<index>", then the request's header.
_EXPIRED = re.compile(
    r"Disconnecting expired channel: \S+ id=[\d.]+:\d+-(?P<client>[\d.]+:\d+)-\S+ : "
    r"RequestHeader\(apiKey=(?P<api>\w+).*?clientId=(?P<client_id>[^,]*),"
)


@contextmanager
def running_secure_kafka() -> Iterator[KafkaCluster]:
    """One node with SSL (the client's certificate required), SASL_SSL and SASL_PLAINTEXT
    (every mechanism; sessions of REAUTH_MS on SASL_PLAINTEXT only), logging expired
    connections it closes."""
    reauth = {"listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS)}
    with running_kafka(
        listeners=("SSL", "SASL_SSL", "SASL_PLAINTEXT"), ssl_client_auth="required", extra=reauth
    ) as cluster:
        admin = KafkaAdminClient(
            bootstrap_servers=cluster.bootstrap("SASL_PLAINTEXT"), **sasl_options("PLAIN")
        )
        try:
            debug = {"kafka.network.Processor": "DEBUG"}
            admin.alter_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, "1", debug)])
        finally:
            admin.close()
        yield cluster


def expired_channels(cluster: KafkaCluster) -> dict[str, str]:
    """Every connection the broker closed for an expired session: its client address, and
    the client id of the request that found the session expired."""
    log = cluster.nodes[0].log_text()
    return {found["client"]: found["client_id"] for found in _EXPIRED.finditer(log)}


def sasl_options(
    mechanism: str, user: str = "admin", *, tls: Pki | None = None
) -> dict[str, object]:
    """kafka-python settings for a client of the SASL_PLAINTEXT (or, with ``tls``, SASL_SSL)
    listener, logging in as ``user``."""
    options: dict[str, object] = {
        "security_protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }
    if tls is not None:
        options |= {"ssl_cafile": str(tls.ca), "ssl_check_hostname": True}
    return options


def unsecured_token(subject: str, lifetime_s: int = 3600) -> str:
    """An unsecured JWS (alg none) as Kafka's OAuthBearerUnsecuredValidatorCallbackHandler
    accepts: header.claims. with an empty signature; its principal is ``subject``."""

    def part(value: dict[str, object]) -> str:
        raw = json.dumps(value, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    now = int(time.time())
    claims = {"sub": subject, "iat": now, "exp": now + lifetime_s}
    return f"{part({'alg': 'none'})}.{part(claims)}."


def proxy_env(
    mechanism: str,
    tmp_path: Path,
    *,
    pki: Pki | None = None,
    user: str = "alice",
    password: str | None = None,
    client_certificate: bool = False,
) -> dict[str, str]:
    """PURGATORY_PROXY_* settings for the proxy's own identity: SASL ``mechanism`` ("" for
    none) as ``user``; with ``pki``, upstream TLS verified against its CA, host names checked,
    and (``client_certificate``) the proxy's certificate for mutual TLS."""
    env: dict[str, str] = {}
    if pki is not None:
        env |= {
            "PURGATORY_PROXY_UPSTREAM__TLS__ENABLED": "true",
            "PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(pki.ca),
            "PURGATORY_PROXY_UPSTREAM__TLS__CHECK_HOSTNAME": "true",
        }
        if client_certificate:
            env |= {
                "PURGATORY_PROXY_UPSTREAM__TLS__CERT_FILE": str(pki.client.cert),
                "PURGATORY_PROXY_UPSTREAM__TLS__KEY_FILE": str(pki.client.key),
            }
    if not mechanism:
        return env
    env["PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM"] = mechanism
    if mechanism == "OAUTHBEARER":
        token = tmp_path / "token"
        token.write_text(unsecured_token(user) + "\n")
        env["PURGATORY_PROXY_UPSTREAM__SASL__TOKEN_FILE"] = str(token)
        return env
    env["PURGATORY_PROXY_UPSTREAM__SASL__USERNAME"] = user
    env["PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD"] = password or USERS[user]
    return env


def http_get(port: int, path: str) -> tuple[int, str]:
    """Status and body of GET ``path`` on the proxy's HTTP endpoint at 127.0.0.1:``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def readyz_saying(port: int, words: str, timeout_s: float = 10) -> tuple[int, str]:
    """/readyz once its body holds ``words`` (the refresher's first failure may come a moment
    after the log line), or its last answer when ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    status, text = http_get(port, "/readyz")
    while words not in text and time.monotonic() < deadline:
        time.sleep(0.1)
        status, text = http_get(port, "/readyz")
    return status, text
