# Strategy: one description of the client's TLS (`ClientTls`: CA, optional client certificate
# for mutual TLS) carried in the Job, and one translation per client family here, so each
# driver adds its options in one place and the drivers stay identical with TLS off (tls None:
# every function returns "no options"). Hostname checking stays on everywhere: the test
# certificates name 127.0.0.1, which is what clients dial.
"""TLS options for every compat client, from one ClientTls."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ClientTls",
    "aiokafka_options",
    "java_properties",
    "kafka_python_options",
    "librdkafka_config",
    "settings",
]


@dataclass(frozen=True)
class ClientTls:
    """The client's TLS: trust ``ca_file``; present ``cert_file``/``key_file`` if set (mTLS)."""

    ca_file: str
    cert_file: str = ""
    key_file: str = ""


def kafka_python_options(tls: ClientTls | None) -> dict[str, object]:
    if tls is None:
        return {}
    options: dict[str, object] = {
        "security_protocol": "SSL",
        "ssl_cafile": tls.ca_file,
        "ssl_check_hostname": True,
    }
    if tls.cert_file:
        options |= {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file}
    return options


def aiokafka_options(tls: ClientTls | None) -> dict[str, object]:
    if tls is None:
        return {}
    context = ssl.create_default_context(cafile=tls.ca_file)
    if tls.cert_file:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return {"security_protocol": "SSL", "ssl_context": context}


def librdkafka_config(tls: ClientTls | None) -> dict[str, str]:
    """librdkafka properties (confluent-kafka's dict, kcat's ``-X key=value``)."""
    if tls is None:
        return {}
    config = {
        "security.protocol": "ssl",
        "ssl.ca.location": tls.ca_file,
        "ssl.endpoint.identification.algorithm": "https",
    }
    if tls.cert_file:
        config |= {"ssl.certificate.location": tls.cert_file, "ssl.key.location": tls.key_file}
    return config


def java_properties(tls: ClientTls | None, directory: Path) -> dict[str, str]:
    """kafka-clients properties; PEM files are used as they are (KIP-651, Kafka >= 2.7).

    The keystore is one PEM file holding the key then the certificate, written to
    ``directory``.
    """
    if tls is None:
        return {}
    properties = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": tls.ca_file,
    }
    if tls.cert_file:
        keystore = directory / "keystore.pem"
        keystore.write_text(Path(tls.key_file).read_text() + Path(tls.cert_file).read_text())
        properties |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
    return properties


def settings(tls: ClientTls | None) -> dict[str, str]:
    """What the matrix reports as the client's TLS setting."""
    if tls is None:
        return {}
    return {"tls": "mutual TLS (client certificate)" if tls.cert_file else "TLS"}
