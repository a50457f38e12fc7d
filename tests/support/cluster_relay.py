# Strategy: one TCP relay per Tansu process, all N of them in ONE background thread that
# runs its own `trio.run` (relay_core.RelayThread), so synchronous tests (kafka-python,
# subprocess-based fixtures) can use the cluster without an event loop of their own. The
# listeners are bound before the cluster view is built, because the view names their ports.
#
# Per client connection the relay opens its own connection to its Tansu and runs two
# directions (relay_core.RelayThread._relay):
#
#   requests   client -> Tansu: bytes are forwarded exactly as received; each request's
#              header (api key, version, correlation id) is read on the way so the response
#              can be decoded, and requests are counted by API (relay_core.tee_frames).
#   responses  Tansu -> client: each frame goes through cluster_rewrite.rewrite_response
#              (which returns the same bytes for all but the few APIs that name brokers) and
#              is written back with its size (relay_core.map_frames).
#
# Either side closing ends the connection. A connection that fails for any other reason (a
# frame that does not decode, a correlation id that was never sent, a bug here) is closed and
# the failure is recorded in `errors`, which the tests check, so a relay bug cannot hide
# behind client retries.
#
# Task safety: counts and errors are written by the relay thread and read by the test
# thread, under one threading.Lock.
"""TCP relays that make N one-node Tansu brokers look like one N-node cluster."""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import trio

from testbed.cluster_rewrite import ClusterView, NodeAddress, rewrite_response
from testbed.relay_core import RelayThread, map_frames, tee_frames
from wire.apis import API_BY_KEY
from wire.headers import peek_request_header, peek_response_correlation_id

__all__ = ["RelaySet", "running_relays"]


@dataclass(frozen=True, slots=True)
class _Route:
    node: NodeAddress
    upstream: tuple[str, int]


class RelaySet(RelayThread):
    """N relays (node i -> ``upstreams[i - 1]``) served by one background thread.

    Use :func:`running_relays`; it starts the thread and always stops it.
    """

    def __init__(
        self, upstreams: Sequence[tuple[str, int]], host: str = "127.0.0.1", coordinator: int = 1
    ) -> None:
        if not upstreams:
            raise ValueError("a cluster needs at least one node")
        if not 1 <= coordinator <= len(upstreams):
            raise ValueError(f"coordinator {coordinator} is not one of nodes 1..{len(upstreams)}")
        super().__init__("relays", "cluster-relays")
        self._upstreams = list(upstreams)
        self._host = host
        self._coordinator = coordinator
        self._counts: dict[int, Counter[str]] = {i: Counter() for i in range(1, len(upstreams) + 1)}
        self._view: ClusterView | None = None

    @property
    def view(self) -> ClusterView:
        """The cluster the relays show (available once started)."""
        if self._view is None:
            raise RuntimeError("relays are not running")
        return self._view

    def request_counts(self, node_id: int) -> dict[str, int]:
        """Requests relayed to ``node_id`` so far, by API name (a snapshot)."""
        with self._lock:
            return dict(self._counts[node_id])

    # -- the relay thread ------------------------------------------------------------------

    async def _listen(self, nursery: trio.Nursery) -> None:
        listeners = [
            (await trio.open_tcp_listeners(0, host=self._host))[0] for _ in self._upstreams
        ]
        nodes = tuple(
            NodeAddress(i, self._host, listener.socket.getsockname()[1])
            for i, listener in enumerate(listeners, start=1)
        )
        view = self._view = ClusterView(nodes, self._coordinator)
        for node, upstream, listener in zip(nodes, self._upstreams, listeners, strict=True):
            handler = functools.partial(self._connection, _Route(node, upstream), view)
            serve = functools.partial(trio.serve_listeners, handler_nursery=nursery)
            nursery.start_soon(serve, handler, [listener])

    async def _connection(
        self, route: _Route, view: ClusterView, client: trio.SocketStream
    ) -> None:
        pending: dict[int, tuple[int, int]] = {}
        node_id = route.node.node_id

        def request(frame: memoryview) -> None:
            api_key, api_version, correlation_id = peek_request_header(frame)
            pending[correlation_id] = (api_key, api_version)
            spec = API_BY_KEY.get(api_key)
            with self._lock:
                self._counts[node_id][spec.name if spec else str(api_key)] += 1

        def response(frame: memoryview) -> bytes | bytearray | memoryview:
            api_key, api_version = pending.pop(peek_response_correlation_id(frame))
            return rewrite_response(api_key, api_version, frame, view)

        requests, responses = tee_frames(request), map_frames(response)
        await self._relay(client, route.upstream, requests, responses, where=f"node {node_id}: ")


@contextlib.contextmanager
def running_relays(
    upstreams: Sequence[tuple[str, int]], host: str = "127.0.0.1", coordinator: int = 1
) -> Iterator[RelaySet]:
    """Relays for ``upstreams`` (node i fronts ``upstreams[i - 1]``) for the block.

    ``coordinator`` is the node named by every FindCoordinator answer.

    Resource handling: the relay thread is cancelled and joined on exit, even on error.
    """
    relays = RelaySet(upstreams, host, coordinator)
    try:
        relays.start()
        yield relays
    finally:
        relays.stop()
