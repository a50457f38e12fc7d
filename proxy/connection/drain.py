# Strategy: shutdown stops new requests before it stops answers. Every client connection reads
# its requests inside a scope it gets from `Drain.reading()`; `stop_reading()` cancels them all,
# so request pumps end while response pumps still deliver what is owed, and serve() gives the
# handlers connections.shutdown_drain_ms before cancelling them too. A connection that starts
# after shutdown began gets an already-cancelled scope.
"""The shutdown drain: one switch that stops every connection reading new requests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import trio

__all__ = ["Drain"]


class Drain:
    """The reading scopes of all live connections, and whether shutdown has begun.

    Task-safety: touched only from trio tasks of one run, between checkpoints.
    """

    __slots__ = ("_scopes", "_stopping")

    def __init__(self) -> None:
        self._scopes: set[trio.CancelScope] = set()
        self._stopping = False

    def __repr__(self) -> str:
        return f"<Drain readers={len(self._scopes)} stopping={self._stopping}>"

    @contextlib.contextmanager
    def reading(self) -> Iterator[trio.CancelScope]:
        """Scope of a connection's request reader; ``stop_reading`` cancels it."""
        scope = trio.CancelScope()
        if self._stopping:
            scope.cancel()
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)

    @property
    def stopping(self) -> bool:
        """Whether shutdown has begun (connections closing now close for that reason)."""
        return self._stopping

    def stop_reading(self) -> None:
        """Stop every connection from reading new requests; pending responses still flow."""
        self._stopping = True
        for scope in self._scopes:
            scope.cancel()
