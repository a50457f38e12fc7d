# Strategy: a measurement of a floor, beside the proxy. Issue 17 asks the proxy to consume
# 1 KiB records at >= 0.9x direct. How close to direct can *any* forwarder on this machine get?
# Two cut-through relays stand in for the least a forwarder can do: each decodes only the
# responses that name brokers (Metadata, FindCoordinator, DescribeCluster, rewritten as
# bench/_fanin_relay.py does, so the client stays behind the relay) and passes every other
# response on as its bytes arrive, without waiting for the whole frame and without looking
# inside it (no fetch session, no decode, no memory pool):
#
#   copy     reads up to 1 MiB at a time into user space and writes it on (two copies);
#   splice   moves the bytes socket -> pipe -> socket with splice(2), never into user space.
#
# Both lift trio's TCP_NOTSENT_LOWAT like proxy/primitives/stream_writer.py does. The driver runs
# direct, both relays and the proxy of this tree (or of --proxy-tree) side by side, a fresh Tansu
# per cell, the routes' order turning each round; each round's ratio is to that round's direct. What
# the relays lose against direct is the hop itself (one more process on the shared cores, one more
# loopback crossing and two more wake-ups per fetch); what the proxy loses against the splice
# relay is its own work.
from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import os
import socket
import statistics
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import trio

from bench._fanin_relay import RelayStats, _open_listener, _requests
from testbed.cluster_rewrite import ClusterView, NodeAddress, rewrite_response
from testbed.report import command_line, machine_line, publish
from wire.framing import size_prefix

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
_CHUNK_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ on Linux (Python 3.10+ names it; 3.11 has it)
_HEAD = struct.Struct(">ii")  # a response's size prefix and correlation id


async def _read_exactly(sock: trio.socket.SocketType, count: int) -> bytearray:
    buf = bytearray()
    while len(buf) < count:
        try:
            data = os.read(sock.fileno(), count - len(buf))
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)
            continue
        if not data:
            raise EOFError
        buf += data
    return buf


async def _write_all(sock: trio.socket.SocketType, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(sock.fileno(), view) :]
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)


async def _pass_copy(up: trio.socket.SocketType, client: trio.socket.SocketType, n: int) -> None:
    while n:
        try:
            data = os.read(up.fileno(), min(n, _CHUNK_BYTES))
        except BlockingIOError:
            await trio.lowlevel.wait_readable(up)
            continue
        if not data:
            raise EOFError
        n -= len(data)
        await _write_all(client, data)


async def _pass_splice(
    up: trio.socket.SocketType, client: trio.socket.SocketType, n: int, pipe: tuple[int, int]
) -> None:
    read_end, write_end = pipe
    flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
    while n:
        try:
            moved = os.splice(up.fileno(), write_end, min(n, _CHUNK_BYTES), flags=flags)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(up)
            continue
        if not moved:
            raise EOFError
        n -= moved
        while moved:
            try:
                moved -= os.splice(read_end, client.fileno(), moved, flags=flags)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(client)


async def _responses(
    mode: str,
    view: ClusterView,
    client: trio.SocketStream,
    upstream: trio.SocketStream,
    pending: dict[int, tuple[int, int]],
) -> None:
    up, out = upstream.socket, client.socket
    pipe = os.pipe2(os.O_NONBLOCK)
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe[1], _F_SETPIPE_SZ, _CHUNK_BYTES)
    try:
        while True:
            try:
                head = await _read_exactly(up, _HEAD.size)
            except EOFError:
                return
            size, correlation_id = _HEAD.unpack(head)
            named = pending.pop(correlation_id, None)
            if named is not None:  # names brokers: whole, rewritten
                body = head[4:] + await _read_exactly(up, size - 4)
                shown = rewrite_response(*named, memoryview(bytes(body)), view)
                await _write_all(out, size_prefix(len(shown)) + bytes(shown))
            elif mode == "splice":
                await _write_all(out, head)
                await _pass_splice(up, out, size - 4, pipe)
            else:
                await _write_all(out, head)
                await _pass_copy(up, out, size - 4)
    finally:
        os.close(pipe[0])
        os.close(pipe[1])


