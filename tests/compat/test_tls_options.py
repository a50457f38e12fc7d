"""tests/compat/_tls.py: one ClientTls and one ClientSasl become each client family's settings.

The security protocol names the pair (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) in every
family's own spelling; nothing at all is set when there is neither; the matrix's report names
the login but never the password.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat._tls import (
    ClientSasl,
    ClientTls,
    aiokafka_options,
    java_properties,
    kafka_python_options,
    librdkafka_config,
    sarama_environment,
    settings,
)

SASL = ClientSasl("alice", "alice-Pa55word", "SCRAM-SHA-512")


@pytest.fixture
def tls(tmp_path: Path) -> ClientTls:
    """A CA path only (these tests never load it; aiokafka's options would)."""
    return ClientTls(str(tmp_path / "ca.pem"))


def test_neither_tls_nor_sasl_sets_nothing(tmp_path: Path) -> None:
    assert kafka_python_options(None, None) == {}
    assert aiokafka_options(None, None) == {}
    assert librdkafka_config(None, None) == {}
    assert java_properties(None, tmp_path, None) == {}
    assert sarama_environment(None) == {}
    assert settings(None, None) == {}


def test_sasl_alone_is_sasl_plaintext_in_every_family(tmp_path: Path) -> None:
    python = kafka_python_options(None, SASL)
    assert python["security_protocol"] == "SASL_PLAINTEXT"
    assert (python["sasl_mechanism"], python["sasl_plain_username"]) == ("SCRAM-SHA-512", "alice")
    assert python["sasl_plain_password"] == SASL.password
    assert "ssl_cafile" not in python
    aio = aiokafka_options(None, SASL)
    assert aio["security_protocol"] == "SASL_PLAINTEXT"
    assert "ssl_context" not in aio
    rd = librdkafka_config(None, SASL)
    assert rd["security.protocol"] == "sasl_plaintext"
    assert (rd["sasl.mechanisms"], rd["sasl.username"], rd["sasl.password"]) == (
        "SCRAM-SHA-512",
        "alice",
        SASL.password,
    )
    java = java_properties(None, tmp_path, SASL)
    assert java["security.protocol"] == "SASL_PLAINTEXT"
    assert java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{SASL.password}";'
    )
    assert sarama_environment(SASL) == {
        "SARAMA_SASL_MECHANISM": "SCRAM-SHA-512",
        "SARAMA_SASL_USER": "alice",
        "SARAMA_SASL_PASSWORD": SASL.password,
    }


def test_tls_and_sasl_together_are_sasl_ssl(tmp_path: Path, tls: ClientTls) -> None:
    assert kafka_python_options(tls, SASL)["security_protocol"] == "SASL_SSL"
    assert librdkafka_config(tls, SASL)["security.protocol"] == "sasl_ssl"
    assert java_properties(tls, tmp_path, SASL)["security.protocol"] == "SASL_SSL"
    assert kafka_python_options(tls, None)["security_protocol"] == "SSL"
    assert librdkafka_config(tls, None)["security.protocol"] == "ssl"
    assert "sasl.mechanism" not in java_properties(tls, tmp_path, None)


def test_plain_uses_the_plain_login_module(tmp_path: Path) -> None:
    plain = ClientSasl("bob", "pw", "PLAIN")
    jaas = java_properties(None, tmp_path, plain)["sasl.jaas.config"]
    assert jaas.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")


def test_the_report_names_the_login_never_the_password(tls: ClientTls) -> None:
    reported = settings(tls, SASL)
    assert reported["sasl"] == "SCRAM-SHA-512 as alice (SASL_SSL)"
    assert SASL.password not in repr(reported)
