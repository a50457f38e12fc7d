# Strategy: the fan-in benchmark's meter. One relay process sits in front of the broker and
# everything that talks to the broker talks to the relay: in the direct case the benchmark's
# consumers, in the proxy case the proxy (its --upstream is the relay). Counting requests by
# API at the relay therefore measures what the broker is asked, whoever asks.
#
# Per client connection the relay opens its own connection to the broker and runs two tasks:
#
#   requests   client -> broker: bytes forwarded exactly as received; a FrameDecoder beside
#              them reads each request header (api key, version, correlation id) to count it
#              and to know how to decode its answer.
#   responses  broker -> client: split into frames. Only the answers that name brokers
#              (Metadata, FindCoordinator, DescribeCluster) are decoded and rewritten, by
#              testbed/cluster_rewrite.py with a one-node view whose node is this relay:
#              otherwise the proxy would learn the broker's real address from Metadata and
#              connect to it directly, past the meter. Every other answer (Fetch included) is
#              forwarded byte for byte; it is never decoded, so the relay costs the same per
#              request whatever the fetch returns.
#
# Several relay processes may serve one port (SO_REUSEPORT; the kernel spreads connections
# over them): a relay holds two descriptors per connection, so N = 10,000 direct consumers
# need more than one process under a 20,000-descriptor hard limit.
#
# Counts are read over a control port: connect, read one JSON object, done. The relay never
# prints per request; it logs one line when ready and one per connection it had to drop.
"""A counting TCP relay between the fan-in benchmark's clients (or the proxy) and the broker.

Run as ``python -m bench.fanin.relay --listen HOST:PORT --upstream HOST:PORT --control PORT``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import resource
import socket
import sys
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import trio

from testbed.cluster_rewrite import ClusterView, NodeAddress, rewrite_response
from wire.apis import API_BY_KEY, ApiKey
from wire.framing import CLOSED, NEED_DATA, FrameDecoder, size_prefix
from wire.headers import peek_request_header, peek_response_correlation_id

__all__ = ["RelayStats", "main", "serve"]

_RECEIVE_BYTES = 65536
_BACKLOG = 4096
#: Answers that name brokers: the only ones the relay decodes.
_NAMING_APIS = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER})


@dataclass
class RelayStats:
    """What the relay has seen since it started (written by the relay tasks, read by the
    control port's, all in one trio loop)."""

    requests: Counter[str] = field(default_factory=Counter)
    connections_open: int = 0
    connections_total: int = 0
    errors: list[str] = field(default_factory=list)

    def drop(self, line: str) -> None:
        """Record (and log) a connection lost for a reason other than a peer closing it."""
        self.errors.append(line)
        print(f"fanin-relay: {line}", file=sys.stderr, flush=True)

    def snapshot(self) -> dict[str, object]:
        return {
            "requests": dict(self.requests),
            "connections_open": self.connections_open,
            "connections_total": self.connections_total,
            "errors": self.errors[-20:],
            "error_count": len(self.errors),
        }


async def _open_listener(host: str, port: int) -> trio.SocketListener:
    """A listener that other relay processes may share (the kernel balances accepts)."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    await sock.bind((host, port))
    sock.listen(_BACKLOG)
    return trio.SocketListener(sock)


async def _requests(
    stats: RelayStats,
    client: trio.SocketStream,
    upstream: trio.SocketStream,
    pending: dict[int, tuple[int, int]],
) -> None:
    decoder = FrameDecoder()
    requests = stats.requests
    while True:
        data = await client.receive_some(_RECEIVE_BYTES)
        decoder.receive_data(data)
        while True:
            request = decoder.next_frame()
            if request is NEED_DATA or request is CLOSED:
                break
            assert isinstance(request, memoryview)
            api_key, api_version, correlation_id = peek_request_header(request)
            if api_key in _NAMING_APIS:
                pending[correlation_id] = (api_key, api_version)
            spec = API_BY_KEY.get(api_key)
            requests[spec.name if spec else str(api_key)] += 1
        if not data:
            return
        await upstream.send_all(data)


async def _responses(
    view: ClusterView,
    client: trio.SocketStream,
    upstream: trio.SocketStream,
    pending: dict[int, tuple[int, int]],
) -> None:
    decoder = FrameDecoder()
    while True:
        data = await upstream.receive_some(_RECEIVE_BYTES)
        decoder.receive_data(data)
        out: list[bytes | bytearray | memoryview] = []
        while True:
            response = decoder.next_frame()
            if response is NEED_DATA or response is CLOSED:
                break
            assert isinstance(response, memoryview)
            named = pending.pop(peek_response_correlation_id(response), None)
            shown = response if named is None else rewrite_response(*named, response, view)
            out += (size_prefix(len(shown)), shown)
        if out:
            await client.send_all(b"".join(out))
        if not data:
            return


async def _connection(
    stats: RelayStats,
    view: ClusterView,
    upstream_address: tuple[str, int],
    client: trio.SocketStream,
) -> None:
    try:
        upstream = await trio.open_tcp_stream(*upstream_address)
    except OSError as exc:
        stats.drop(f"cannot reach {upstream_address}: {exc!r}")
        await trio.aclose_forcefully(client)
        return
    stats.connections_open += 1
    stats.connections_total += 1
    pending: dict[int, tuple[int, int]] = {}
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_closed, nursery, _requests(stats, client, upstream, pending))
            nursery.start_soon(_until_closed, nursery, _responses(view, client, upstream, pending))
    except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass  # a peer reset the connection: ordinary when the benchmark stops its consumers
    except* Exception as group:  # a frame that does not decode, EMFILE, or a bug here
        for failure in group.exceptions:
            stats.drop(f"dropped a connection: {failure!r}")
    finally:
        stats.connections_open -= 1
        await trio.aclose_forcefully(upstream)
        await trio.aclose_forcefully(client)


async def _until_closed(nursery: trio.Nursery, pump: Coroutine[Any, Any, None]) -> None:
    """Run one direction's pump; when its peer closes, end the other direction too."""
    await pump
    nursery.cancel_scope.cancel()


async def _control(stats: RelayStats, stream: trio.SocketStream) -> None:
    try:
        await stream.send_all(json.dumps(stats.snapshot()).encode() + b"\n")
    finally:
        await trio.aclose_forcefully(stream)


async def serve(
    listen: tuple[str, int],
    upstream: tuple[str, int],
    control_port: int,
    *,
    task_status: trio.TaskStatus[RelayStats] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Relay ``listen`` -> ``upstream`` and serve counts on 127.0.0.1:``control_port``."""
    stats = RelayStats()
    view = ClusterView((NodeAddress(1, *listen),))
    listener = await _open_listener(*listen)
    (control,) = await trio.open_tcp_listeners(control_port, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        handler = functools.partial(_connection, stats, view, upstream)
        nursery.start_soon(
            functools.partial(trio.serve_listeners, handler, [listener], handler_nursery=nursery)
        )
        nursery.start_soon(trio.serve_listeners, functools.partial(_control, stats), [control])
        task_status.started(stats)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def raise_descriptor_limit(target: int | None = None) -> tuple[int, int, int]:
    """Raise this process's RLIMIT_NOFILE; (soft before, soft after, hard after).

    The soft limit goes to the hard limit. With ``target`` above the hard limit, the hard
    limit is raised to ``target`` first (capped at /proc/sys/fs/nr_open), which only root (or
    CAP_SYS_RESOURCE) may do; without that privilege the hard limit stays as it was. Child
    processes started afterwards inherit both limits.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if target is not None and hard != resource.RLIM_INFINITY and hard < target:
        with contextlib.suppress(OSError, ValueError), open("/proc/sys/fs/nr_open") as nr_open:
            target = min(target, int(nr_open.read()))
        with contextlib.suppress(OSError, ValueError):  # not privileged: keep the hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, target))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--upstream", required=True, metavar="HOST:PORT")
    parser.add_argument("--control", required=True, type=int, metavar="PORT")
    args = parser.parse_args(argv)
    raise_descriptor_limit()
    print(f"fanin-relay: {args.listen} -> {args.upstream}", file=sys.stderr, flush=True)
    trio.run(serve, _address(args.listen), _address(args.upstream), args.control)


if __name__ == "__main__":
    main()
