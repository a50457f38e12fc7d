# Strategy: a connection's reads and writes are timed by deadlines on one cancel scope each,
# armed only when the stream makes them wait, so a frame already in hand, or a write the kernel
# takes at once, moves no deadline (a move costs a few µs). Reads: the idle deadline while
# waiting for a prefix, the frame deadline while waiting for a body, each armed once per piece
# (a peer trickling bytes does not move it). Writes: armed when a write must wait
# for room, cleared once everything queued is written, so a client that does not take an
# answer is cut whatever the answer's size. Streams that are not plain sockets cannot tell in
# advance: there every write arms and clears it.
"""The deadlines a FrameReader and a StreamWriter arm while their stream makes them wait."""

from __future__ import annotations

import math

import trio

__all__ = ["ReadTimeouts", "WriteTimeout"]


class ReadTimeouts:
    """The deadlines a reader arms on ``scope`` when it has to wait (see the module header).

    Args:
        scope: a cancel scope around the reads.
        idle_s: the longest wait for the next frame's prefix.
        frame_s: the longest wait for the rest of a frame once its size is known.

    The frame deadline is cleared as soon as the body is in. The idle deadline (ten minutes
    by default) is left standing after the prefix is in and reused by the next wait when it
    still lies between ``idle_s`` and ``idle_s`` x 1.125 ahead: a scope's deadline move costs
    ~4 µs, and an idle long-polling consumer waits for every request. So the idle timeout
    fires between ``idle_s`` and 12.5 % later, never earlier; whoever waits for something
    other than the client while it stands (the pool) calls ``stand_down`` first.
    """

    __slots__ = ("_phase_s", "frame_s", "idle_s", "scope")

    def __init__(self, scope: trio.CancelScope, idle_s: float, frame_s: float) -> None:
        self.scope = scope
        self.idle_s = idle_s
        self.frame_s = frame_s
        self._phase_s = 0.0  # the deadline armed for the piece being read (0: none)

    @property
    def armed(self) -> bool:
        return self._phase_s != 0.0

    def arm(self, seconds: float) -> None:
        """The read has to wait: at most ``seconds`` from now for this piece (armed once per
        piece, so a peer trickling bytes does not move it)."""
        if self._phase_s:
            return
        self._phase_s = seconds
        earliest = trio.current_time() + seconds
        if seconds != self.idle_s:
            self.scope.deadline = earliest  # a frame deadline: exact, cleared when it is in
        elif not earliest <= self.scope.deadline <= earliest + seconds * _LATE:
            self.scope.deadline = earliest + seconds * _LATE / 2

    def piece_done(self) -> None:
        """The piece is in: clear a frame deadline; an idle one may stand (see class doc)."""
        phase_s, self._phase_s = self._phase_s, 0.0
        if phase_s and phase_s != self.idle_s:
            self.scope.deadline = math.inf

    def stand_down(self) -> None:
        """Clear any deadline: the caller waits for something other than the peer."""
        self._phase_s = 0.0
        if self.scope.deadline != math.inf:
            self.scope.deadline = math.inf


#: How late a reused deadline may fire, as a fraction of its timeout.
_LATE = 0.125


class WriteTimeout:
    """The deadline a StreamWriter arms on ``scope`` while a write waits (see the module header).

    Args:
        scope: a cancel scope around the writer's user (the response pump).
        seconds: the longest a write may wait for the peer to take what it is given.
    """

    __slots__ = ("_armed", "scope", "seconds")

    def __init__(self, scope: trio.CancelScope, seconds: float) -> None:
        self.scope = scope
        self.seconds = seconds
        self._armed = False

    def arm(self) -> None:
        """A write has to wait: it must be done ``seconds`` from now (once per write)."""
        if not self._armed:
            self._armed = True
            self.scope.deadline = trio.current_time() + self.seconds

    def done(self) -> None:
        """Everything queued is written."""
        if self._armed:
            self._armed = False
            self.scope.deadline = math.inf
