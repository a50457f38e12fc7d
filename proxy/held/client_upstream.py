# Strategy: a held request that concerns one client connection uses that connection's own
# upstream connection: an active consumer's first look and read-ahead go on it, a passthrough
# client's reads go on it under its identity, and a held produce's answer comes on it. The
# connection owns that link; the held path names only what it asks of it, here.
"""What the held path asks of a client connection's own upstream connection."""

from __future__ import annotations

from typing import Protocol

__all__ = ["ClientUpstream"]


class ClientUpstream(Protocol):
    """A client connection's own upstream connection (proxy/connection/upstream_link.py), as
    the held path uses it. Answers come in the order the requests went: the connection's
    ledger matches them."""

    @property
    def is_open(self) -> bool:
        """Whether the connection is open now (nothing is opened to find out)."""
        ...

    @property
    def generation(self) -> int:
        """How many times it was opened: an answer awaited on one opening never comes on
        the next."""
        ...

    async def flush(self) -> None:
        """Write what was deferred (the answer about to be awaited may need it)."""
        ...

    def answer_in_hand(self, correlation_id: int) -> bool:
        """Whether the answer to ``correlation_id`` is read already (nothing is read)."""
        ...

    async def answer(self, correlation_id: int) -> bytearray:
        """The broker's answer to ``correlation_id``, size prefix included."""
        ...

    def give_up(self, correlation_id: int) -> None:
        """The client was answered without the broker: its answer to ``correlation_id`` is
        skipped when it comes, and is due (a broker silent too long after is taken as hung)."""
        ...

    async def own_request(
        self, api_key: int, version: int, client_id: str | None, body: bytes | bytearray
    ) -> bytearray:
        """Send a request of the proxy's own after everything sent so far; its answer."""
        ...

    async def send_ahead(self, version: int, client_id: str | None, body: bytes) -> int | None:
        """Send a Fetch of the proxy's own now, if it can go without waiting; its correlation
        id (None: not sent)."""
        ...

    def drop(self, correlation_id: int) -> None:
        """Nobody wants the answer to ``correlation_id`` any more (skipped when it comes)."""
        ...
