# Strategy: with client_auth = "passthrough" the cluster, not the proxy, authenticates each client
# (its SaslHandshake / SaslAuthenticate go to the cluster on the client's own upstream
# connection). The proxy must still know when it may answer that client from its own state (a
# held fetch answered from what the purgatory knows, a fetch skipped because nothing is new):
# only once the cluster has accepted the client, and only while that acceptance lasts.
#
#   confirmed  the cluster answered a request other than ApiVersions / SaslHandshake /
#              SaslAuthenticate on this connection. A Kafka SASL listener closes a connection
#              that sends anything else before its authentication completes, so an answer is
#              the cluster's own word that it is complete, for every mechanism (the proxy
#              does not have to follow PLAIN's one step or SCRAM's two). A listener without
#              SASL answers at once: the cluster accepts anonymous clients, and so does the
#              proxy.
#   expires    a successful SaslAuthenticate that carries session_lifetime_ms (KIP-368) ends
#              the trust at that time; past it the cluster closes the connection on the next
#              request other than a SaslHandshake, and the proxy stops answering from its
#              state so that request reaches the cluster.
#   restart    a SaslHandshake (the first one, or a re-authentication) withdraws the
#              confirmation until the cluster answers a non-SASL request again: the steps of
#              a mechanism cannot be told from its last one by the proxy (an intermediate
#              SCRAM answer succeeds too, with no lifetime).
#
# Until `trusted`, the connection forwards every request as it is (ApiVersions included: the
# only answer from proxy state is the rewrite of the cluster's own ApiVersions answer).
#
# Bounds before authentication (issue 29; proxy/connection/client.py enforces them):
#   in_sasl    until the cluster answers a SaslAuthenticate with success (or accepts the
#              client), the client is where a Kafka SASL listener reads with
#              sasl.server.max.receive.size: its frames are bounded by
#              memory.unauthenticated_request_max_bytes. (Past a successful step the next frame
#              is another small step or, SASL done, any request: the cluster closes a
#              connection that sends one too early, and honest memory charges what is sent.)
#   accepted_once  the time from connect to the cluster's first acceptance is bounded by
#              connections.authentication_timeout_ms; a re-authentication is not timed again
#              (KIP-368: the cluster closes a session that expires).
# No I/O: the client connection feeds it responses and asks it before holding a request.
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
