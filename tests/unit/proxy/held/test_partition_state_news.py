"""A busy partition, as the proxy knows it (proxy/held/partition_state.py): its readable end
moved twice within the window. The first answer teaches where the end is, not that it moved; an
answer that repeats what is known is no news."""

from __future__ import annotations

from proxy.held.partition_state import PartitionStates

KEY = ("t", 0)
WINDOW_MS = 300


def test_two_moves_within_the_window_make_a_busy_partition() -> None:
    states = PartitionStates()
    states.learn(KEY, 10, 10, 0, 0, now_ms=0)  # where the end is: not a move
    assert not states.busy(KEY, 0, WINDOW_MS)
    states.learn(KEY, 11, 11, 0, 0, now_ms=100)
    assert not states.busy(KEY, 100, WINDOW_MS)  # one move: a record now and then
    states.learn(KEY, 11, 11, 0, 0, now_ms=150)  # the same end again: no news
    assert not states.busy(KEY, 150, WINDOW_MS)
    states.learn(KEY, 12, 12, 0, 0, now_ms=200)
    assert states.busy(KEY, 200, WINDOW_MS)
    assert states.busy(KEY, 100 + WINDOW_MS, WINDOW_MS)
    assert not states.busy(KEY, 101 + WINDOW_MS, WINDOW_MS)  # the older move left the window


def test_a_committed_transaction_moving_the_last_stable_offset_is_news() -> None:
    states = PartitionStates()
    states.learn(KEY, 20, 10, 0, 0, now_ms=0)
    states.learn(KEY, 20, 15, 0, 0, now_ms=50)
    states.learn(KEY, 20, 20, 0, 0, now_ms=90)
    assert states.busy(KEY, 90, WINDOW_MS)


def test_an_unknown_partition_is_not_busy() -> None:
    assert not PartitionStates().busy(KEY, 0, WINDOW_MS)
