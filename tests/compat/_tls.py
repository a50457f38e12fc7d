# Strategy: one description of the client's TLS (`ClientTls`: CA, optional client certificate
# for mutual TLS) carried in the Job. The examples the matrix runs take it as flags
# (tests/compat/_examples.example_flags) and translate it themselves, each in its client's
# terms, since that is what a user needs to see; what stays here is the translation for the
# clients the tests drive from Python or the command line: kafka-python (the direct reader's
# admin), librdkafka's properties (kcat.sh's -X options) and the Go clients' environment
# (their TLS files are flags, tests/compat/_go.py). With TLS
# off (tls None) every function returns "no options". Hostname checking stays on
# everywhere: the test certificates name 127.0.0.1, which is what clients dial.
#
# SASL the same way: `ClientSasl` (mechanism, username, password) travels in the Job next to
# the TLS, and each translation takes both, because the security protocol names the pair
# (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). The passthrough matrix variant uses it: every
# client logs in to the proxy as its own user, and the proxy forwards that to the cluster.
"""TLS and SASL options for every compat client, from one ClientTls and one ClientSasl."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ClientSasl",
    "ClientTls",
    "go_environment",
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


@dataclass(frozen=True)
class ClientSasl:
    """The client's SASL login: ``mechanism`` (SCRAM-SHA-256/512 or PLAIN) as ``username``."""

    username: str
    password: str
    mechanism: str = "SCRAM-SHA-512"


def _protocol(tls: ClientTls | None, sasl: ClientSasl | None) -> str:
    """Kafka's security.protocol name for the pair, upper case."""
    if sasl is None:
        return "SSL" if tls is not None else "PLAINTEXT"
    return "SASL_SSL" if tls is not None else "SASL_PLAINTEXT"


def kafka_python_options(
    tls: ClientTls | None, sasl: ClientSasl | None = None
) -> dict[str, object]:
    options: dict[str, object] = {}
    if tls is not None:
        options |= {"ssl_cafile": tls.ca_file, "ssl_check_hostname": True}
        if tls.cert_file:
            options |= {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file}
    if sasl is not None:
        options |= {
            "sasl_mechanism": sasl.mechanism,
            "sasl_plain_username": sasl.username,
            "sasl_plain_password": sasl.password,
        }
    if options:
        options["security_protocol"] = _protocol(tls, sasl)
    return options


def librdkafka_config(tls: ClientTls | None, sasl: ClientSasl | None = None) -> dict[str, str]:
    """librdkafka properties (kcat's ``-X key=value``)."""
    config: dict[str, str] = {}
    if tls is not None:
        config |= {
            "ssl.ca.location": tls.ca_file,
            "ssl.endpoint.identification.algorithm": "https",
        }
        if tls.cert_file:
            config |= {
                "ssl.certificate.location": tls.cert_file,
                "ssl.key.location": tls.key_file,
            }
    if sasl is not None:
        config |= {
            "sasl.mechanisms": sasl.mechanism,
            "sasl.username": sasl.username,
            "sasl.password": sasl.password,
        }
    if config:
        config["security.protocol"] = _protocol(tls, sasl).lower()
    return config


def go_environment(sasl: ClientSasl | None) -> dict[str, str]:
    """The Go clients' SASL login (go/internal/compat reads it; never a flag)."""
    if sasl is None:
        return {}
    return {
        "COMPAT_SASL_MECHANISM": sasl.mechanism,
        "COMPAT_SASL_USER": sasl.username,
        "COMPAT_SASL_PASSWORD": sasl.password,
    }


def settings(tls: ClientTls | None, sasl: ClientSasl | None = None) -> dict[str, str]:
    """What the matrix reports as the client's TLS and SASL settings (never the password)."""
    reported: dict[str, str] = {}
    if tls is not None:
        reported["tls"] = "mutual TLS (client certificate)" if tls.cert_file else "TLS"
    if sasl is not None:
        reported["sasl"] = f"{sasl.mechanism} as {sasl.username} ({_protocol(tls, sasl)})"
    return reported
