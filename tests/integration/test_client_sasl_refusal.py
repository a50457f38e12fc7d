"""Issue 16: a client that tries SASL while the proxy uses its own identity (client_auth none).

It must get a clear Kafka answer, never a hang and never a silent forward: ApiVersions does not
offer the SASL APIs, SaslHandshake is answered UNSUPPORTED_SASL_MECHANISM with no mechanisms,
SaslAuthenticate before SaslHandshake closes that connection with one log line, as Kafka does.
Raw frames from tests/support/raw_tls_client.py, a real proxy before a real Tansu.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.support.raw_tls_client import RawKafka, closed_by_peer, log_lines_about
from wire.apis import ApiKey
from wire.messages import (
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

UNSUPPORTED_SASL_MECHANISM = 33


@pytest.fixture(scope="module")
def plain_proxy(kafka_broker: Broker) -> Iterator[ProxyProcess]:
    with running_proxy(kafka_broker.bootstrap) as proxy:
        yield proxy


def _connect(proxy: ProxyProcess) -> RawKafka:
    return RawKafka(socket.create_connection((proxy.host, proxy.port), timeout=10))


def test_api_versions_does_not_offer_sasl(plain_proxy: ProxyProcess) -> None:
    raw = _connect(plain_proxy)
    with raw.sock:
        keys = {api.api_key for api in raw.api_versions().api_keys}
    assert ApiKey.METADATA in keys  # a real answer, relayed from the broker
    assert ApiKey.SASL_HANDSHAKE not in keys
    assert ApiKey.SASL_AUTHENTICATE not in keys


@pytest.mark.parametrize(("version", "mechanism"), [(0, "PLAIN"), (1, "SCRAM-SHA-512")])
def test_sasl_handshake_is_refused_with_no_mechanisms(
    version: int, mechanism: str, plain_proxy: ProxyProcess
) -> None:
    raw = _connect(plain_proxy)
    with raw.sock:
        answer = raw.call(ApiKey.SASL_HANDSHAKE, version, SaslHandshakeRequest(mechanism=mechanism))
        assert isinstance(answer, SaslHandshakeResponse)
        assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
        assert list(answer.mechanisms) == []
        # The refusal is an answer, not a close: the connection still serves Kafka.
        assert raw.api_versions().error_code == 0


def test_sasl_authenticate_first_closes_that_connection_only(
    plain_proxy: ProxyProcess,
) -> None:
    bystander = _connect(plain_proxy)
    with bystander.sock:
        assert bystander.api_versions().error_code == 0
        offender = _connect(plain_proxy)
        port = offender.local_port
        with offender.sock:
            answer = offender.call(
                ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=b"\0user\0password")
            )
            assert answer is None  # closed, not answered and not left hanging
            assert closed_by_peer(offender.sock)
        line = plain_proxy.wait_for_log(
            rf"closed client connection .*127\.0\.0\.1:{port}\b.*SaslAuthenticate before "
            r"SaslHandshake"
        )
        assert len(log_lines_about(plain_proxy.log_text(), port)) == 1, line.group(0)
        # The proxy is up, the other connection and new clients work.
        assert plain_proxy.alive()
        assert bystander.api_versions().error_code == 0
    topic = create_topic(plain_proxy.bootstrap, "refusal")
    producer = KafkaProducer(bootstrap_servers=plain_proxy.bootstrap, acks="all")
    producer.send(topic, b"after").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=plain_proxy.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=20_000,
    )
    received = next(iter(consumer), None)
    consumer.close()
    assert received is not None
    assert received.value == b"after"


def test_a_sasl_client_library_reports_the_refusal(plain_proxy: ProxyProcess) -> None:
    """kafka-python configured for SASL_PLAINTEXT fails with a Kafka error, not a hang."""
    with pytest.raises(KafkaError):
        producer = KafkaProducer(
            bootstrap_servers=plain_proxy.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="user",
            sasl_plain_password="password",
            max_block_ms=10_000,
        )
        producer.send("refused-topic", b"x").get(timeout=10)
