# Strategy: TLS is the standard ssl module under trio.SSLStream, set up in two places only:
# the listeners (server side, ServerTls) and the upstream connections (client side,
# upstream_context, used by proxy/security/secure_upstream.py). Both handshakes run eagerly and
# under a deadline, so a stalled or failed handshake is one typed error with a reason, at the place
# that accepted or dialled, and never a task left waiting on a peer.
#
# Rotation: ServerTls holds the listeners' current SSLContext (certificate, key, client CA,
# revocation list) and UpstreamTls the upstream connections' (CA, client certificate); their
# reload() builds a new context from the same files and swaps it in only if that worked. A
# connection keeps the context it was opened with (its SSLStream holds it), so open
# connections never notice; new handshakes use the new files. proxy/reload.py calls them on
# SIGHUP.
"""TLS contexts for the listeners and the upstream connections, and bounded handshakes."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

import trio

from proxy.security.security_config import ClientTlsSection, UpstreamTlsSection
from proxy.security.server_names import ServerNames
from proxy.security.sni import expect_hello, route_server_name

__all__ = [
    "ServerTls",
    "TlsHandshakeFailed",
    "UpstreamTls",
    "handshake_reason",
    "reason_class",
    "upstream_context",
]

log = logging.getLogger("purgatory_proxy.tls")


class TlsHandshakeFailed(Exception):
    """A TLS handshake failed or did not finish in time; the message says why."""


def handshake_reason(error: BaseException) -> str:
    """A one-line reason for a failed handshake, from trio's error and its ssl cause."""
    cause = error.__cause__ if error.__cause__ is not None else error
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {cause.verify_message}"
    if isinstance(cause, ssl.SSLError):
        return cause.reason or str(cause)
    return str(cause) or type(cause).__name__


#: ssl reasons of a peer that is not speaking TLS at all (plaintext Kafka, HTTP, garbage).
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"}
)
#: ssl reasons of a client certificate that mutual TLS refused.
_CLIENT_CERTIFICATE = frozenset(
    {
        "PEER_DID_NOT_RETURN_A_CERTIFICATE",
        "CERTIFICATE_VERIFY_FAILED",
        "UNSUPPORTED_CERTIFICATE_PURPOSE",
    }
)

#: ssl reasons of a hello whose server name SNI mode refused (proxy/security/sni.py).
_SERVER_NAME = frozenset({"CALLBACK_FAILED", "TLSV1_ALERT_UNRECOGNIZED_NAME"})


def reason_class(error: BaseException | None) -> str:
    """A small fixed set of label values for a failed listener handshake (for the metric).

    Why a class and not the reason itself: OpenSSL has hundreds of reason strings and a label
    must have few values. ``None`` means the handshake timed out.
    """
    if error is None:
        return "timeout"
    cause = error.__cause__ if error.__cause__ is not None else error
    if isinstance(cause, ssl.SSLCertVerificationError):
        return "client_certificate"
    if isinstance(cause, ssl.SSLError):
        if cause.reason in _NOT_TLS:
            return "not_tls"
        if cause.reason in _CLIENT_CERTIFICATE:
            return "client_certificate"
        if cause.reason in _SERVER_NAME:
            return "server_name"
        if isinstance(cause, ssl.SSLEOFError):
            return "closed"
        return "other"
    return "closed"


def _require_readable(section: str, **files: str) -> None:
    """Raise OSError naming the key and path of the first set file that cannot be read.

    Why: ssl's own errors ("[Errno 2] No such file or directory") do not say which of the
    three files it was, and the operator needs exactly that.
    """
    for key, path in files.items():
        if not path:
            continue
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
            raise OSError(f"{section}.{key} {path}: {reason}") from None


def upstream_context(tls: UpstreamTlsSection) -> ssl.SSLContext:
    """The client-side context of every upstream connection.

    Verification is always on (CERT_REQUIRED): ``ca_file`` or the system trust store.
    ``check_hostname`` may be turned off for clusters whose certificates name other hosts.

    Raises:
        OSError, ssl.SSLError: a file is missing or not PEM (the message names the file).
    """
    _require_readable(
        "upstream.tls", ca_file=tls.ca_file, cert_file=tls.cert_file, key_file=tls.key_file
    )
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file or None)
    context.check_hostname = tls.check_hostname
    if tls.cert_file:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


