# Strategy: the security settings live here as their own section models so that
# proxy/config/ only names them, and so that the code that uses them can move without touching
# the rest of the configuration.
#
# Secrets are pydantic SecretStr: their repr, str and model_dump(mode="json") show asterisks,
# never the value, so neither the config's repr nor a validation error can leak them. Files that
# hold secrets (password_file, token_file) are only named here; they are read when a connection
# authenticates (proxy/security/sasl_client.py), so a rotated file is picked up without a restart.
"""Configuration sections for TLS (client side and upstream) and upstream SASL."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

__all__ = [
    "ClientAuth",
    "ClientTlsSection",
    "SaslMechanism",
    "UpstreamSaslSection",
    "UpstreamTlsSection",
]


#: How clients authenticate: "none" = the proxy's own identity upstream (the sidecar mode);
#: "passthrough" = each client's own SASL goes to the cluster (the gateway; docs/security.md).
ClientAuth = Literal["none", "passthrough"]

SaslMechanism = Literal["", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClientTlsSection(_Section):
    """TLS on every client listener (bootstrap and per-broker ports)."""

    cert_file: str = ""
    """PEM certificate chain the listeners present; empty = plaintext listeners."""
    key_file: str = ""
    """PEM private key of cert_file."""
    client_ca_file: str = ""
    """Non-empty: clients must present a certificate signed by this CA (mutual TLS)."""
    crl_file: str = ""
    """PEM certificate revocation list(s) of client_ca_file's CA: a client certificate listed
    there is refused. While set, a CRL of the client's CA must be in it and not expired."""

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)

    @model_validator(mode="after")
    def _complete(self) -> ClientTlsSection:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file are set together or not at all")
        if self.client_ca_file and not self.cert_file:
            raise ValueError("client_ca_file needs cert_file and key_file (TLS listeners)")
        if self.crl_file and not self.client_ca_file:
            raise ValueError("crl_file needs client_ca_file (it revokes client certificates)")
        return self


class UpstreamTlsSection(_Section):
    """TLS on every connection the proxy opens to the cluster."""

    enabled: bool = False
    ca_file: str = ""
    """PEM CA bundle the brokers' certificates must chain to; empty = the system trust store."""
    cert_file: str = ""
    """Client certificate for mutual TLS to the brokers; empty = none."""
    key_file: str = ""
    check_hostname: bool = True
    """Check that a broker's certificate names the host the proxy dialled."""

    @model_validator(mode="after")
    def _complete(self) -> UpstreamTlsSection:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file are set together or not at all")
        return self


class UpstreamSaslSection(_Section):
    """The proxy's own SASL identity on every upstream connection."""

    mechanism: SaslMechanism = ""
    """Empty = no SASL."""
    username: str = ""
    password: SecretStr = SecretStr("")
    """Also PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD; or password_file."""
    password_file: str = ""
    """File holding the password (read at every authentication, trailing newline dropped)."""
    token_file: str = ""
    """OAUTHBEARER: file holding the bearer token (re-read when its mtime changes)."""

    @model_validator(mode="after")
    def _complete(self) -> UpstreamSaslSection:
        mechanism = self.mechanism
        if not mechanism:
            return self
        if mechanism == "OAUTHBEARER":
            if not self.token_file:
                raise ValueError("OAUTHBEARER needs token_file")
            return self
        if not self.username:
            raise ValueError(f"{mechanism} needs username")
        has_password = bool(self.password.get_secret_value())
        if has_password == bool(self.password_file):
            raise ValueError(f"{mechanism} needs exactly one of password and password_file")
        return self

    def read_password(self) -> str:
        """The password, from ``password`` or read now from ``password_file``.

        Raises:
            OSError: password_file cannot be read (the message names the file, not its content).
        """
        if self.password_file:
            return Path(self.password_file).read_text().rstrip("\r\n")
        return self.password.get_secret_value()
