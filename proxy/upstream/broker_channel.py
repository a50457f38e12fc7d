# Strategy: the proxy's own connection to one upstream broker, shared by everything the proxy
# asks on its own behalf (immediate sessionless fetches for held client fetches, the watcher's
# long-poll, metadata). Requests are multiplexed: each gets a fresh correlation id and waits on
# its own slot; one reader task hands each response to the slot with its id. A caller that is
# cancelled simply leaves; its response, if it ever comes, finds no slot and is dropped, so the
# connection never falls out of step.
#
# Kafka answers one connection's requests in order, so a long-poll on a channel delays every
# request behind it: give long-polls their own channel.
#
# Resource handling: the channel connects lazily on the first request and again after a
# failure, through proxy/security/secure_upstream.open_upstream (TLS and SASL when configured).
# Its reader task, and with SASL the task that re-authenticates the connection on time (KIP-368),
# run in the nursery the owner passes in; `aclose` ends them.
"""A multiplexed, reconnecting connection for the proxy's own requests to one broker."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import trio

from proxy.address import Address
from proxy.errors import UpstreamUnavailable
from proxy.primitives.framed import FrameReader, PeerClosed
from proxy.security.secure_upstream import UpstreamSecurity, keep_authenticated
from proxy.upstream.dialer import Dialer, UpstreamDialer
from wire.apis import response_header_version
from wire.codec import Message, decode_response, encode
from wire.errors import WireError
from wire.framing import SIZE_PREFIX_BYTES, frame
from wire.headers import RequestHeader, encode_request_header, parse_response_header

__all__ = ["BrokerChannel"]

log = logging.getLogger("purgatory_proxy.upstream.broker_channel")

#: The client id of the proxy's own requests, so broker logs can tell them apart.
CLIENT_ID = "purgatory-proxy"


@dataclass(slots=True)
class _Waiter:
    api_key: int
    api_version: int
    done: trio.Event = field(default_factory=trio.Event)
    body: memoryview | None = None
    error: UpstreamUnavailable | None = None


class BrokerChannel:
    """The proxy's own requests to ``address``, any number in flight at once.

    Args:
        address: the broker.
        nursery: where the reader task of each connection runs (the server's).
        connect_timeout_s: limit for one connection attempt (TLS and SASL included).
        security: TLS and SASL of upstream connections; None = plaintext, no SASL.
        dialer: how to connect instead (the server's; tests hand a scripted broker's). When
            given, ``connect_timeout_s`` and ``security`` are the dialer's business.
    """

    def __init__(
        self,
        address: Address,
        nursery: trio.Nursery,
        connect_timeout_s: float = 10.0,
        security: UpstreamSecurity | None = None,
        *,
        dialer: Dialer | None = None,
    ) -> None:
        self.address = address
        self._nursery = nursery
        self._dialer: Dialer = dialer or UpstreamDialer(
            security or UpstreamSecurity(None, None), connect_timeout_s
        )
        self._stream: trio.abc.Stream | None = None
        self._connecting = trio.Lock()
        self._sending = trio.Lock()
        self._waiters: dict[int, _Waiter] = {}
        self._correlation_ids = itertools.count(1)
        self.requests_sent = 0
        self.connects = 0

    def __repr__(self) -> str:
        state = "connected" if self._stream else "idle"
        return f"<BrokerChannel {self.address} {state}, {len(self._waiters)} in flight>"

    async def request(self, message: Message, api_version: int) -> Message:
        """Send ``message`` (a request) and return the decoded response.

        Raises:
            UpstreamUnavailable: the broker could not be reached, or the connection broke
                before the response arrived.
            WireError: the response did not decode.
        """
        api_key = type(message).API_KEY
        body = encode(message, api_version)
        stream = await self._connected()
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        header = RequestHeader(
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
            client_id=CLIENT_ID,
        )
        waiter = _Waiter(api_key, api_version)
        self._waiters[correlation_id] = waiter
        try:
            async with self._sending:
                try:
                    await stream.send_all(frame(encode_request_header(header), body))
                except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
                    self._fail(stream, f"send failed: {error}")
                    raise UpstreamUnavailable(f"{self.address}: send failed") from error
            self.requests_sent += 1
            await waiter.done.wait()
        finally:
            self._waiters.pop(correlation_id, None)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.body is not None
        return decode_response(api_key, api_version, waiter.body)

    async def _connected(self) -> trio.abc.Stream:
        async with self._connecting:
            if self._stream is not None:
                return self._stream
            stream = await self._dialer.connect(self.address)
            self._stream = stream
            self.connects += 1
            self._nursery.start_soon(self._read_responses, stream)
            self._nursery.start_soon(keep_authenticated, stream)
            return stream

    async def _read_responses(self, stream: trio.abc.Stream) -> None:
        reader = FrameReader(stream)
        try:
            while True:
                response = memoryview(await reader.next_frame())[SIZE_PREFIX_BYTES:]
                correlation_id = int.from_bytes(response[:4], "big", signed=True)
                waiter = self._waiters.get(correlation_id)
                if waiter is None:
                    continue  # its caller gave up (cancelled); nothing else to do
                version = response_header_version(waiter.api_key, waiter.api_version)
                _, start = parse_response_header(response, version)
                waiter.body = response[start:]
                waiter.done.set()
        except (PeerClosed, WireError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
            self._fail(stream, f"connection lost: {error}")
        finally:
            # Reached without the above only when the proxy cancels the reader (it is
            # stopping): failing the requests still out (a watcher's long poll) is expected.
            with trio.CancelScope(shield=True):
                self._fail(stream, "closed by the proxy", level=logging.DEBUG)
                await trio.aclose_forcefully(stream)

    def _fail(self, stream: trio.abc.Stream, reason: str, level: int = logging.WARNING) -> None:
        """If ``stream`` is the current connection: forget it and fail every request waiting
        (logged at ``level``).

        Every waiter was sent on the current connection (a new one is opened only after the
        old one was forgotten), so failing them all is exact.
        """
        if self._stream is not stream:
            return
        self._stream = None
        if self._waiters:
            log.log(
                level,
                "upstream %s: %s; failing %d request(s)", self.address, reason, len(self._waiters),
                extra={"upstream": str(self.address), "reason": reason},
            )  # fmt: skip
        for waiter in self._waiters.values():
            if not waiter.done.is_set():
                waiter.error = UpstreamUnavailable(f"{self.address}: {reason}")
                waiter.done.set()

    async def aclose(self) -> None:
        """Close the connection; requests still waiting fail with UpstreamUnavailable."""
        stream = self._stream
        if stream is not None:
            self._fail(stream, "channel closed")
            await trio.aclose_forcefully(stream)
