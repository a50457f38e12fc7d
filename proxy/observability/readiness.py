# Strategy: readiness is the absence of reasons not to be ready. Each part of the proxy that can
# make it unready (listeners not bound yet, no upstream metadata yet, the embedded broker gone,
# upstream authentication failing, shutdown under way) blocks under its own cause and clears
# that cause when it recovers; /readyz answers 200 only when no cause is blocked, and 503 with
# every reason otherwise, so an operator reads why without digging through logs.
"""Why the proxy is not ready (/readyz), by cause."""

from __future__ import annotations

from typing import final

__all__ = ["Readiness"]


@final
class Readiness:
    """The set of reasons the proxy is not ready, one per cause.

    Task safety: used from the trio thread only (no locks).
    """

    __slots__ = ("_reasons",)

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def block(self, cause: str, reason: str) -> None:
        """Mark the proxy not ready because of ``cause``; ``reason`` is shown to operators.

        Calling it again for the same cause replaces the reason. The reason is public
        (served by /readyz): never put a secret in it.
        """
        self._reasons[cause] = reason

    def clear(self, cause: str) -> None:
        """``cause`` no longer keeps the proxy from being ready (no-op if it never did)."""
        self._reasons.pop(cause, None)

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
