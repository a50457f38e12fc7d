"""A fetch purgatory that remembers which keys were checked (check_and_complete), so a test
can see what woke held fetches: a watcher's news, or a produce through the proxy."""

from __future__ import annotations

from collections.abc import Hashable

from proxy.primitives.purgatory import Purgatory

__all__ = ["RecordingPurgatory"]


class RecordingPurgatory(Purgatory):
    """The fetch purgatory, remembering which keys were checked."""

    def __init__(self) -> None:
        super().__init__()
        self.checked: list[Hashable] = []

    def check_and_complete(self, key: Hashable) -> int:
        self.checked.append(key)
        return super().check_and_complete(key)
