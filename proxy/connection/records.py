# Strategy: every client request ends in exactly one RequestRecord (proxy/observability/observer.py
# fans it out to metrics and the request log). Building it is pure: the slot carries the request's
# timings (Arrival) and the caller says how it ended; a connection's Recorder reads the clock.
"""The RequestRecord of one finished client request."""

from __future__ import annotations

import trio

from proxy.connection.state import Local, Slot, Unanswered
from proxy.observability.observer import Observer
from proxy.observability.outcomes import Outcome
from proxy.observability.request_log import RequestRecord
from wire.apis import API_BY_KEY

__all__ = ["Recorder", "request_record"]


class Recorder:
    """One connection's reports of its finished requests to the observer."""

    __slots__ = ("_broker", "_connection_id", "_observer")

    def __init__(self, observer: Observer, connection_id: int, broker: str) -> None:
        self._observer = observer
        self._connection_id = connection_id
        self._broker = broker

    def report(
        self,
        slot: Slot | Unanswered,
        error_code: int | None,
        response_bytes: int,
        upstream_done_s: float,
        outcome: Outcome,
        held_ms: float = 0.0,
    ) -> None:
        """Hand one finished request's record to the observer (never blocks).

        ``upstream_done_s``: when the upstream's part ended (response read, or the request
        written for acks=0); the record's latency runs to now.
        """
        self._observer.request_done(
            request_record(slot, self._connection_id, self._broker, error_code, response_bytes,
                           upstream_done_s, outcome, held_ms, trio.current_time())
        )  # fmt: skip


def request_record(
    slot: Slot | Unanswered,
    connection_id: int,
    broker: str,
    error_code: int | None,
    response_bytes: int,
    upstream_done_s: float,
    outcome: Outcome,
    held_ms: float,
    now_s: float,
) -> RequestRecord:
    """The record of ``slot``'s request, answered (or, for acks=0, written upstream) now.

    ``upstream_done_s``: when the upstream's part ended (response read, or the request written
    for acks=0); the record's latency runs from the arrival to ``now_s``. Local answers are
    reported with broker "local" and no upstream time.
    """
    arrival = slot.arrival
    if isinstance(slot, Local):
        (api_key, api_version), client_id = slot.api, None
        broker, upstream_ms = "local", 0.0
    else:
        header = slot.plan.header
        api_key, api_version, client_id = header.api_key, header.api_version, header.client_id
        upstream_ms = (upstream_done_s - arrival.sent_s) * 1000
    spec = API_BY_KEY.get(api_key)
    return RequestRecord(  # positional: the per-request path (keywords cost twice as much)
        arrival.ts,
        spec.name if spec is not None else str(api_key),
        api_version,
        client_id,
        connection_id,
        broker,
        (now_s - arrival.arrival_s) * 1000,  # latency_ms
        upstream_ms,
        held_ms,
        arrival.muted_s * 1000,  # muted_ms
        arrival.request_bytes,
        response_bytes,
        outcome,
        error_code,
    )