def _server_context(tls: ClientTlsSection) -> ssl.SSLContext:
    _require_readable(
        "proxy.tls",
        cert_file=tls.cert_file,
        key_file=tls.key_file,
        client_ca_file=tls.client_ca_file,
        crl_file=tls.crl_file,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_ca_file:
        context.load_verify_locations(tls.client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    if tls.crl_file:
        # OpenSSL loads CRLs from a PEM file like CA certificates; the flag makes it check the
        # client's certificate against them (and refuse it when its CA has no CRL there).
        try:
            context.load_verify_locations(tls.crl_file)
        except ssl.SSLError as error:
            raise ssl.SSLError(f"proxy.tls.crl_file {tls.crl_file}: no PEM CRL: {error}") from None
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    return context


class _ReloadableContext:
    """An SSLContext built from files, rebuilt from the same files on demand (reload).

    Task-safety: used from trio tasks only; swapping the context is one assignment.
    """

    #: Which connections it serves (the label of purgatory_proxy_tls_reloads_total).
    side = ""
    #: What its log lines call its files.
    files = ""

    def __init__(self) -> None:
        self.context = self._build()
        self.reloads = 0

    def _build(self) -> ssl.SSLContext:
        raise NotImplementedError

    def _origin(self) -> str:
        """Where the files came from, for the reload's log line."""
        raise NotImplementedError

    def reload(self) -> bool:
        """Re-read the files; keep the old context if they do not load.

        Returns whether the new files are in use. Logs one line either way (file names only).
        """
        try:
            context = self._build()
        except (OSError, ssl.SSLError) as error:
            log.error("%s not reloaded, keeping the previous ones: %s", self.files, error)
            return False
        self.context = context
        self.reloads += 1
        log.info("%s reloaded from %s", self.files, self._origin())
        return True


class ServerTls(_ReloadableContext):
    """The listeners' TLS: certificate, key, client CA and CRL, reloaded on demand."""

    side = "listeners"
    files = "TLS certificates"

    def __init__(
        self,
        tls: ClientTlsSection,
        on_failure: Callable[[str, str], None] | None = None,
        names: ServerNames | None = None,
    ) -> None:
        self._tls = tls
        #: SNI mode's names (proxy/security/sni.py): a hello must name one of them.
        self.names = names
        super().__init__()
        #: Called with (listener, reason class) for every failed handshake, e.g.
        #: ``lambda listener, reason: metrics.tls_handshake_failures.labels(listener,
        #: reason).inc()``; set after construction by whoever owns the metrics.
        self.on_failure = on_failure

    def __repr__(self) -> str:
        mode = "mutual TLS" if self._tls.client_ca_file else "TLS"
        return f"<ServerTls {mode} {self._tls.cert_file}, reloaded {self.reloads}x>"

    def _build(self) -> ssl.SSLContext:
        context = _server_context(self._tls)
        if self.names is not None:
            context.sni_callback = route_server_name
        return context

    def _origin(self) -> str:
        crl = f" and CRL {self._tls.crl_file}" if self._tls.crl_file else ""
        return f"{self._tls.cert_file}{crl}"

    async def accept_named(
        self, stream: trio.SocketStream, timeout_s: float
    ) -> tuple[trio.SSLStream[trio.SocketStream], int | None]:
        """SNI mode's ``accept``: also the broker the hello's server name stands for (None:
        the bootstrap name).

        Raises:
            TlsHandshakeFailed: as ``accept``, and when the hello named no host of ``names``.
        """
        assert self.names is not None, "accept_named is SNI mode's"
        with expect_hello(self.names) as hello:
            try:
                secured = await self.accept(stream, timeout_s, "sni")
            except TlsHandshakeFailed as error:
                if hello.refused:
                    raise TlsHandshakeFailed(f"TLS handshake refused: {hello.refused}") from error
                raise
        if not hello.seen:  # OpenSSL asks on every hello; this guards the assumption
            raise TlsHandshakeFailed("TLS handshake refused: the hello's server name was not read")
        return secured, hello.node_id

    async def accept(
        self, stream: trio.SocketStream, timeout_s: float, listener: str = "client"
    ) -> trio.SSLStream[trio.SocketStream]:
        """Wrap an accepted connection and finish the handshake within ``timeout_s``.

        ``listener`` names the port for ``on_failure`` ("bootstrap", "broker 1", "sni").

        Raises:
            TlsHandshakeFailed: the client is not speaking TLS, presented no or a bad
                certificate (mutual TLS), or stalled; the stream is not closed here.
        """
        # https_compatible: a client that closes without close_notify has simply closed.
        ssl_stream = trio.SSLStream(stream, self.context, server_side=True, https_compatible=True)
        try:
            with trio.fail_after(timeout_s):
                await ssl_stream.do_handshake()
        except trio.TooSlowError:
            self._failed(listener, None)
            raise TlsHandshakeFailed(
                f"TLS handshake not complete within {timeout_s:g} s (connections.frame_timeout_ms)"
            ) from None
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            self._failed(listener, error)
            raise TlsHandshakeFailed(f"TLS handshake failed: {handshake_reason(error)}") from error
        return ssl_stream

    def _failed(self, listener: str, error: BaseException | None) -> None:
        if self.on_failure is not None:
            self.on_failure(listener, reason_class(error))


class UpstreamTls(_ReloadableContext):
    """The upstream connections' TLS: CA and client certificate, reloaded on demand. Every
    upstream dial reads ``context`` when it starts.

    Raises (constructor):
        OSError, ssl.SSLError: a file is missing or not PEM (the message names the file).
    """

    side = "upstream"
    files = "upstream TLS files"

    def __init__(self, tls: UpstreamTlsSection) -> None:
        self._tls = tls
        super().__init__()

    def __repr__(self) -> str:
        return f"<UpstreamTls CA {self._tls.ca_file or 'system'}, reloaded {self.reloads}x>"

    def _build(self) -> ssl.SSLContext:
        return upstream_context(self._tls)

    def _origin(self) -> str:
        return f"CA {self._tls.ca_file or '(the system trust store)'}"
