# Strategy: a SecuredStream is a trio Stream wrapper whose callers (a client connection's pumps,
# a BrokerChannel) see only their own frames, while the wrapper can slip a SASL exchange in
# between two request frames to re-authenticate (KIP-368). How:
#
#   - Sending: one lock. A re-authentication holds it for its whole exchange, so it always
#     sits between two whole request frames (every caller sends one whole frame per send_all).
#     It runs when a send finds the re-authentication time passed, or from keep_authenticated()
#     (a task the owner may run) at that time even on an idle connection.
#   - Receiving: the wrapper tracks response frame boundaries (sizes only; no copy while no
#     exchange is pending). Its own requests use negative correlation ids (Kafka clients use
#     0 and up); a response with one of those ids is kept for the exchange and never delivered.
#     Kafka answers a connection's requests in order, so the SASL answers come after every
#     response to earlier requests. Whoever is reading routes them: the owner's reader, if one
#     is waiting on the stream, or else the exchange itself, which keeps what it reads for the
#     owner in a buffer.
#
# Error handling: an exchange that fails, times out or is cancelled half-way leaves the
# connection unusable (the broker waits for the rest of it), so the stream is closed and its
# users see trio.BrokenResourceError / ClosedResourceError like any broken connection.
"""SecuredStream: an authenticated upstream stream that re-authenticates between requests."""

from __future__ import annotations

import itertools
import logging
import random
from typing import Protocol

import trio

from proxy.address import Address
from proxy.errors import UpstreamUnavailable
from proxy.observability.stream_address import stream_address
from proxy.security.sasl_client import (
    AUTHENTICATE_VERSION,
    HANDSHAKE_VERSION,
    SaslClient,
    SaslCredentials,
    reauthentication_delay_ms,
)
from wire.apis import response_header_version
from wire.codec import Message, decode_response, encode
from wire.errors import WireError
from wire.framing import frame
from wire.headers import RequestHeader, encode_request_header, parse_response_header
from wire.messages import SaslAuthenticateResponse, SaslHandshakeResponse

__all__ = ["SaslIdentity", "SecuredStream"]

log = logging.getLogger("purgatory_proxy.upstream_auth")

CLIENT_ID = "purgatory-proxy"
#: First correlation id of the wrapper's own requests; they count up, staying negative.
_FIRST_OWN_ID = -(2**31)
_HEAD_BYTES = 8  # size + correlation id


class SaslIdentity(Protocol):
    """What the stream needs of the proxy's identity (secure_upstream.UpstreamSecurity has it):
    credentials read afresh for each authentication, and the randomness of its timing."""

    rng: random.Random

    def credentials(self) -> SaslCredentials: ...


