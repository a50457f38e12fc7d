# Strategy: one connection's read-ahead on its own upstream connection (what to read is
# ahead.py's pure prediction): sent after an answer when the client's next fetch is predicted
# and pool memory nobody waits for is at hand, claimed by the next fetch whose first look asks
# the same, and discarded otherwise: by a fetch that asks something else, by the client's
# pause (its time to be claimed passed), or by the connection's end. At most one is out.
"""An active consumer's read-ahead on its own upstream connection: sent, claimed, dropped."""

from __future__ import annotations

import trio
from prometheus_client import Counter

from proxy.held.client_upstream import ClientUpstream
from proxy.held.fetch.ahead import LEAST_WAIT_S, Predictions, ReadAhead, serves
from proxy.observability.metrics import Metrics
from proxy.primitives.memory import MemoryPool
from wire.codec import encode
from wire.headers import RequestHeader
from wire.messages.fetch_request import FetchRequest
from wire.messages.fetch_response import FetchResponse

__all__ = ["ReadAheads"]


class ReadAheads:
    """The read-ahead of one client connection (see the module header).

    Args:
        upstream: the connection's own upstream connection.
        pool: where a read-ahead's response budget comes from, without waiting (KIP-72).
        size_bytes: that budget.
        metrics: read-aheads are counted by outcome.
    """

    __slots__ = ("_ahead", "_discarded", "_expired", "_pool", "_predictions", "_sent",
                 "_size_bytes", "_upstream", "_used")  # fmt: skip

    def __init__(
        self, upstream: ClientUpstream, pool: MemoryPool, size_bytes: int, metrics: Metrics
    ) -> None:
        self._upstream = upstream
        self._pool = pool
        self._size_bytes = size_bytes
        self._ahead: ReadAhead | None = None
        self._predictions = Predictions()
        read_aheads = metrics.read_aheads
        self._sent = read_aheads.labels("sent")
        self._used = read_aheads.labels("used")
        self._discarded = read_aheads.labels("discarded")
        self._expired = read_aheads.labels("expired")

    @property
    def out(self) -> bool:
        """Whether a read-ahead is out."""
        return self._ahead is not None

    def claim(self, first_look: FetchRequest | None, version: int) -> ReadAhead | None:
        """A fetch came whose first look would be ``first_look`` (None: it asks nothing on
        the client's connection at once): the read-ahead out if it asks the same (the fetch
        takes it, lease and answer), else None (one out is discarded)."""
        self._predictions.fetched(first_look)
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if first_look is not None and serves(ahead, first_look, version, self._upstream.generation):
            self._used.inc()
            return ahead
        self._discard(ahead, self._discarded)
        return None

    async def send_after(
        self, looked: FetchRequest, response: FetchResponse, header: RequestHeader, wait_ms: int
    ) -> None:
        """The client is getting ``response`` to the first look ``looked`` (``header``: its
        fetch's, whose max wait was ``wait_ms``): send the read-ahead of its next fetch, if
        one is worth sending (ahead.Predictions) and pool memory nobody waits for is at hand,
        while the pool stays at least half free with it."""
        link, pool, size = self._upstream, self._pool, self._size_bytes
        request = self._predictions.answered(looked, response)
        if request is None or self._ahead is not None or not link.is_open:
            return
        if pool.limit_bytes >= 0 and pool.available_bytes - size < pool.limit_bytes / 2:
            return  # consumers that pause with one out hold at most half the pool
        lease = pool.try_allocate(size)
        if lease is None:
            return
        lease.hand_off()  # released by the request pump (used or discarded) or by abandon
        try:
            version = header.api_version
            correlation_id = await link.send_ahead(
                version, header.client_id, encode(request, version)
            )
        except BaseException:
            lease.release()
            raise
        if correlation_id is None:
            lease.release()
            return
        expires_s = trio.current_time() + max(wait_ms / 1000, LEAST_WAIT_S)
        self._ahead = ReadAhead(request, version, correlation_id, link.generation, lease,
                                expires_s)  # fmt: skip
        self._sent.inc()

    async def idle(self, owed: trio.lowlevel.ParkingLot) -> None:
        """The response pump waits on ``owed`` for its next slot: while a read-ahead is out,
        only until its time to be claimed (sent + the client's max wait, at least
        ``LEAST_WAIT_S``); then it is given up: the client paused or stalls, and its memory
        and upstream answer are not kept for it."""
        ahead = self._ahead
        if ahead is None:
            await owed.park()
            return
        with trio.move_on_at(ahead.expires_s):
            await owed.park()
        ahead = self._ahead
        if ahead is not None and trio.current_time() >= ahead.expires_s:
            self._ahead = None
            self._discard(ahead, self._expired)

    def abandon(self) -> None:
        """The connection ended: the read-ahead out, if any, is discarded."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self._discard(ahead, self._discarded)

    def _discard(self, ahead: ReadAhead, outcome: Counter) -> None:
        """Nobody will take the read-ahead: drop its answer (the connection answers in order:
        it is skipped when it comes), release its memory, count it under ``outcome``."""
        if ahead.generation == self._upstream.generation:
            self._upstream.drop(ahead.correlation_id)
        ahead.release()
        outcome.inc()
