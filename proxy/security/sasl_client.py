# Strategy: the proxy's own SASL client as a sans-I/O state machine (h11's shape): it returns
# the request to send next and takes the decoded response, and never touches a socket, a clock
# or trio. proxy/security/secure_upstream.py does the I/O. Messages are the generated wire classes.
#
#   start()                      -> SaslHandshakeRequest v1 (mechanism)
#   receive(SaslHandshakeResponse) -> SaslAuthenticateRequest v1 (first client message)
#   receive(SaslAuthenticateResponse) -> the next SaslAuthenticateRequest, or None when done
#
# Mechanisms: PLAIN (RFC 4616, one message), SCRAM-SHA-256/512 (RFC 5802 through `scramp`,
# client-first then client-final, then the server's signature is checked), OAUTHBEARER
# (RFC 7628 client response "n,,\x01auth=Bearer <token>\x01\x01"). SaslHandshake v1 +
# SaslAuthenticate v1 is what Kafka 2.2+ clients send (KIP-152 framing, KIP-368 lifetime).
#
# Errors carry what an operator needs (mechanism, user, the broker's error code and message)
# and never the secret.
"""Sans-I/O SASL client: SaslHandshake + SaslAuthenticate for the proxy's own identity."""

from __future__ import annotations

import random
from dataclasses import dataclass

import scramp  # type: ignore[import-untyped]  # ships no type hints

from proxy.errors import UpstreamUnavailable
from wire.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

__all__ = [
    "AUTHENTICATE_VERSION",
    "HANDSHAKE_VERSION",
    "SaslAuthenticationFailed",
    "SaslClient",
    "SaslCredentials",
    "reauthentication_delay_ms",
]

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

#: Kafka's client re-authenticates at a random point in 85-95 % of the session's lifetime
#: (SaslClientAuthenticator.ReauthInfo), so many connections do not all do it at once.
REAUTH_LOW, REAUTH_HIGH = 0.85, 0.95


class SaslAuthenticationFailed(UpstreamUnavailable):
    """The broker refused the proxy's credentials or mechanism (never carries the secret)."""


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """One authentication's credentials, read just before it (files may have rotated).

    ``secret`` is the password, or the bearer token for OAUTHBEARER; ``repr`` hides it.
    """

    mechanism: str
    username: str
    secret: str

    def __repr__(self) -> str:
        return f"SaslCredentials({self.mechanism}, user={self.username!r}, secret=***)"


def reauthentication_delay_ms(session_lifetime_ms: int, rng: random.Random) -> int | None:
    """When to re-authenticate, counted from the SaslAuthenticate answer (None: never)."""
    if session_lifetime_ms <= 0:
        return None
    return int(session_lifetime_ms * rng.uniform(REAUTH_LOW, REAUTH_HIGH))


class SaslClient:
    """One SASL exchange. Use once: start(), then receive() each response until None.

    Misuse (receive before start, after done, or after a failure) raises RuntimeError.
    """

    def __init__(self, credentials: SaslCredentials) -> None:
        if credentials.mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {credentials.mechanism!r}")
        self._credentials = credentials
        self._state = "idle"
        self._scram: scramp.ScramClient | None = None
        #: From the final SaslAuthenticate response; 0 = the session does not expire.
        self.session_lifetime_ms = 0

    def __repr__(self) -> str:
        return f"<SaslClient {self._credentials.mechanism} {self._state}>"

    @property
    def done(self) -> bool:
        return self._state == "done"

    def _describe(self) -> str:
        creds = self._credentials
        who = f" as {creds.username!r}" if creds.username else ""
        return f"SASL {creds.mechanism} authentication{who}"

    def _fail(self, why: str) -> SaslAuthenticationFailed:
        self._state = "failed"
        return SaslAuthenticationFailed(f"{self._describe()} failed: {why}")

    def start(self) -> SaslHandshakeRequest:
        """The SaslHandshake request that opens the exchange."""
        if self._state != "idle":
            raise RuntimeError(f"start() in state {self._state}")
        self._state = "handshake"
        return SaslHandshakeRequest(mechanism=self._credentials.mechanism)

    def receive(
        self, response: SaslHandshakeResponse | SaslAuthenticateResponse
    ) -> SaslAuthenticateRequest | None:
        """Take the broker's response; return the next request, or None when authenticated.

        Raises:
            SaslAuthenticationFailed: the broker refused, or its SCRAM proof did not verify.
        """
        if self._state == "handshake":
            if not isinstance(response, SaslHandshakeResponse):
                raise RuntimeError("expected a SaslHandshakeResponse")
            if response.error_code:
                offered = ", ".join(response.mechanisms) or "none"
                raise self._fail(
                    f"broker error {response.error_code} at SaslHandshake "
                    f"(mechanisms it offers: {offered})"
                )
            self._state = "authenticate"
            return SaslAuthenticateRequest(auth_bytes=self._first_message())
        if self._state in ("authenticate", "scram-final"):
            if not isinstance(response, SaslAuthenticateResponse):
                raise RuntimeError("expected a SaslAuthenticateResponse")
            if response.error_code:
                message = response.error_message or "no message"
                raise self._fail(f"broker error {response.error_code}: {message}")
            return self._next(response)
        raise RuntimeError(f"receive() in state {self._state}")

    def _first_message(self) -> bytes:
        creds = self._credentials
        if creds.mechanism == "PLAIN":
            return b"\0" + creds.username.encode() + b"\0" + creds.secret.encode()
        if creds.mechanism == "OAUTHBEARER":
            return b"n,,\x01auth=Bearer " + creds.secret.encode() + b"\x01\x01"
        self._scram = scramp.ScramClient([creds.mechanism], creds.username, creds.secret)
        first: str = self._scram.get_client_first()
        return first.encode()

    def _next(self, response: SaslAuthenticateResponse) -> SaslAuthenticateRequest | None:
        scram = self._scram
        if scram is not None and self._state == "authenticate":
            try:
                scram.set_server_first(bytes(response.auth_bytes).decode())
                final: str = scram.get_client_final()
            except (scramp.ScramException, UnicodeDecodeError) as error:
                raise self._fail(f"bad server-first message ({error})") from None
            self._state = "scram-final"
            return SaslAuthenticateRequest(auth_bytes=final.encode())
        if scram is not None:
            try:
                scram.set_server_final(bytes(response.auth_bytes).decode())
            except (scramp.ScramException, UnicodeDecodeError) as error:
                raise self._fail(f"the broker's SCRAM signature did not verify ({error})") from None
        self.session_lifetime_ms = max(0, response.session_lifetime_ms)
        self._state = "done"
        return None