class SecuredStream(trio.abc.Stream):
    """An authenticated upstream stream that re-authenticates between requests (KIP-368).

    Task-safety: one task may send and one may receive at a time (as for any trio stream);
    keep_authenticated() may run beside them.
    """

    def __init__(
        self, raw: trio.abc.Stream, address: Address, security: SaslIdentity, timeout_s: float
    ) -> None:
        self._raw = raw
        self.address = address
        self._security = security
        self._timeout_s = timeout_s
        self._send_lock = trio.Lock()
        self._recv_lock = trio.Lock()
        self._own_ids = itertools.count(_FIRST_OWN_ID)
        self._expecting: set[int] = set()
        self._answers: dict[int, bytes] = {}
        self._progress = trio.Event()
        self._closed = trio.Event()
        self._ended: str | None = None  # why reading cannot go on (EOF, broken)
        # Receive-side framing (see the Strategy comment).
        self._head = bytearray()  # first bytes of the next frame, undecided
        self._head_delivered = False  # ... already handed to the owner (so: not ours)
        self._left = 0  # bytes of the current owner's frame still to come
        self._capture: bytearray | None = None  # one of our answers being read
        self._capture_left = 0
        self._capture_id = 0
        self._ready = bytearray()  # owner's bytes read by an exchange, not yet delivered
        #: trio time at which to re-authenticate; None: the session does not expire.
        self.reauthenticate_at: float | None = None
        self.session_lifetime_ms = 0
        self.authentications = 0
        #: This end's address: the broker names the connection by it in its own logs.
        self.local = stream_address(raw, local=True)

    def __repr__(self) -> str:
        return (
            f"<SecuredStream {self.local} -> {self.address} authenticated {self.authentications}x>"
        )

    # -- authentication ------------------------------------------------------------------

    async def authenticate(self) -> None:
        """Run one whole SASL exchange; the caller must hold (or not need) the send lock.

        Raises:
            UpstreamUnavailable / SaslAuthenticationFailed: see secure_upstream.open_upstream.
        """
        client = SaslClient(self._security.credentials())
        request: Message | None = client.start()
        version = HANDSHAKE_VERSION
        sent_at = trio.current_time()
        while request is not None:
            sent_at = trio.current_time()
            response = await self._exchange(request, version)
            assert isinstance(response, SaslHandshakeResponse | SaslAuthenticateResponse)
            request = client.receive(response)
            version = AUTHENTICATE_VERSION
        self.session_lifetime_ms = client.session_lifetime_ms
        delay_ms = reauthentication_delay_ms(client.session_lifetime_ms, self._security.rng)
        # Counted from the last request's send: the broker started the session no earlier.
        self.reauthenticate_at = None if delay_ms is None else sent_at + delay_ms / 1000
        self.authentications += 1

    async def _maybe_reauthenticate(self) -> None:
        """With the send lock held: re-authenticate if it is time; on failure, close."""
        due = self.reauthenticate_at
        if due is None or trio.current_time() < due:
            return
        try:
            with trio.fail_after(self._timeout_s):
                await self.authenticate()
        except BaseException as error:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self)
            if isinstance(error, trio.TooSlowError):
                why = f"re-authentication not done within {self._timeout_s:g} s"
                log.warning("upstream %s: %s; closing the connection", self.address, why)
                raise trio.BrokenResourceError(why) from None
            if isinstance(error, UpstreamUnavailable | WireError):
                log.warning("upstream %s: re-authentication failed: %s", self.address, error)
                raise trio.BrokenResourceError(f"re-authentication failed: {error}") from error
            raise
        log.debug(
            "upstream %s re-authenticated on the connection from %s (session %d ms)",
            self.address, self.local, self.session_lifetime_ms,
        )  # fmt: skip

    async def keep_authenticated(self) -> None:
        """Sleep until each re-authentication time and re-authenticate; return once closed."""
        try:
            while self.reauthenticate_at is not None:
                with trio.move_on_at(self.reauthenticate_at):
                    await self._closed.wait()
                    return  # closed: nothing left to keep
                async with self._send_lock:
                    await self._maybe_reauthenticate()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return

    async def _exchange(self, request: Message, version: int) -> Message:
        """Send one of our own requests and wait for its answer (routed by correlation id)."""
        api_key = type(request).API_KEY
        correlation_id = next(self._own_ids)
        header = RequestHeader(api_key, version, correlation_id, CLIENT_ID)
        self._expecting.add(correlation_id)
        try:
            await self._raw.send_all(frame(encode_request_header(header), encode(request, version)))
            body = await self._answer(correlation_id)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            raise UpstreamUnavailable(f"{self.address}: connection lost during SASL") from error
        finally:
            self._expecting.discard(correlation_id)
        _, start = parse_response_header(body, response_header_version(api_key, version))
        return decode_response(api_key, version, memoryview(body)[start:])

    async def _answer(self, correlation_id: int) -> bytes:
        while True:
            body = self._answers.pop(correlation_id, None)
            if body is not None:
                return body
            if self._ended is not None:
                raise UpstreamUnavailable(f"{self.address}: {self._ended} during SASL")
            progress = self._progress
            if self._recv_lock.locked():
                await progress.wait()  # the owner's reader routes our answer to us
                continue
            async with self._recv_lock:
                data = await self._receive_raw(None)
                for part in self._feed(data):
                    self._ready += part

    def _wake(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    # -- the trio Stream interface -------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        async with self._send_lock:
            await self._maybe_reauthenticate()
            await self._raw.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._raw.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            async with self._recv_lock:
                while True:
                    if self._ready:
                        size = len(self._ready) if max_bytes is None else max_bytes
                        chunk = bytes(self._ready[:size])
                        del self._ready[:size]
                        return chunk
                    data = await self._receive_raw(max_bytes)
                    if not data:
                        return data
                    parts = self._feed(data)
                    if len(parts) == 1 and len(parts[0]) == len(data):
                        return data  # nothing of ours in it: no copy
                    if parts:
                        return b"".join(parts)
        finally:
            self._wake()  # an exchange waiting for the lock may read now

    async def _receive_raw(self, max_bytes: int | None) -> bytes | bytearray:
        try:
            data = await self._raw.receive_some(max_bytes)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._ended = "connection broke"
            self._wake()
            raise
        if not data:
            self._ended = "connection closed"
            self._wake()
        return data

    async def aclose(self) -> None:
        self._ended = self._ended or "connection closed"
        self._closed.set()
        self._wake()
        await self._raw.aclose()

    def _feed(self, data: bytes | bytearray) -> list[memoryview]:
        """Split received bytes into the owner's (returned) and our answers (kept)."""
        view = memoryview(data)
        out: list[memoryview] = []
        i, n = 0, len(view)
        while i < n:
            capture = self._capture
            if capture is not None:
                take = min(self._capture_left, n - i)
                capture += view[i : i + take]
                i += take
                self._capture_left -= take
                if not self._capture_left:
                    self._answers[self._capture_id] = bytes(capture[4:])
                    self._capture = None
                    self._wake()
                continue
            if self._left:
                take = min(self._left, n - i)
                out.append(view[i : i + take])
                i += take
                self._left -= take
                continue
            head = self._head
            if not head and not self._expecting:
                # No answer of ours can be in bytes read while we expect none: the owner's.
                self._head_delivered = True
            if self._head_delivered:
                take = min(4 - len(head), n - i)
                head += view[i : i + take]
                out.append(view[i : i + take])
                i += take
                if len(head) == 4:
                    self._left = max(0, int.from_bytes(head, "big", signed=True))
                    head.clear()
                    self._head_delivered = False
                continue
            take = min(_HEAD_BYTES - len(head), n - i)
            head += view[i : i + take]
            i += take
            if len(head) < _HEAD_BYTES:
                continue
            size = int.from_bytes(head[:4], "big", signed=True)
            correlation_id = int.from_bytes(head[4:8], "big", signed=True)
            if correlation_id in self._expecting:
                self._capture = bytearray(head)
                self._capture_id = correlation_id
                self._capture_left = max(0, size + 4 - _HEAD_BYTES)
                if not self._capture_left:
                    self._answers[correlation_id] = bytes(self._capture[4:])
                    self._capture = None
                    self._wake()
            else:
                out.append(memoryview(bytes(head)))
                self._left = max(0, size + 4 - _HEAD_BYTES)
            head.clear()
        return out
