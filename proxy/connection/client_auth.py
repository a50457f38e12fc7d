# Strategy: with client_auth = "passthrough" the cluster authenticates each client; the proxy
# answers a client from its own state only once the cluster has accepted it (an answer to a
# non-SASL request is the cluster's word), and only while that acceptance lasts (KIP-368's
# session lifetime; a SaslHandshake withdraws it). Until then frames are bounded as a Kafka SASL
# listener bounds them. No I/O: the connection feeds it answers and asks it.
"""What the cluster has confirmed about a passthrough client's authentication."""

from __future__ import annotations

import math

from wire.apis import ApiKey, response_header_version
from wire.codec import decode
from wire.headers import parse_response_header
from wire.messages.sasl_authenticate_response import SaslAuthenticateResponse

__all__ = ["ClientAuthentication"]

_SASL_STEPS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class ClientAuthentication:
    """Whether a client connection may be answered from the proxy's own state.

    Args:
        passthrough: clients authenticate to the cluster through the proxy; False (the proxy's
            own identity) trusts every client from the start.
    """

    __slots__ = ("_confirmed", "_expires_s", "accepted_once", "in_sasl", "passthrough")

    def __init__(self, passthrough: bool) -> None:
        self.passthrough = passthrough
        self._confirmed = not passthrough
        self._expires_s = math.inf
        #: The cluster has accepted the client at least once (see the module header).
        self.accepted_once = not passthrough
        #: No SASL step has succeeded and nothing else was answered yet.
        self.in_sasl = passthrough

    def __repr__(self) -> str:
        state = "confirmed" if self._confirmed else "unconfirmed"
        return f"<ClientAuthentication {state}, expires {self._expires_s}>"

    def trusted(self, now_s: float) -> bool:
        """Whether the proxy may answer this client from its own state at ``now_s``."""
        return self._confirmed and now_s < self._expires_s

    def handshake(self) -> None:
        """The client starts to authenticate (again): trust waits for the cluster's word."""
        if self.passthrough:
            self._confirmed = False
            self._expires_s = math.inf

    def answered(self, api_key: int) -> None:
        """The cluster answered a request of ``api_key`` on this client's connection."""
        if api_key not in _SASL_STEPS:
            self._confirmed = self.accepted_once = True
            self.in_sasl = False

    def authenticated(self, session_lifetime_ms: int, now_s: float) -> None:
        """A SaslAuthenticate succeeded; ``session_lifetime_ms`` > 0 bounds the session."""
        self.in_sasl = False
        if session_lifetime_ms > 0:
            self._expires_s = now_s + session_lifetime_ms / 1000

    def learn(
        self,
        api_key: int,
        api_version: int,
        body: memoryview,
        error_code: int | None,
        now_s: float,
    ) -> None:
        """Feed the cluster's answer (``body``: the response, header included) to the state:
        any answer counts (``answered``), a successful SaslAuthenticate's session lifetime
        bounds the trust (``authenticated``)."""
        self.answered(api_key)
        if api_key == ApiKey.SASL_AUTHENTICATE and not error_code:
            _, start = parse_response_header(
                body, response_header_version(ApiKey.SASL_AUTHENTICATE, api_version)
            )
            answer = decode(SaslAuthenticateResponse, body[start:], api_version)
            self.authenticated(answer.session_lifetime_ms, now_s)
