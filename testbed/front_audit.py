# Strategy: per connection, readable from the test thread while the front's own thread writes
# it (one lock): the principal, and per request the api key, the principal at that moment and,
# for Fetch, the record bytes the answer carried (decoded with wire's codec) or that it was
# denied. Passthrough tests use it to prove which identity fetched which records. Entries are
# frozen snapshots, so a test reads a consistent view without holding the lock.
"""What the tests' front saw on each connection: principals, requests, Fetch bytes."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from testbed.sasl_server import SaslSession

__all__ = ["AuditEntry", "ConnectionAudit", "FrontAudit"]


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
