# Strategy: h11's way of saying "no event, and here is why": a named singleton that compares by
# identity, prints its name, and cannot be confused with a value (it is not falsy-by-accident,
# not None, not a string). Both the frame decoder (NEED_DATA, CLOSED) and the proxy's sans-I/O
# connection (NEED_REQUEST, REQUESTS_DONE) use it, so there is one class for both.
"""Named sentinels for sans-I/O state machines (``NEED_DATA`` and friends)."""

from __future__ import annotations

from typing import final

__all__ = ["Sentinel"]


@final
class Sentinel:
    """A named singleton returned instead of a value; compare it with ``is``."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name
