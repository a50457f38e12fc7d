# Strategy: every connection the proxy opens to the cluster comes from open_upstream(): TCP,
# then TLS ([upstream.tls]), then SASL with the proxy's own identity ([upstream.sasl]), all
# within the connect timeout. With neither configured it returns the plain trio.SocketStream,
# so the zero-copy socket reads of proxy/primitives/framed.py keep working unchanged.
#
# With SASL the stream is a SecuredStream (proxy/security/secured_stream.py), which slips a
# re-authentication (KIP-368) between two request frames.
#
# Error handling: an exchange that fails, times out or is cancelled half-way leaves the
# connection unusable (the broker waits for the rest of it), so the stream is closed and its
# users see trio.BrokenResourceError / ClosedResourceError like any broken connection.
#
# Credentials are read at every authentication: password_file and the OAUTHBEARER token file
# (cached until its mtime changes), so rotated secrets are used without a restart.
"""Open connected, secured and authenticated upstream streams, and keep them authenticated."""

from __future__ import annotations

import errno
import os
import random
import ssl
from pathlib import Path

import trio

from proxy.address import Address
from proxy.errors import StartupError, UpstreamUnavailable
from proxy.security.sasl_client import SaslAuthenticationFailed, SaslCredentials
from proxy.security.secured_stream import SecuredStream
from proxy.security.security_config import UpstreamSaslSection, UpstreamTlsSection
from proxy.security.tls import UpstreamTls, handshake_reason

__all__ = ["SaslAuthenticationFailed", "UpstreamSecurity", "keep_authenticated", "open_upstream"]


class UpstreamSecurity:
    """What every upstream connection needs, built once from [upstream.tls] and [upstream.sasl].

    ``tls`` is shared, not copied (``without_sasl`` included): a SIGHUP reload of its files
    reaches every dialer at its next connection.
    """

    def __init__(
        self,
        tls: UpstreamTls | None,
        sasl: UpstreamSaslSection | None,
        rng: random.Random | None = None,
    ) -> None:
        self.tls = tls
        self.sasl = sasl if sasl is not None and sasl.mechanism else None
        self.rng = rng or random.Random()
        self._token: tuple[int, str] | None = None  # (mtime_ns, token)

    @property
    def tls_context(self) -> ssl.SSLContext | None:
        """The context for the next TLS handshake (the newest files that loaded)."""
        return None if self.tls is None else self.tls.context

    def without_sasl(self) -> UpstreamSecurity:
        """The same TLS, no SASL: for connections that carry a client's own authentication."""
        return UpstreamSecurity(self.tls, None, self.rng)

    @classmethod
    def from_config(cls, tls: UpstreamTlsSection, sasl: UpstreamSaslSection) -> UpstreamSecurity:
        """Build it from the [upstream.tls] and [upstream.sasl] sections.

        Raises:
            StartupError: a TLS file is missing or unreadable (one line naming the file).
        """
        try:
            context = UpstreamTls(tls) if tls.enabled else None
        except (OSError, ssl.SSLError) as error:
            raise StartupError(f"[upstream.tls]: cannot load certificates: {error}") from None
        return cls(context, sasl)

    def __repr__(self) -> str:
        mechanism = self.sasl.mechanism if self.sasl else "no SASL"
        return f"<UpstreamSecurity {'TLS' if self.tls_context else 'plaintext'}, {mechanism}>"

    @property
    def plain(self) -> bool:
        return self.tls_context is None and self.sasl is None

    def credentials(self) -> SaslCredentials:
        """The credentials for one authentication, files read now.

        Raises:
            UpstreamUnavailable: a secret file cannot be read (names the file, not the secret).
        """
        sasl = self.sasl
        assert sasl is not None
        try:
            if sasl.mechanism == "OAUTHBEARER":
                return SaslCredentials(sasl.mechanism, "", self._read_token(sasl.token_file))
            return SaslCredentials(sasl.mechanism, sasl.username, sasl.read_password())
        except OSError as error:
            raise UpstreamUnavailable(
                f"cannot read SASL secret file {error.filename}: {error.strerror}"
            ) from None

    def _read_token(self, path: str) -> str:
        mtime_ns = os.stat(path).st_mtime_ns
        if self._token is None or self._token[0] != mtime_ns:
            self._token = (mtime_ns, Path(path).read_text().strip())
        return self._token[1]


def connect_failure(address: Address, error: OSError) -> str:
    """Why a TCP connect to ``address`` failed, in one line. trio reports "all attempts to
    connect ... failed" with the real errors inside; running out of descriptors is the
    proxy's own problem, not the broker's, and is said so."""
    pending: list[BaseException] = [error]
    seen: set[int] = set()
    while pending:
        cause = pending.pop()
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in (errno.EMFILE, errno.ENFILE):
            return (
                f"{address}: cannot open a socket: the proxy is out of file descriptors "
                f"({os.strerror(cause.errno)}); raise its limit (ulimit -n, LimitNOFILE)"
            )
        if isinstance(cause, BaseExceptionGroup):
            pending.extend(cause.exceptions)
        pending.extend(c for c in (cause.__cause__, cause.__context__) if c is not None)
    return f"{address}: {error}"


async def open_upstream(
    address: Address, security: UpstreamSecurity, timeout_s: float
) -> trio.abc.Stream:
    """A connected, secured and authenticated stream to ``address``, within ``timeout_s``.

    Returns the plain trio.SocketStream when neither TLS nor SASL is configured.

    Raises:
        UpstreamUnavailable: connect, TLS handshake or authentication failed or timed out;
            SaslAuthenticationFailed (a subclass) when the broker refused the credentials.
            The message names the address and the reason, never a secret.
    """
    stream: trio.abc.Stream | None = None
    try:
        with trio.fail_after(timeout_s):
            try:
                tcp = await trio.open_tcp_stream(address.host, address.port)
            except OSError as error:
                raise UpstreamUnavailable(connect_failure(address, error)) from error
            stream = tcp
            context = security.tls_context
            if context is not None:
                tls = trio.SSLStream(tcp, context, server_hostname=address.host)
                stream = tls
                try:
                    await tls.do_handshake()
                except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
                    reason = handshake_reason(error)
                    raise UpstreamUnavailable(
                        f"{address}: TLS handshake failed: {reason}"
                    ) from error
            if security.sasl is None:
                return stream
            secured = SecuredStream(stream, address, security, timeout_s)
            stream = secured
            await secured.authenticate()
            return secured
    except trio.TooSlowError:
        if stream is not None:
            await trio.aclose_forcefully(stream)
        raise UpstreamUnavailable(
            f"{address}: not connected and authenticated within {timeout_s:g} s"
        ) from None
    except BaseException:
        if stream is not None:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
        raise


async def keep_authenticated(stream: trio.abc.Stream) -> None:
    """Re-authenticate ``stream`` on time even while idle; returns at once if it has no SASL.

    Run it in the nursery that owns the connection; it returns when the stream closes.
    """
    if isinstance(stream, SecuredStream):
        await stream.keep_authenticated()