async def _connection(
    mode: str, view: ClusterView, upstream_address: tuple[str, int], client: trio.SocketStream
) -> None:
    upstream = await trio.open_tcp_stream(*upstream_address)
    for stream in (client, upstream):
        stream.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, 0)
    pending: dict[int, tuple[int, int]] = {}
    try:
        async with trio.open_nursery() as nursery:

            async def requests() -> None:
                try:
                    await _requests(RelayStats(), client, upstream, pending)
                finally:
                    nursery.cancel_scope.cancel()

            async def responses() -> None:
                try:
                    await _responses(mode, view, client, upstream, pending)
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(requests)
            nursery.start_soon(responses)
    except* (OSError, EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # a peer went away: the benchmark's clients close when done
    except* Exception as group:  # a bug here: drop this connection, keep the relay
        for failure in group.exceptions:
            print(f"relay-floor: dropped a connection: {failure!r}", file=sys.stderr, flush=True)
    finally:
        await trio.aclose_forcefully(upstream)
        await trio.aclose_forcefully(client)


async def _serve(mode: str, port: int, upstream_host: str, upstream_port: int) -> None:
    view = ClusterView((NodeAddress(1, "127.0.0.1", port),))
    listener = await _open_listener("127.0.0.1", port)
    handler = functools.partial(_connection, mode, view, (upstream_host, upstream_port))
    await trio.serve_listeners(handler, [listener])


@contextlib.contextmanager
def _route(name: str, proxy_tree: str) -> Iterator[tuple[str, int | None]]:
    """Broker plus forwarder for ``name``; yields the bootstrap and the forwarder's PID."""
    from bench._throughput_routes import BASELINE_PREFIX, running_route
    from testbed.processes import free_port, running_process, running_tansu

    if name in ("copy", "splice"):
        with running_tansu() as broker:
            port = free_port()
            command = [sys.executable, "-P", "-m", "bench.relay_floor", "--serve", name,
                       str(port), broker.host, str(broker.port)]  # fmt: skip
            with running_process(command, port, env={"PYTHONPATH": str(ROOT)}) as pid:
                yield f"127.0.0.1:{port}", pid
        return
    with running_route("direct" if name == "direct" else BASELINE_PREFIX + proxy_tree) as route:
        yield route.bootstrap, route.forwarder_pid


_ROUTES = ("direct", "copy", "splice", "proxy")
#: Issue 17's goal for consuming 1 KiB records, as a ratio to direct.
_GOAL = 0.9


def _measure(rounds: int, records: int, proxy_tree: str) -> tuple[dict[str, list[float]], ...]:
    """Each route's consume rate (MB/s) and forwarder CPU seconds, per round."""
    from bench._throughput_load import (
        ProcessWatch,
        consume_throughput,
        create_topic,
        produce_throughput,
    )

    rates: dict[str, list[float]] = {name: [] for name in _ROUTES}
    cpus: dict[str, list[float]] = {name: [] for name in _ROUTES}
    for round_no in range(rounds):
        turn = round_no % len(_ROUTES)
        for name in _ROUTES[turn:] + _ROUTES[:turn]:
            with _route(name, proxy_tree) as (bootstrap, pid):
                topic = create_topic(bootstrap)
                produce_throughput(bootstrap, topic, 1024, records)
                watch = ProcessWatch(pid) if pid is not None else None
                if watch is not None:
                    watch.start()
                seconds = consume_throughput(bootstrap, topic, records)
                cpus[name].append(watch.stop() if watch is not None else 0.0)
                rates[name].append(records * 1024 / seconds / 1e6)
        print(f"relay_floor: round {round_no + 1}: "
              + ", ".join(f"{name} {rates[name][-1]:.0f} MB/s" for name in _ROUTES),
              file=sys.stderr, flush=True)  # fmt: skip
    return rates, cpus


def _spread(values: list[float]) -> str:
    """Median (quartiles; range) of ``values``."""
    if len(values) < 2:
        return f"{values[0]:.2f}"
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return (f"{statistics.median(values):.2f} ({low:.2f}-{high:.2f}; "
            f"{min(values):.2f}-{max(values):.2f})")  # fmt: skip


def render(
    rates: dict[str, list[float]], cpus: dict[str, list[float]], records: int, command: str,
    loads: tuple[str, str],
) -> str:  # fmt: skip
    direct = rates["direct"]
    ratios = {name: [r / d for r, d in zip(rates[name], direct, strict=True)] for name in _ROUTES}
    per_100_mb = 100e6 / (records * 1024)
    rounds = len(direct)
    lines = [
        "## Consume 1 KiB: the proxy beside the floor of any forwarder (`bench.relay_floor`)",
        "",
        f"{machine_line()} `{command}`",
        "",
        f"Load average (1 / 5 / 15 min) at the start: {loads[0]}; at the end: {loads[1]} "
        "(2 cores, shared with other work).",
        "",
        f"One consumer (librdkafka) reads {records:,} records of 1 KiB, produced beforehand, "
        "straight from Tansu (direct), through a cut-through relay that copies the bytes "
        "through user space (copy), through one that moves them with splice(2) and never "
        "touches them (splice), and through this proxy; a fresh Tansu per cell, the routes in "
        f"turn, {rounds} rounds. Ratios are to the same round's direct: median (quartiles; "
        "range). The relays decode only the answers that name brokers: they are the least any "
        "forwarder does (see the module header).",
        "",
        "| route | MB/s (median) | ratio to direct | forwarder CPU s per 100 MB (median) |",
        "|---|---:|---:|---:|",
    ]
    for name in _ROUTES:
        cpu = "-" if name == "direct" else f"{statistics.median(cpus[name]) * per_100_mb:.3f}"
        lines.append(f"| {name} | {statistics.median(rates[name]):.0f} | "
                     f"{_spread(ratios[name])} | {cpu} |")  # fmt: skip
    against = [p / s for p, s in zip(rates["proxy"], rates["splice"], strict=True)]
    faster = sum(1 for ratio in against if ratio > 1)
    proxy, splice = statistics.median(ratios["proxy"]), statistics.median(ratios["splice"])
    lines += [
        "",
        f"- The proxy against the splice relay, per round: {_spread(against)}; the proxy was "
        f"faster in {faster} of {rounds} rounds.",
        f"- The goal, consume 1 KiB at >= {_GOAL}x direct: the proxy {proxy:.2f}x, a "
        f"forwarder that never touches a record {splice:.2f}x. "
        + ("Met." if proxy >= _GOAL else
           "Not met; " + ("the floor of any forwarder on this machine is under it too."
                          if splice < _GOAL else "the splice relay meets it.")),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _load() -> str:
    return " / ".join(f"{value:.1f}" for value in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--proxy-tree", default=str(ROOT), help="the proxy's source tree")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--serve", nargs=4, metavar=("MODE", "PORT", "HOST", "UPSTREAM_PORT"))
    args = parser.parse_args(argv)
    if args.serve:
        mode, port, host, upstream_port = args.serve
        trio.run(_serve, mode, int(port), host, int(upstream_port))
        return
    started, load_before = time.monotonic(), _load()
    rates, cpus = _measure(args.rounds, args.records, args.proxy_tree)
    command = command_line("bench.relay_floor", argv)
    markdown = render(rates, cpus, args.records, command, (load_before, _load()))
    publish("relay-floor", markdown, started, write=not args.no_write)


if __name__ == "__main__":
    main()
