# Strategy: a client connection's own connection to the broker it targets, shared by its two
# pumps: opened on the first request that needs it, closed when idle (proxy identity only, and
# never once it carried a connection-bound request), its answers read in ledger order within the
# pool (KIP-72) and matched by the sans-I/O Connection. A broker that stays silent past
# connections.upstream_answer_grace_ms after the proxy answered a produce REQUEST_TIMED_OUT is
# taken as hung (a hang guard, not a held operation's deadline).
"""A client connection's own upstream connection: opened on need, closed when idle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from proxy.connection.services import ConnectionServices
from proxy.connection.state import Connection
from proxy.errors import OutOfDescriptors, UpstreamFailed, UpstreamUnavailable
from proxy.primitives.framed import FrameReader, PeerClosed
from proxy.primitives.lease import Lease
from proxy.primitives.stream_writer import Flushable, StreamWriter
from wire.apis import ApiKey
from wire.framing import frame as framed
from wire.headers import RequestHeader, encode_request_header

__all__ = ["CONNECTION_BOUND_APIS", "UpstreamLink", "answered_id"]

_Slot = TypeVar("_Slot")

#: APIs whose state at the broker lives as long as the connection that carried them: a KIP-932
#: share session (since KAFKA-19015 the broker evicts it, as if the member left, when that
#: connection closes; the member's next ShareFetch gets SHARE_SESSION_NOT_FOUND).
CONNECTION_BOUND_APIS = frozenset({ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE})

_SIZE_BYTES = 4


class UpstreamLink:
    """The upstream connection of one client connection (see the module header).

    Args:
        services: where brokers are and how to dial them (``client_dialer``), metrics.
        node_id: the broker the client connection targets (None: the bootstrap port).
        conn: the client connection's ledger of awaited answers.
        shared_sends: both pumps send (passthrough): sends are serialised, none deferred.
        read_ahead: what one receive may bring past the frame being read.
        flush_before_wait: written out before the upstream reader waits (the client's
            writer, whose deferred answers must not wait for the broker).
    """

    def __init__(
        self,
        services: ConnectionServices,
        node_id: int | None,
        conn: Connection,
        *,
        shared_sends: bool,
        read_ahead: int = 0,
        flush_before_wait: Flushable | None = None,
    ) -> None:
        self._services = services
        self._node_id = node_id
        self._conn = conn
        self._shared_sends = shared_sends
        idle_ms = services.settings.upstream_idle_timeout_ms
        self._idle_s = idle_ms / 1000 if idle_ms > 0 and not shared_sends else 0.0
        self._read_ahead = read_ahead
        self._flush_before_wait = flush_before_wait
        self._answer_grace_s = services.settings.upstream_answer_grace_s
        self._late_due_s: float | None = None  # see `give_up`
        self._stream: trio.abc.Stream | None = None
        self._reader: FrameReader | None = None
        self._out: StreamWriter | None = None
        self._used_s = 0.0
        self._pool = services.pool
        # Answers read for a later taker, with their leases (None: paid before they were sent).
        self._early: dict[int, tuple[bytearray, Lease | None]] = {}
        self._answer_lease: Lease | None = None  # the last answer's, until it is written
        self._send_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        self._forwarding = False  # between owing a slot and sending its frame (forward)
        # Set while the response pump sends a read-ahead (send_ahead): the request pump's
        # sends wait for it.
        self._ahead_sent: trio.Event | None = None
        #: How many times the connection was opened: answers awaited on one opening never
        #: come on the next (a read-ahead remembers its opening).
        self.generation = 0

    def bind(self, nursery: trio.Nursery) -> None:
        """Where the idle watch of each opened connection runs (the client connection's)."""
        self._nursery = nursery

    def stay_open(self) -> None:
        """Never close the connection for idleness from now on (CONNECTION_BOUND_APIS)."""
        self._idle_s = 0.0

    @property
    def is_open(self) -> bool:
        """Whether the connection is open now (nothing is opened to find out)."""
        return self._stream is not None

    async def open(self) -> None:
        """Open the upstream connection if there is none (first use, or closed idle).

        Raises:
            UpstreamFailed: no address known, or none of them could be reached.
        """
        if self._stream is not None:
            return
        stream = self._stream = await self._connect()
        self._reader = FrameReader(
            stream, read_ahead=self._read_ahead, flush=self._flush_before_wait
        )
        self._out = StreamWriter(stream)
        self.generation += 1
        self._used_s = trio.current_time()
        self._services.metrics.upstream_open.inc()
        if self._idle_s and self._nursery is not None:
            self._nursery.start_soon(self._close_when_idle, stream)

    async def forward(
        self,
        owe: Callable[[_Slot], Awaitable[None]],
        slot: _Slot,
        frame: bytes | bytearray,
        *,
        may_defer: bool,
    ) -> None:
        """Open the connection, ``owe(slot)`` (which may wait for room), then send ``frame``,
        or defer it when ``may_defer`` (the client's next frame is in hand) and there is room
        in the batch. The connection is not closed for idleness in between.

        Raises:
            UpstreamFailed: it cannot be opened, or broke.
        """
        await self.open()
        while self._ahead_sent is not None:  # the response pump is sending (send_ahead)
            await self._ahead_sent.wait()
        self._forwarding = True
        await owe(slot)
        out = self._out
        assert out is not None
        if may_defer and not self._shared_sends and out.has_room_for(frame):
            self._used_s = trio.current_time()
            out.defer(frame)  # goes with the next write
        else:
            await self.send(frame)
        self._forwarding = False

    async def send(self, frame: bytes | bytearray) -> None:
        """Send ``frame`` on the open connection.

        Raises:
            UpstreamFailed: the connection broke (e.g. the broker closed it after an expired
                KIP-368 session).
        """
        self._used_s = trio.current_time()
        out = self._out
        assert out is not None
        try:
            if self._shared_sends:
                async with self._send_lock:
                    await out.send_all(frame)
            else:
                await out.send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            raise _broken(error) from None

    @property
    def pending_bytes(self) -> int:
        """Bytes deferred and not yet written (FrameReader's flush partner protocol)."""
        return self._out.pending_bytes if self._out is not None else 0

    async def flush(self) -> None:
        """Write what was deferred (nothing to do without a connection)."""
        while self._ahead_sent is not None:  # the response pump is sending (send_ahead)
            await self._ahead_sent.wait()
        out = self._out
        if out is not None and out.pending_bytes:
            try:
                await out.flush()
            except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
                raise _broken(error) from None

    def frame_in_hand(self) -> bool:
        """Whether the next upstream answer is already read (a batch is coming in)."""
        return self._reader is not None and self._reader.frame_in_hand()

    def answer_in_hand(self, correlation_id: int) -> bool:
        """Whether the next upstream answer, already read whole, is ``correlation_id``'s
        (nothing is read)."""
        ready = self._reader.peek() if self._reader is not None else None
        return ready is not None and answered_id(ready) == correlation_id

    async def answer(self, correlation_id: int) -> bytearray:
        """The upstream's answer to ``correlation_id`` (size prefix included), skipping
        answers nobody waits for (acks=0 produces, produces already timed out). Its memory
        is the pool's until ``release_answer`` (or the next ``answer``).

        Raises:
            UpstreamFailed: the broker closed the connection, or answered out of step.
        """
        self.release_answer()
        if self._early:
            early = self._early.pop(correlation_id, None)
            if early is not None:
                frame, self._answer_lease = early
                return frame
        conn = self._conn
        while True:
            frame, lease = await self._read_answer(self._late_due_s)
            self._late_due_s = None  # the broker speaks: not hung
            answered = answered_id(frame)
            if conn.upstream_answer(answered):
                if answered == correlation_id:
                    self._answer_lease = lease
                    return frame
                self._early[answered] = (frame, lease)  # the ledger: it was sent before ours
            elif lease is not None:
                lease.release()

    def release_answer(self) -> None:
        """The last answer is written (or dropped): its memory is the pool's again."""
        lease, self._answer_lease = self._answer_lease, None
        if lease is not None:
            lease.release()

    async def _read_answer(self, due_s: float | None) -> tuple[bytearray, Lease | None]:
        """The next upstream frame, read within the pool unless it was paid for already; its
        first bytes by ``due_s`` unless that is None (see `give_up`)."""
        reader = self._reader
        assert reader is not None  # a slot that awaits an answer opened the connection
        try:
            size = await (reader.next_size() if due_s is None else self._next_size_by(due_s))
            if size is None:
                raise PeerClosed(0)
            lease = None
            if not self._conn.next_answer_paid:
                lease = await self._reserve(size, reader.frame_in_hand())
            try:
                return await reader.finish(), lease
            except BaseException:
                if lease is not None:
                    lease.release()
                raise
        except PeerClosed:
            raise UpstreamFailed("upstream broker closed the connection") from None

    def give_up(self, correlation_id: int) -> None:
        """The proxy answered a produce REQUEST_TIMED_OUT itself: the broker's own answer to
        ``correlation_id`` is skipped when it comes, and is due: a broker that sends nothing
        for the grace from now is taken as hung."""
        self._conn.give_up(correlation_id)
        if self._late_due_s is None:
            self._late_due_s = trio.current_time() + self._answer_grace_s

    async def _next_size_by(self, due_s: float) -> int | None:
        reader = self._reader
        assert reader is not None
        with trio.move_on_at(due_s):
            return await reader.next_size()  # (cancel-safe: a partial size is kept)
        raise UpstreamFailed(
            f"upstream broker sent nothing for {self._answer_grace_s:g} s after a produce it "
            "owed an answer timed out: taken as hung"
        )

    async def _reserve(self, size: int, in_hand: bool) -> Lease:
        """Pool memory for an answer of ``size`` bytes (an answer above the largest
        allocation is charged that much), waiting if the pool is out of memory unless the
        answer is ``in_hand`` already. Handed off: the response pump releases it, and may
        wait for other memory meanwhile (a held fetch's budget) without holding up anyone
        else's release."""
        pool = self._pool
        charge = max(1, min(size, pool.max_allocation_bytes))
        if in_hand:
            return pool.charge(charge)
        lease = pool.try_allocate(charge)
        if lease is None:
            flush = self._flush_before_wait
            if flush is not None and flush.pending_bytes:
                await flush.flush()  # the client's deferred answers do not wait for memory
            lease = await pool.allocate(charge)
        lease.hand_off()
        return lease

    async def own_request(
        self, api_key: int, version: int, client_id: str | None, body: bytes | bytearray
    ) -> bytearray:
        """Send a request of the proxy's own after everything sent so far, and read its
        answer (from the response pump only: it is the connection's one reader)."""
        await self.open()
        correlation_id = self._conn.expect_own_answer()
        header = RequestHeader(api_key, version, correlation_id, client_id)
        await self.send(framed(encode_request_header(header), body))
        return await self.answer(correlation_id)

    async def send_ahead(self, version: int, client_id: str | None, body: bytes) -> int | None:
        """Send a Fetch of the proxy's own (a read-ahead, proxy/held/fetch/ahead.py)
        from the response pump, after everything sent so far; its correlation id, or None
        when it cannot go now (no connection, passthrough, or the request pump is between
        owing a slot and sending it: the read-ahead is skipped, never waited for). Its answer
        is read with ``answer`` or dropped with ``drop``.

        Raises:
            UpstreamFailed: the connection broke while sending.
        """
        if self._stream is None or self._shared_sends or self._forwarding:
            return None
        correlation_id = self._conn.expect_own_answer()
        header = RequestHeader(ApiKey.FETCH, version, correlation_id, client_id)
        sent = self._ahead_sent = trio.Event()
        try:
            await self.send(framed(encode_request_header(header), body))
        finally:
            self._ahead_sent = None
            sent.set()
        return correlation_id

    def drop(self, correlation_id: int) -> None:
        """Nobody wants the answer to ``correlation_id`` any more (a discarded read-ahead):
        forgotten if it was read already, skipped when it comes (Connection.give_up)."""
        self._conn.give_up(correlation_id)
        early = self._early.pop(correlation_id, None)
        if early is not None and early[1] is not None:
            early[1].release()

    async def aclose(self) -> None:
        """Close the connection; answers it still owed are forgotten (the last answer's
        lease stays with the response pump writing it: ``release_answer``)."""
        stream, self._stream, self._reader, self._out = self._stream, None, None, None
        if stream is not None:
            self._conn.forget_upstream()
            for _, lease in self._early.values():
                if lease is not None:
                    lease.release()
            self._early.clear()
            self._late_due_s = None
            self._services.metrics.upstream_open.dec()
            if self._services.descriptors is not None:
                self._services.descriptors.give()
            await trio.aclose_forcefully(stream)

    async def _close_when_idle(self, stream: trio.abc.Stream) -> None:
        """Close the connection once unused for the idle time with nothing awaited on it. One
        still busy then (an answer awaited, or read for a later taker) is looked at again a
        whole idle time later: a deadline already past would make this loop spin."""
        while self._stream is stream:
            await trio.sleep_until(self._used_s + self._idle_s)
            if not self._idle_s:
                return  # told to stay open meanwhile
            if self._stream is not stream or trio.current_time() < self._used_s + self._idle_s:
                continue  # closed, or used meanwhile: wait for the new deadline
            if (
                not self._forwarding
                and not self.pending_bytes
                and self._conn.upstream_idle
                and not self._early  # (an answer read for a later taker: a read-ahead's)
            ):
                await self.aclose()
            else:
                self._used_s = trio.current_time()  # busy: counts as used now

    async def _connect(self) -> trio.abc.Stream:
        """A new upstream connection, holding one descriptor of the budget while it is open.

        Raises:
            OutOfDescriptors: client connections hold every descriptor the budget has.
            UpstreamFailed: no address known, or none of them could be reached.
        """
        budget = self._services.descriptors
        if budget is not None and not budget.try_take():
            raise OutOfDescriptors(
                "no descriptor to spare for its own upstream connection: client connections "
                f"hold all {budget.capacity} the process can spare "
                "(connections.reserved_descriptors and each broker's kept out of RLIMIT_NOFILE)"
            )
        try:
            return await self._dial()
        except BaseException:
            if budget is not None:
                budget.give()
            raise

    async def _dial(self) -> trio.abc.Stream:
        services = self._services
        candidates = services.upstream_for(self._node_id)
        connects = services.metrics.upstream_connects
        if not candidates:
            connects.labels("failed").inc()
            raise UpstreamFailed(f"no upstream address known for broker {self._node_id}")
        errors = []
        for address in candidates:
            try:
                # TLS, and the proxy's own SASL identity unless clients pass theirs (passthrough).
                stream = await services.client_dialer.connect(address)
                connects.labels("ok").inc()
                return stream
            except UpstreamUnavailable as error:
                connects.labels("failed").inc()
                errors.append(str(error))
        raise UpstreamFailed("upstream unreachable (" + "; ".join(errors) + ")")


def _broken(error: trio.BrokenResourceError | trio.ClosedResourceError) -> UpstreamFailed:
    reason = str(error) or "closed by the broker"
    return UpstreamFailed(f"upstream connection broke while sending: {reason}")


def answered_id(frame: bytearray) -> int:
    """The correlation id a response frame (size prefix included) answers."""
    return int.from_bytes(frame[_SIZE_BYTES : _SIZE_BYTES + 4], "big", signed=True)
