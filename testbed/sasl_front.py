# Strategy: Tansu 0.6.0 serves neither TLS nor (usable) SASL, so tests put a front before it
# that does what a secured Kafka listener does, then relays to Tansu:
#
#   SaslSession  sans-I/O, one per connection: answers SaslHandshake / SaslAuthenticate the way
#                a Kafka broker does (PLAIN against a known password, SCRAM-SHA-256/512 with
#                scramp's server side, OAUTHBEARER with a known token), hands out
#                session_lifetime_ms and enforces it as Kafka's SocketServer does: a request
#                other than SaslHandshake arriving after the session expired closes the
#                connection (a SaslHandshake then starts a re-authentication, KIP-368).
#                Several accounts (SaslPolicy.users next to username/password); the session
#                knows its principal, and a re-authentication as someone else is refused and
#                closes the connection, as Kafka's ensurePrincipalUnchanged does.
#   SecureFront  a RelayThread on one port: TLS (optionally requiring a client certificate),
#                then the SaslSession, then one request at a time to Tansu and its answer
#                back (Kafka handles one request per connection at a time too), with the
#                broker addresses rewritten to the front (testbed/cluster_rewrite.py)
#                so the proxy never learns Tansu's own port.
#   ACL          SaslPolicy.fetch_denied: those principals' Fetch requests are answered by the
#                front itself, TOPIC_AUTHORIZATION_FAILED for every requested partition (as
#                Kafka answers a consumer without READ on the topic), never relayed.
#   Audit        per connection, readable from the test thread (FrontAudit, one lock): the
#                principal, and per request the api key, the principal at that moment and,
#                for Fetch, the record bytes the answer carried (decoded with wire's codec) or
#                that it was denied. Passthrough tests use it to prove which identity fetched
#                which records.
#
# Used in-process too (tests/unit/proxy/test_secure_upstream.py drives SaslSession directly).
"""A TLS + SASL front for Tansu, and the SASL server logic it uses."""

from __future__ import annotations

import contextlib
import itertools
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import scramp  # type: ignore[import-untyped]  # ships no type hints
import trio

from testbed.cluster_rewrite import ClusterView, NodeAddress, rewrite_response
from testbed.relay_core import RelayThread
from wire.apis import ApiKey, response_header_version
from wire.codec import decode_request, decode_response, encode
from wire.headers import (
    ResponseHeader,
    encode_response_header,
    parse_request_header,
    parse_response_header,
)
from wire.messages import (
    FetchRequest,
    FetchResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)
from wire.messages.fetch_response import FetchableTopicResponse, PartitionData

__all__ = [
    "ALL_MECHANISMS",
    "TOPIC_AUTHORIZATION_FAILED",
    "AuditEntry",
    "CloseConnection",
    "ConnectionAudit",
    "FrontAudit",
    "SaslPolicy",
    "SaslSession",
    "SecureFront",
    "denied_fetch_answer",
    "fetch_denied",
    "fetch_record_bytes",
]

TOPIC_AUTHORIZATION_FAILED = 29
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
                _frame(cid, api_key, version, body),
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
                    _frame(cid, api_key, version, body),
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
        return _frame(cid, api_key, version, body)

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


def denied_fetch_answer(frame_body: bytes | bytearray | memoryview) -> bytes:
    """The front's own answer to a Fetch request frame (no size prefix) from a denied principal.

    TOPIC_AUTHORIZATION_FAILED for every requested partition, no records, high watermark,
    last stable offset and log start offset -1 (Kafka's ``FetchResponse.partitionResponse``
    for an error); a size-prefixed frame, encoded with wire's FetchResponse.
    """
    header, start = parse_request_header(frame_body)
    version = header.api_version
    request = decode_request(ApiKey.FETCH, version, memoryview(frame_body)[start:])
    assert isinstance(request, FetchRequest)
    body = encode(fetch_denied(request), version)
    return _frame(header.correlation_id, ApiKey.FETCH, version, body)


