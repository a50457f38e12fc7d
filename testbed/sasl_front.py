# Strategy: Tansu 0.6.0 serves neither TLS nor (usable) SASL, so tests put a front before it
# that does what a secured Kafka listener does, then relays to Tansu:
#
#   SaslSession  sans-I/O, one per connection: answers SaslHandshake / SaslAuthenticate the way
#                a Kafka broker does (PLAIN against a known password, SCRAM-SHA-256/512 with
#                scramp's server side, OAUTHBEARER with a known token), hands out
#                session_lifetime_ms and enforces it as Kafka's SocketServer does: a request
#                other than SaslHandshake arriving after the session expired closes the
#                connection (a SaslHandshake then starts a re-authentication, KIP-368).
#   SecureFront  a RelayThread on one port: TLS (optionally requiring a client certificate),
#                then the SaslSession, then one request at a time to Tansu and its answer
#                back (Kafka handles one request per connection at a time too), with the
#                broker addresses rewritten to the front (testbed/cluster_rewrite.py)
#                so the proxy never learns Tansu's own port.
#
# Used in-process too (tests/unit/proxy/test_secure_upstream.py drives SaslSession directly).
"""A TLS + SASL front for Tansu, and the SASL server logic it uses."""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import scramp  # type: ignore[import-untyped]  # ships no type hints
import trio

from testbed.cluster_rewrite import ClusterView, NodeAddress, rewrite_response
from testbed.relay_core import RelayThread
from wire.apis import ApiKey, response_header_version
from wire.codec import decode_request, encode
from wire.headers import ResponseHeader, encode_response_header, parse_request_header
from wire.messages import SaslAuthenticateResponse, SaslHandshakeResponse

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
    """Who may log in, and for how long."""

    username: str = "proxy"
    password: str = "proxy-secret"
    token: str = "proxy-token"
    mechanisms: tuple[str, ...] = ALL_MECHANISMS
    session_lifetime_ms: int = 0
    #: Every successful authentication (mechanism, monotonic time), re-authentications included.
    log: list[tuple[str, float]] = field(default_factory=list)
    #: Connections closed because their session had expired.
    expired_closes: int = 0


def _frame(correlation_id: int, api_key: int, version: int, body: bytes) -> bytes:
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
        self._scram: scramp.ScramServer | None = None
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
                    f"unsupported mechanism {mechanism}", _frame(cid, api_key, version, body)
                )
            self.mechanism = mechanism
            self._scram = None
            self._plain_or_token_done = False
            body = encode(SaslHandshakeResponse(mechanisms=list(self.policy.mechanisms)), version)
            return _frame(cid, api_key, version, body)
        if not self.mechanism:
            raise CloseConnection("SaslAuthenticate before SaslHandshake")
        auth_bytes = bytes(getattr(request, "auth_bytes", b""))
        try:
            reply, done = self._step(auth_bytes)
        except (scramp.ScramException, ValueError, UnicodeDecodeError) as error:
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
                _frame(cid, api_key, version, body),
            ) from None
        lifetime = 0
        if done:
            self.authenticated = True
            self.mechanism, mechanism = "", self.mechanism
            lifetime = self.policy.session_lifetime_ms
            self.expires_at = self._now_s() + lifetime / 1000 if lifetime else None
            self.policy.log.append((mechanism, time.monotonic()))
        body = encode(
            SaslAuthenticateResponse(auth_bytes=reply, session_lifetime_ms=lifetime), version
        )
        return _frame(cid, api_key, version, body)

    def _step(self, auth_bytes: bytes) -> tuple[bytes, bool]:
        policy = self.policy
        if self.mechanism == "PLAIN":
            _, user, password = auth_bytes.decode().split("\0")
            if (user, password) != (policy.username, policy.password):
                raise ValueError("bad user or password")
            return b"", True
        if self.mechanism == "OAUTHBEARER":
            text = auth_bytes.decode()
            if f"auth=Bearer {policy.token}\x01" not in text:
                raise ValueError("bad token")
            return b"", True
        if self._scram is None:
            mechanism = scramp.ScramMechanism(self.mechanism)
            info = mechanism.make_auth_info(policy.password, iteration_count=4096)
            users = {policy.username: info}
            self._scram = mechanism.make_server(lambda name: users[name])
            self._scram.set_client_first(auth_bytes.decode())
            return self._scram.get_server_first().encode(), False
        self._scram.set_client_final(auth_bytes.decode())
        return self._scram.get_server_final().encode(), True


async def _read_frame(stream: trio.abc.ReceiveStream) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = await stream.receive_some(4 - len(head))
        if not chunk:
            return None
        head += chunk
    size = int.from_bytes(head, "big")
    body = bytearray()
    while len(body) < size:
        chunk = await stream.receive_some(size - len(body))
        if not chunk:
            return None
        body += chunk
    return bytes(body)


class SecureFront(RelayThread):
    """TLS and/or SASL in front of one Tansu broker, shown as node 1 at the front's port."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        tls: ssl.SSLContext | None = None,
        sasl: SaslPolicy | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__("secure front", "secure-front")
        self._upstream = upstream
        self._tls = tls
        self.sasl = sasl
        self.host = host
        self.port = 0
        self.closes: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def _listen(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(0, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        self._view = ClusterView((NodeAddress(1, self.host, self.port),))
        nursery.start_soon(trio.serve_listeners, self._serve_one, listeners)

    async def _serve_one(self, client: trio.SocketStream) -> None:
        stream: trio.abc.Stream = client
        try:
            if self._tls is not None:
                stream = trio.SSLStream(client, self._tls, server_side=True)
                with trio.fail_after(5):
                    await stream.do_handshake()
            upstream = await trio.open_tcp_stream(*self._upstream)
        except (trio.BrokenResourceError, trio.TooSlowError, OSError) as error:
            self.closes.append(f"handshake: {error!r}")
            await trio.aclose_forcefully(client)
            return
        session = SaslSession(self.sasl, trio.current_time) if self.sasl is not None else None
        try:
            while True:
                body = await _read_frame(stream)
                if body is None:
                    return
                api_key = int.from_bytes(body[:2], "big")
                version = int.from_bytes(body[2:4], "big")
                if session is not None:
                    if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                        await stream.send_all(session.handle(body))
                        continue
                    session.check(api_key)
                await upstream.send_all(len(body).to_bytes(4, "big") + body)
                answer = await _read_frame(upstream)
                if answer is None:
                    return
                shown = rewrite_response(api_key, version, answer, self._view)
                await stream.send_all(len(shown).to_bytes(4, "big") + bytes(shown))
        except CloseConnection as reason:
            self.closes.append(str(reason))
            if reason.answer:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(reason.answer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(stream)
