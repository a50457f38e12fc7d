# Strategy: a measurement of a floor, not a feature. What does one idle long-poll cycle cost a
# trio process that does nothing but the cycle's I/O and waiting? N client connections (another
# process, plain selectors) each send a small frame and, when the answer comes, the next one;
# the server reads the frame when its socket is readable, holds it for --hold-ms, and writes a
# small answer: the socket dance of an idle consumer's Fetch through the proxy, without Kafka.
# Its CPU time per answer is what no proxy on trio can go under on this machine; the proxy's
# own cost per idle cycle (bench.fanin) minus this is what its Kafka logic costs.
#
# Two servers, each in its own process (bench.idle_cycle runs them beside the proxy):
#   bare      one task per connection: wait_readable, os.read, trio.sleep(hold), os.write:
#             one wake for the request, one for the deadline
#   two-pump  the proxy's shape: a reader task and a writer task per connection, the hold
#             entered by the reader in a shared clock task's list, the writer woken (ParkingLot)
#             when the clock task expires it: one wake for the request, the clock task's wake
#             (shared by all holds due in that millisecond) and one for the writer
"""Prototype measurement: the CPU floor of an idle long-poll cycle in a trio process."""

from __future__ import annotations

import contextlib
import heapq
import os
import selectors
import socket
import subprocess
import sys
import time

__all__ = ["measure_floor"]

_REQUEST = (60).to_bytes(4, "big") + b"r" * 60  # an empty incremental Fetch is ~60 bytes
_ANSWER = (40).to_bytes(4, "big") + b"a" * 40


def _serve(kind: str, hold_ms: int, seconds: float, warmup_s: float) -> None:
    """Serve until ``warmup_s + seconds`` have passed; print CPU µs per answer in the window."""
    import trio

    answers = 0
    hold_s = hold_ms / 1000

    async def bare(sock: trio.socket.SocketType) -> None:
        nonlocal answers
        fd = sock.fileno()
        while True:
            await trio.lowlevel.wait_readable(sock)
            if not os.read(fd, 4096):
                return
            await trio.sleep(hold_s)
            os.write(fd, _ANSWER)
            answers += 1

    due: list[tuple[float, int, trio.lowlevel.ParkingLot]] = []
    clock_lot = trio.lowlevel.ParkingLot()
    counter = 0

    async def clock() -> None:
        while True:
            if not due:
                await clock_lot.park()
                continue
            with trio.move_on_at(due[0][0]):
                await trio.sleep_forever()
            now = trio.current_time()
            while due and due[0][0] <= now:
                heapq.heappop(due)[2].unpark_all()

    async def two_pump(sock: trio.socket.SocketType) -> None:
        nonlocal counter
        fd = sock.fileno()
        owed = trio.lowlevel.ParkingLot()
        pending = [0]

        async def writer() -> None:
            nonlocal answers
            while True:
                await owed.park()
                while pending[0]:
                    pending[0] -= 1
                    os.write(fd, _ANSWER)
                    answers += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            while True:
                await trio.lowlevel.wait_readable(sock)
                if not os.read(fd, 4096):
                    nursery.cancel_scope.cancel()
                    return
                pending[0] += 1
                counter += 1
                heapq.heappush(due, (trio.current_time() + hold_s, counter, owed))
                if clock_lot:
                    clock_lot.unpark()

    async def run() -> None:
        listener = trio.socket.socket()
        await listener.bind(("127.0.0.1", 0))
        listener.listen(4096)
        print(listener.getsockname()[1], flush=True)
        serve = bare if kind == "bare" else two_pump
        async with trio.open_nursery() as nursery:
            if kind != "bare":
                nursery.start_soon(clock)

            async def accept() -> None:
                while True:
                    sock, _ = await listener.accept()
                    nursery.start_soon(serve, sock)

            nursery.start_soon(accept)
            await trio.sleep(warmup_s)
            cpu0, answers0 = time.process_time(), answers
            await trio.sleep(seconds)
            cpu, count = time.process_time() - cpu0, answers - answers0
            print(f"{cpu / count * 1e6:.1f} {count / seconds:.0f}", flush=True)
            nursery.cancel_scope.cancel()

    trio.run(run)


def _clients(port: int, n: int, seconds: float) -> None:
    """N connections, each sending the next request when its answer is in."""
    # Closed on the way out: the next route's N connections must fit the descriptor limit.
    with selectors.DefaultSelector() as selector, contextlib.ExitStack() as sockets:
        for _ in range(n):
            sock = sockets.enter_context(socket.create_connection(("127.0.0.1", port)))
            sock.setblocking(False)
            sock.sendall(_REQUEST)
            selector.register(sock, selectors.EVENT_READ)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for key, _ in selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    if not sock.recv(4096):
                        return
                    sock.sendall(_REQUEST)
                except OSError:  # the server ended its window and went away
                    return


def measure_floor(kind: str, n: int, hold_ms: int, seconds: float) -> tuple[float, float]:
    """Serve ``n`` connections with the ``kind`` server ("bare" or "two-pump") in a process of
    its own for ``seconds`` (after a warm-up); its CPU µs per answer and answers/s."""
    warmup_s = 3.0
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.idle_cycle.floor", kind, str(hold_ms), str(seconds),
         str(warmup_s)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        _clients(port, n, warmup_s + seconds + 1)
        us, rate = server.stdout.readline().split()
        return float(us), float(rate)
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":  # the server process of measure_floor
    _serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
