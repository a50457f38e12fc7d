# Strategy: throwaway PKI made in the test session with the `cryptography` package: one CA,
# a server certificate for 127.0.0.1/localhost, client certificates, and the bad ones the
# bad-input tests need (expired, wrong host, signed by another CA); revocation lists of the CA
# on demand (write_crl). EC P-256 keys: fast.
"""A throwaway CA and certificates (good and bad) for the TLS tests."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NOW = datetime.datetime.now(datetime.UTC)

#: SNI mode's names in the tests: under .test, a name no resolver outside the test knows
#: (RFC 2606), covered by the wildcard certificate.
SNI_DOMAIN = "kafka.test"
SNI_BOOTSTRAP = f"bootstrap.{SNI_DOMAIN}"
SNI_BROKERS = f"broker-{{node_id}}.{SNI_DOMAIN}"


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Every file the TLS tests use."""

    ca: Path
    server: CertFiles  # 127.0.0.1 and localhost, signed by ca
    client: CertFiles  # client auth, signed by ca
    expired: CertFiles  # 127.0.0.1, signed by ca, expired yesterday
    wrong_host: CertFiles  # names only elsewhere.example, signed by ca
    other_ca: Path  # a CA that signed nothing here
    untrusted: CertFiles  # 127.0.0.1, signed by other_ca
    rotated: CertFiles  # like server (127.0.0.1, localhost, signed by ca), another key and serial
    expired_client: CertFiles  # client auth, signed by ca, expired yesterday
    untrusted_client: CertFiles  # client auth, signed by other_ca
    second_client: CertFiles  # client auth, signed by ca (a client to revoke beside client)
    ca_key: Path  # ca's private key, for revocation lists (write_crl)
    wildcard: CertFiles  # *.kafka.test (SNI mode's names, SNI_BOOTSTRAP and SNI_BROKERS), by ca

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server.cert, self.server.key)
        if require_client_cert:
            context.load_verify_locations(self.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


_CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _ca(directory: Path, name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - datetime.timedelta(days=1))
        .not_valid_after(_NOW + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, directory / f"{name}.key")
    return cert, key, path


def _leaf(
    directory: Path,
    name: str,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Path],
    *,
    hosts: list[str],
    client: bool = False,
    expired: bool = False,
) -> CertFiles:
    ca_cert, ca_key, _ = ca
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    start = _NOW - datetime.timedelta(days=10 if expired else 1)
    end = _NOW - datetime.timedelta(days=1) if expired else _NOW + datetime.timedelta(days=30)
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    files = CertFiles(directory / f"{name}.pem", directory / f"{name}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files


def make_pki(directory: Path) -> Pki:
    """Write a fresh CA and the test certificates into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "test-ca")
    other = _ca(directory, "other-ca")
    local = ["127.0.0.1", "localhost"]
    return Pki(
        ca=ca[2],
        server=_leaf(directory, "server", ca, hosts=local),
        client=_leaf(directory, "client", ca, hosts=[], client=True),
        expired=_leaf(directory, "expired", ca, hosts=local, expired=True),
        wrong_host=_leaf(directory, "wrong-host", ca, hosts=["elsewhere.example"]),
        other_ca=other[2],
        untrusted=_leaf(directory, "untrusted", other, hosts=local),
        rotated=_leaf(directory, "rotated-server", ca, hosts=local),
        expired_client=_leaf(directory, "expired-client", ca, hosts=[], client=True, expired=True),
        untrusted_client=_leaf(directory, "untrusted-client", other, hosts=[], client=True),
        second_client=_leaf(directory, "second-client", ca, hosts=[], client=True),
        ca_key=directory / "test-ca.key",
        wildcard=_leaf(directory, "wildcard", ca, hosts=[f"*.{SNI_DOMAIN}"]),
    )


def write_crl(pki: Pki, revoked: list[CertFiles], path: Path, *, expired: bool = False) -> None:
    """Write the CA's PEM revocation list naming ``revoked`` (empty: a list revoking none).
    ``expired``: its nextUpdate is yesterday (OpenSSL then refuses every client)."""
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.subject)
        .last_update(now - datetime.timedelta(days=2 if expired else 1))
        .next_update(now + datetime.timedelta(days=-1 if expired else 7))
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), False)
    )
    for files in revoked:
        serial = x509.load_pem_x509_certificate(files.cert.read_bytes()).serial_number
        entry = x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now)
        builder = builder.add_revoked_certificate(entry.build())
    crl = builder.sign(key, hashes.SHA256())
    path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
