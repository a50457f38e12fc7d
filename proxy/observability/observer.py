# Strategy: every client request ends in exactly one RequestRecord, built by the connection
# that served it and handed to the one Observer the server owns. The observer fans it out to the
# places that want it (Prometheus series, the request log), so the request path has one call
# and no callbacks scattered through it, and a new consumer of records is added here only.
"""The one place finished requests are reported to: metrics and the request log."""

from __future__ import annotations

from proxy.observability.metrics import Metrics
from proxy.observability.request_log import RequestLog, RequestRecord

__all__ = ["Observer"]


class Observer:
    """Fan-out of finished requests.

    Args:
        metrics: the proxy's Prometheus series (always kept; cheap).
        request_log: the JSON-lines log, or None when ``[log] requests`` is not set.
    """

    __slots__ = ("metrics", "request_log")

    def __init__(self, metrics: Metrics, request_log: RequestLog | None) -> None:
        self.metrics = metrics
        self.request_log = request_log
        if request_log is not None:
            metrics.attach_request_log(request_log)

    def request_done(self, record: RequestRecord) -> None:
        """Account ``record``; never awaits, never blocks (the log drops when it is full)."""
        self.metrics.observe(record)
        if self.request_log is not None:
            self.request_log.submit_nowait(record)