def fetch_denied(request: FetchRequest) -> FetchResponse:
    """An ACL denial of ``request``: TOPIC_AUTHORIZATION_FAILED for every partition asked for
    (also the scripted broker's, tests/support/scripted_broker.py)."""
    return FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic=topic.topic,
                topic_id=topic.topic_id,
                partitions=[
                    PartitionData(
                        partition_index=partition.partition,
                        error_code=TOPIC_AUTHORIZATION_FAILED,
                        high_watermark=-1,
                        records=b"",
                    )
                    for partition in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def fetch_record_bytes(version: int, answer: bytes | bytearray | memoryview) -> int:
    """Total record bytes in a Fetch response frame (no size prefix), over every partition."""
    header_version = response_header_version(ApiKey.FETCH, version)
    _, start = parse_response_header(answer, header_version)
    response = decode_response(ApiKey.FETCH, version, memoryview(answer)[start:])
    assert isinstance(response, FetchResponse)
    return sum(
        len(partition.records or b"")
        for topic in response.responses
        for partition in topic.partitions
    )


@dataclass(frozen=True)
class AuditEntry:
    """One request the front received on a connection."""

    api_key: int
    api_version: int
    #: The connection's principal when the request arrived (None before authentication).
    username: str | None
    #: Fetch only: record bytes in the answer sent back (0 for a denied Fetch).
    record_bytes: int | None = None
    #: Fetch only: answered TOPIC_AUTHORIZATION_FAILED by the front (``fetch_denied``).
    denied: bool = False


@dataclass(frozen=True)
class ConnectionAudit:
    """A snapshot of one connection to the front."""

    number: int
    peer: str
    #: The authenticated principal now (None if it never authenticated).
    username: str | None
    #: Successful authentications, re-authentications (KIP-368) included.
    authentications: int
    requests: tuple[AuditEntry, ...]
    #: Why the front closed it ("" while open, or when the peer closed it).
    closed_because: str = ""

    def api_keys(self) -> set[int]:
        return {entry.api_key for entry in self.requests}

    def fetched_bytes(self) -> int:
        return sum(entry.record_bytes or 0 for entry in self.requests)


class FrontAudit:
    """Every connection's audit, written by the front's thread, read by tests (one lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._connections: dict[int, ConnectionAudit] = {}

    def open(self, peer: str) -> int:
        with self._lock:
            number = next(self._numbers)
            self._connections[number] = ConnectionAudit(number, peer, None, 0, ())
        return number

    def record(self, number: int, entry: AuditEntry, session: SaslSession | None) -> None:
        self._refresh(number, session, entry, "")

    def update(self, number: int, session: SaslSession | None, closed_because: str = "") -> None:
        """Refresh the principal (after a SASL step) and note why the front closed it."""
        self._refresh(number, session, None, closed_because)

    def _refresh(
        self,
        number: int,
        session: SaslSession | None,
        entry: AuditEntry | None,
        closed_because: str,
    ) -> None:
        """The connection's audit with the session's principal, ``entry`` appended (if any)
        and ``closed_because`` noted (if any)."""
        with self._lock:
            old = self._connections[number]
            self._connections[number] = ConnectionAudit(
                number,
                old.peer,
                session.username if session is not None else None,
                session.authentications if session is not None else 0,
                old.requests if entry is None else (*old.requests, entry),
                closed_because or old.closed_because,
            )

    def connections(self) -> list[ConnectionAudit]:
        """Every connection so far, in the order they were accepted."""
        with self._lock:
            return list(self._connections.values())

    def by_user(self, username: str | None) -> list[ConnectionAudit]:
        return [c for c in self.connections() if c.username == username]


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
        #: Per connection: principal, requests, Fetch record bytes (see FrontAudit).
        self.audit = FrontAudit()

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
        policy = self.sasl
        session = SaslSession(policy, trio.current_time) if policy is not None else None
        host, port, *_ = client.socket.getpeername()
        number = self.audit.open(f"{host}:{port}")
        try:
            while True:
                body = await _read_frame(stream)
                if body is None:
                    return
                api_key = int.from_bytes(body[:2], "big")
                version = int.from_bytes(body[2:4], "big")
                user = session.username if session is not None else None
                if policy is not None and session is not None:
                    if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                        self.audit.record(number, AuditEntry(api_key, version, user), session)
                        answer_frame = session.handle(body)
                        self.audit.update(number, session)
                        await stream.send_all(answer_frame)
                        continue
                    session.check(api_key)
                    if api_key == ApiKey.FETCH and user in policy.fetch_denied:
                        entry = AuditEntry(api_key, version, user, record_bytes=0, denied=True)
                        self.audit.record(number, entry, session)
                        await stream.send_all(denied_fetch_answer(body))
                        continue
                await upstream.send_all(len(body).to_bytes(4, "big") + body)
                answer = await _read_frame(upstream)
                if answer is None:
                    return
                record_bytes = None
                if api_key == ApiKey.FETCH:
                    record_bytes = fetch_record_bytes(version, answer)
                self.audit.record(number, AuditEntry(api_key, version, user, record_bytes), session)
                shown = rewrite_response(api_key, version, answer, self._view)
                await stream.send_all(len(shown).to_bytes(4, "big") + bytes(shown))
        except CloseConnection as reason:
            self.closes.append(str(reason))
            self.audit.update(number, session, closed_because=str(reason))
            if reason.answer:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(reason.answer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(stream)
