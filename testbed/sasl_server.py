# Strategy: Tansu 0.6.0 serves no usable SASL, so the tests' front (testbed/sasl_front.py)
# plays a secured Kafka listener's part itself. SaslSession is that part, sans-I/O, one per
# connection: it answers SaslHandshake / SaslAuthenticate the way a Kafka broker does (PLAIN
# against a known password, SCRAM-SHA-256/512 with scramp's server side, OAUTHBEARER with a
# known token), hands out session_lifetime_ms and enforces it as Kafka's SocketServer does: a
# request other than SaslHandshake arriving after the session expired closes the connection (a
# SaslHandshake then starts a re-authentication, KIP-368). Several accounts (SaslPolicy.users
# next to username/password); the session knows its principal, and a re-authentication as
# someone else is refused and closes the connection, as Kafka's ensurePrincipalUnchanged does.
#
# Used in-process too (tests/unit/proxy/security/test_secure_upstream.py drives SaslSession
# directly).
"""The broker side of SASL for the tests' front: who may log in, and one connection's state."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import scramp  # type: ignore[import-untyped]  # ships no type hints

from wire.apis import ApiKey, response_header_version
from wire.codec import decode_request, encode
from wire.headers import ResponseHeader, encode_response_header, parse_request_header
from wire.messages import SaslAuthenticateResponse, SaslHandshakeResponse

__all__ = [
    "ALL_MECHANISMS",
    "CloseConnection",
    "SaslPolicy",
    "SaslSession",
    "response_frame",
]

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
ALL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class CloseConnection(Exception):
    """The front closes the connection (after sending ``answer`` if there is one)."""

    def __init__(self, reason: str, answer: bytes = b"") -> None:
        super().__init__(reason)
        self.answer = answer


@dataclass
class SaslPolicy:
    """Who may log in, for how long, and who may not fetch.

    The accounts are ``username``/``password`` plus ``users`` (username -> password); the
    OAUTHBEARER ``token`` logs in as ``username``.
    """

    username: str = "proxy"
    password: str = "proxy-secret"
    token: str = "proxy-token"
    mechanisms: tuple[str, ...] = ALL_MECHANISMS
    session_lifetime_ms: int = 0
    #: More accounts next to ``username``: username -> password.
    users: Mapping[str, str] = field(default_factory=dict)
    #: Principals whose Fetch requests the front answers TOPIC_AUTHORIZATION_FAILED (an ACL
    #: denial) for every requested partition instead of relaying them.
    fetch_denied: frozenset[str] = frozenset()
    #: Every successful authentication (mechanism, monotonic time), re-authentications included.
    log: list[tuple[str, float]] = field(default_factory=list)
    #: Connections closed because their session had expired.
    expired_closes: int = 0

    def accounts(self) -> dict[str, str]:
        """Every username that may log in with a password, and that password."""
        return {self.username: self.password, **self.users}


def response_frame(correlation_id: int, api_key: int, version: int, body: bytes) -> bytes:
    head = encode_response_header(
        ResponseHeader(correlation_id), response_header_version(api_key, version)
    )
    return (len(head) + len(body)).to_bytes(4, "big") + head + body


class SaslSession:
    """One connection's SASL state on the broker side (sans-I/O; ``now_s`` is the clock)."""

    def __init__(self, policy: SaslPolicy, now_s: Callable[[], float]) -> None:
        self.policy = policy
        self._now_s = now_s
        self.mechanism = ""
        self.authenticated = False
        self.expires_at: float | None = None
        #: The authenticated principal (None until the first authentication succeeds).
        self.username: str | None = None
        #: Successful authentications on this connection, re-authentications included.
        self.authentications = 0
        self._scram: scramp.ScramServer | None = None
        self._scram_user = ""
        self._plain_or_token_done = False

    def check(self, api_key: int) -> None:
        """Before serving a non-SASL request: raise CloseConnection unless allowed."""
        if api_key == ApiKey.API_VERSIONS and not self.authenticated:
            return  # Kafka answers ApiVersions before authentication
        if not self.authenticated:
            raise CloseConnection(f"api {api_key} before authentication")
        if self.expires_at is not None and self._now_s() >= self.expires_at:
            self.policy.expired_closes += 1
            raise CloseConnection("session expired (KIP-368): closing as Kafka does")

    def handle(self, frame_body: bytes | bytearray | memoryview) -> bytes:
        """Answer a SaslHandshake / SaslAuthenticate request frame body (no size prefix)."""
        header, start = parse_request_header(frame_body)
        api_key, version, cid = header.api_key, header.api_version, header.correlation_id
        request = decode_request(api_key, version, memoryview(frame_body)[start:])
        if api_key == ApiKey.SASL_HANDSHAKE:
            mechanism = getattr(request, "mechanism", "")
            if mechanism not in self.policy.mechanisms:
                body = encode(
                    SaslHandshakeResponse(
                        error_code=UNSUPPORTED_SASL_MECHANISM,
                        mechanisms=list(self.policy.mechanisms),
                    ),
                    version,
                )
                raise CloseConnection(
                    f"unsupported mechanism {mechanism}",
                    response_frame(cid, api_key, version, body),
                )
            self.mechanism = mechanism
            self._scram = None
            self._plain_or_token_done = False
            body = encode(SaslHandshakeResponse(mechanisms=list(self.policy.mechanisms)), version)
            return response_frame(cid, api_key, version, body)
        if not self.mechanism:
            raise CloseConnection("SaslAuthenticate before SaslHandshake")
        auth_bytes = bytes(getattr(request, "auth_bytes", b""))
        try:
            reply, principal = self._step(auth_bytes)
        except (scramp.ScramException, ValueError, KeyError, UnicodeDecodeError) as error:
            body = encode(
                SaslAuthenticateResponse(
                    error_code=SASL_AUTHENTICATION_FAILED,
                    error_message=f"Authentication failed: invalid credentials with SASL "
                    f"mechanism {self.mechanism}",
                ),
                version,
            )
            raise CloseConnection(
                f"authentication failed: {type(error).__name__}",
                response_frame(cid, api_key, version, body),
            ) from None
        lifetime = 0
        if principal is not None:
            if self.username is not None and principal != self.username:
                # KIP-368: Kafka refuses a re-authentication as another principal.
                body = encode(
                    SaslAuthenticateResponse(
                        error_code=SASL_AUTHENTICATION_FAILED,
                        error_message="Cannot change principals during re-authentication",
                    ),
                    version,
                )
                raise CloseConnection(
                    f"re-authentication as {principal}, was {self.username}",
                    response_frame(cid, api_key, version, body),
                )
            self.username = principal
            self.authentications += 1
            self.authenticated = True
            self.mechanism, mechanism = "", self.mechanism
            lifetime = self.policy.session_lifetime_ms
            self.expires_at = self._now_s() + lifetime / 1000 if lifetime else None
            self.policy.log.append((mechanism, time.monotonic()))
        body = encode(
            SaslAuthenticateResponse(auth_bytes=reply, session_lifetime_ms=lifetime), version
        )
        return response_frame(cid, api_key, version, body)

    def _step(self, auth_bytes: bytes) -> tuple[bytes, str | None]:
        """One SaslAuthenticate step: (reply, the principal once authenticated else None)."""
        policy = self.policy
        accounts = policy.accounts()
        if self.mechanism == "PLAIN":
            _, user, password = auth_bytes.decode().split("\0")
            if user not in accounts or accounts[user] != password:
                raise ValueError("bad user or password")
            return b"", user
        if self.mechanism == "OAUTHBEARER":
            text = auth_bytes.decode()
            if f"auth=Bearer {policy.token}\x01" not in text:
                raise ValueError("bad token")
            return b"", policy.username
        if self._scram is None:
            mechanism = scramp.ScramMechanism(self.mechanism)

            def lookup(name: str) -> tuple[bytes, bytes, bytes, int]:
                self._scram_user = name
                info: tuple[bytes, bytes, bytes, int] = mechanism.make_auth_info(
                    accounts[name], iteration_count=4096
                )
                return info

            self._scram = mechanism.make_server(lookup)
            self._scram.set_client_first(auth_bytes.decode())
            return self._scram.get_server_first().encode(), None
        self._scram.set_client_final(auth_bytes.decode())
        return self._scram.get_server_final().encode(), self._scram_user
