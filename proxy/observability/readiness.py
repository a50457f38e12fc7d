# Strategy: readiness is the absence of reasons not to be ready. Each part of the proxy that can
# make it unready (listeners not bound yet, no upstream metadata yet, the embedded broker gone,
# upstream authentication failing, shutdown under way) blocks under its own cause and clears
# that cause when it recovers; /readyz answers 200 only when no cause is blocked, and 503 with
# every reason otherwise, so an operator reads why without digging through logs. The moment
# the last cause clears is logged (`ready: ...`): "listening on" comes earlier, while the
# cluster may still be unreachable, so the log needs a line that means what /readyz means.
"""Why the proxy is not ready (/readyz), by cause."""

from __future__ import annotations

import logging
from typing import final

__all__ = ["READY_LINE", "Readiness"]

log = logging.getLogger("purgatory_proxy.server")

#: Logged each time the last reason not to be ready clears (docs: README, troubleshooting).
READY_LINE = (
    "ready: listeners bound and the cluster's brokers known; clients can connect (/readyz: 200)"
)


@final
class Readiness:
    """The set of reasons the proxy is not ready, one per cause.

    Task safety: used from the trio thread only (no locks).
    """

    __slots__ = ("_reasons", "_was_ready")

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}
        self._was_ready = False

    def block(self, cause: str, reason: str) -> None:
        """Mark the proxy not ready because of ``cause``; ``reason`` is shown to operators.

        Calling it again for the same cause replaces the reason. The reason is public
        (served by /readyz): never put a secret in it.
        """
        self._reasons[cause] = reason

    def clear(self, cause: str) -> None:
        """``cause`` no longer keeps the proxy from being ready (no-op if it never did); the
        clear that leaves no cause logs READY_LINE (``again`` after the first time)."""
        if self._reasons.pop(cause, None) is not None and not self._reasons:
            log.info("%s%s", READY_LINE, " again" if self._was_ready else "")
            self._was_ready = True

    def reasons(self) -> list[str]:
        """Every reason in the order its cause first blocked; empty means ready."""
        return list(self._reasons.values())

    def causes(self) -> list[str]:
        """The causes blocking now, in the same order (a fixed vocabulary, metric labels)."""
        return list(self._reasons)

    def __bool__(self) -> bool:
        raise TypeError("use Readiness.reasons(): truth of a Readiness is ambiguous")

    def __repr__(self) -> str:
        return f"<Readiness {len(self._reasons)} reasons: {sorted(self._reasons)}>"
