"""One ClientTls and one ClientSasl become each client family's settings.

The matrix hands them to the examples as flags (tests/compat/_examples.example_flags), and each
example translates them in its client's terms; the rest stays in tests/compat/_tls.py
(kafka-python for the direct reader's admin, librdkafka's -X options for kcat.sh, the Go
clients' environment). The security protocol names the pair (PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL) in every family's own spelling; nothing at all is set when there is neither; the
password is never a flag, and the matrix's report names the login but never the password.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.compat._examples import EXAMPLES, example_env, example_flags
from tests.compat._model import Job, make_records
from tests.compat._tls import (
    ClientSasl,
    ClientTls,
    go_environment,
    kafka_python_options,
    librdkafka_config,
    settings,
)

SASL = ClientSasl("alice", "alice-Pa55word", "SCRAM-SHA-512")


@pytest.fixture
def tls(tmp_path: Path) -> ClientTls:
    """A CA path only (these tests never load it)."""
    return ClientTls(str(tmp_path / "ca.pem"))


def _example(script: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), EXAMPLES / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _job(tls: ClientTls | None, sasl: ClientSasl | None) -> Job:
    return Job("127.0.0.1:1", "t", 3, "g", make_records(3), tls=tls, sasl=sasl)


def _translated(
    script: str, tls: ClientTls | None, sasl: ClientSasl | None, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """What ``script`` makes of the flags and environment the matrix gives it."""
    job = _job(tls, sasl)
    for name, value in example_env(job).items():
        monkeypatch.setenv(name, value)
    module = _example(script)
    args = module.arguments(example_flags(job))
    if script.startswith("confluent"):
        conf: dict[str, Any] = module.config(args)
        return conf
    options: dict[str, Any] = module.security(args)
    return options


def test_neither_tls_nor_sasl_sets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_SASL_PASSWORD", raising=False)
    assert kafka_python_options(None, None) == {}
    assert librdkafka_config(None, None) == {}
    assert go_environment(None) == {}
    assert settings(None, None) == {}
    flags = example_flags(_job(None, None))
    assert not [f for f in flags if f.startswith(("--ca", "--cert", "--key-", "--sasl", "--tls"))]
    assert _translated("kafka_python_example.py", None, None, monkeypatch) == {}
    assert _translated("aiokafka_example.py", None, None, monkeypatch) == {}
    assert _translated("confluent_kafka_example.py", None, None, monkeypatch) == {
        "bootstrap.servers": "127.0.0.1:1"
    }


def test_sasl_alone_is_sasl_plaintext_in_every_family(monkeypatch: pytest.MonkeyPatch) -> None:
    python = kafka_python_options(None, SASL)
    assert python["security_protocol"] == "SASL_PLAINTEXT"
    assert (python["sasl_mechanism"], python["sasl_plain_username"]) == ("SCRAM-SHA-512", "alice")
    assert python["sasl_plain_password"] == SASL.password
    assert "ssl_cafile" not in python
    rd = librdkafka_config(None, SASL)
    assert rd["security.protocol"] == "sasl_plaintext"
    assert (rd["sasl.mechanisms"], rd["sasl.username"], rd["sasl.password"]) == (
        "SCRAM-SHA-512",
        "alice",
        SASL.password,
    )
    assert go_environment(SASL) == {
        "COMPAT_SASL_MECHANISM": "SCRAM-SHA-512",
        "COMPAT_SASL_USER": "alice",
        "COMPAT_SASL_PASSWORD": SASL.password,
    }
    # The examples, from the matrix's flags and $KAFKA_SASL_PASSWORD.
    assert _translated("kafka_python_example.py", None, SASL, monkeypatch) == python
    aio = _translated("aiokafka_example.py", None, SASL, monkeypatch)
    assert aio["security_protocol"] == "SASL_PLAINTEXT"
    assert aio["sasl_plain_password"] == SASL.password
    assert "ssl_context" not in aio
    confluent = _translated("confluent_kafka_example.py", None, SASL, monkeypatch)
    assert {k: v for k, v in confluent.items() if k != "bootstrap.servers"} == rd


def test_tls_and_sasl_together_are_sasl_ssl(
    tls: ClientTls, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert kafka_python_options(tls, SASL)["security_protocol"] == "SASL_SSL"
    assert librdkafka_config(tls, SASL)["security.protocol"] == "sasl_ssl"
    assert kafka_python_options(tls, None)["security_protocol"] == "SSL"
    assert librdkafka_config(tls, None)["security.protocol"] == "ssl"
    python = _translated("kafka_python_example.py", tls, SASL, monkeypatch)
    assert python == kafka_python_options(tls, SASL)
    confluent = _translated("confluent_kafka_example.py", tls, None, monkeypatch)
    assert {k: v for k, v in confluent.items() if k != "bootstrap.servers"} == librdkafka_config(
        tls, None
    )


def test_mutual_tls_passes_the_client_certificate(monkeypatch: pytest.MonkeyPatch) -> None:
    mtls = ClientTls("ca.pem", "client.pem", "client.key")
    flags = example_flags(_job(mtls, None))
    assert flags[flags.index("--cert-file") + 1] == "client.pem"
    assert flags[flags.index("--key-file") + 1] == "client.key"
    python = _translated("kafka_python_example.py", mtls, None, monkeypatch)
    assert (python["ssl_certfile"], python["ssl_keyfile"]) == ("client.pem", "client.key")
    assert python["ssl_check_hostname"] is True
    confluent = _translated("confluent_kafka_example.py", mtls, None, monkeypatch)
    assert confluent["ssl.certificate.location"] == "client.pem"
    assert confluent["ssl.endpoint.identification.algorithm"] == "https"


def test_the_password_is_never_a_flag_and_never_reported(tls: ClientTls) -> None:
    job = _job(tls, SASL)
    assert SASL.password not in " ".join(example_flags(job))
    assert example_env(job)["KAFKA_SASL_PASSWORD"] == SASL.password
    reported = settings(tls, SASL)
    assert reported["sasl"] == "SCRAM-SHA-512 as alice (SASL_SSL)"
    assert SASL.password not in repr(reported)
