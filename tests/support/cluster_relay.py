# Strategy: one TCP relay per Tansu process, all N of them in ONE background thread that
# runs its own `trio.run`, so synchronous tests (kafka-python, subprocess-based fixtures) can
# use the cluster without an event loop of their own. The listeners are bound before the
# cluster view is built, because the view names their ports.
#
# Per client connection the relay opens its own connection to its Tansu and runs two tasks:
#
#   requests   client -> Tansu: bytes are forwarded exactly as received; a FrameDecoder
#              running alongside reads each request's header (api key, version,
#              correlation id) so the response can be decoded, and counts requests by API.
#   responses  Tansu -> client: split into frames; each frame goes through
#              cluster_rewrite.rewrite_response (which returns the same bytes for all
#              but the few APIs that name brokers) and is written back with its size.
#
# Either side closing ends the connection (one cancel scope per connection). A connection
# that fails for any other reason (a frame that does not decode, a correlation id that was
# never sent, a bug here) is closed and the failure is recorded in `errors`, which the tests
# check, so a relay bug cannot hide behind client retries.
#
# Task safety: counts and errors are written by the relay thread and read by the test
# thread, under one threading.Lock.
"""TCP relays that make N one-node Tansu brokers look like one N-node cluster."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import trio

from tests.support.cluster_rewrite import ClusterView, NodeAddress, rewrite_response
from wire.apis import API_BY_KEY
from wire.framing import CLOSED, NEED_DATA, FrameDecoder, size_prefix
from wire.headers import peek_request_header, peek_response_correlation_id

__all__ = ["RelaySet", "running_relays"]

_RECEIVE_BYTES = 65536
_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class _Route:
    node: NodeAddress
    upstream: tuple[str, int]


class RelaySet:
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
        self._upstreams = list(upstreams)
        self._host = host
        self._coordinator = coordinator
        self._lock = threading.Lock()
        self._counts: dict[int, Counter[str]] = {i: Counter() for i in range(1, len(upstreams) + 1)}
        self._errors: list[str] = []
        self._started = threading.Event()
        self._thread = threading.Thread(
            target=self._thread_main, name="cluster-relays", daemon=True
        )
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
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

    @property
    def errors(self) -> list[str]:
        """One line per connection the relay had to drop for a reason other than EOF."""
        with self._lock:
            return list(self._errors)

    def start(self) -> None:
        """Bind the listeners and start serving; returns once clients can connect."""
        self._thread.start()
        if not self._started.wait(_START_TIMEOUT_S):
            raise TimeoutError(f"relays did not start within {_START_TIMEOUT_S} s")
        if self._failure is not None:
            raise RuntimeError("relays failed to start") from self._failure

    def stop(self) -> None:
        """Cancel every relay task and join the thread (idempotent)."""
        if self._token is not None and self._scope is not None and self._thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        if self._thread.ident is not None:
            self._thread.join(_STOP_TIMEOUT_S)
            if self._thread.is_alive():
                raise RuntimeError(f"relay thread still running after {_STOP_TIMEOUT_S} s")

    # -- the relay thread ------------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported to start() or, later, in errors
            self._failure = exc
            with self._lock:
                self._errors.append(f"relay thread died: {exc!r}")
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        listeners = [
            (await trio.open_tcp_listeners(0, host=self._host))[0] for _ in self._upstreams
        ]
        nodes = tuple(
            NodeAddress(i, self._host, listener.socket.getsockname()[1])
            for i, listener in enumerate(listeners, start=1)
        )
        view = self._view = ClusterView(nodes, self._coordinator)
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                for node, upstream, listener in zip(nodes, self._upstreams, listeners, strict=True):
                    route = _Route(node, upstream)
                    handler = functools.partial(self._connection, route, view)
                    nursery.start_soon(
                        functools.partial(
                            trio.serve_listeners, handler, [listener], handler_nursery=nursery
                        )
                    )
                self._started.set()

    async def _connection(
        self, route: _Route, view: ClusterView, client: trio.SocketStream
    ) -> None:
        try:
            upstream = await trio.open_tcp_stream(*route.upstream)
        except OSError as exc:
            self._record_error(f"node {route.node.node_id}: cannot reach {route.upstream}: {exc}")
            await trio.aclose_forcefully(client)
            return
        pending: dict[int, tuple[int, int]] = {}
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._requests, route, client, upstream, pending, nursery)
                nursery.start_soon(self._responses, view, client, upstream, pending, nursery)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # a peer reset the connection: ordinary for clients that are shutting down
        except* Exception as group:  # WireError, an unknown correlation id, or a bug
            for failure in group.exceptions:
                self._record_error(f"node {route.node.node_id}: dropped a connection: {failure!r}")
        finally:
            await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(client)

    async def _requests(
        self,
        route: _Route,
        client: trio.SocketStream,
        upstream: trio.SocketStream,
        pending: dict[int, tuple[int, int]],
        nursery: trio.Nursery,
    ) -> None:
        decoder = FrameDecoder()
        while True:
            data = await client.receive_some(_RECEIVE_BYTES)
            decoder.receive_data(data)
            while True:
                request = decoder.next_frame()
                if request is NEED_DATA or request is CLOSED:
                    break
                assert isinstance(request, memoryview)
                api_key, api_version, correlation_id = peek_request_header(request)
                pending[correlation_id] = (api_key, api_version)
                spec = API_BY_KEY.get(api_key)
                with self._lock:
                    self._counts[route.node.node_id][spec.name if spec else str(api_key)] += 1
            if not data:
                nursery.cancel_scope.cancel()
                return
            await upstream.send_all(data)

    async def _responses(
        self,
        view: ClusterView,
        client: trio.SocketStream,
        upstream: trio.SocketStream,
        pending: dict[int, tuple[int, int]],
        nursery: trio.Nursery,
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
                api_key, api_version = pending.pop(peek_response_correlation_id(response))
                shown = rewrite_response(api_key, api_version, response, view)
                out += (size_prefix(len(shown)), shown)
            if out:
                await client.send_all(b"".join(out))
            if not data:
                nursery.cancel_scope.cancel()
                return

    def _record_error(self, line: str) -> None:
        with self._lock:
            self._errors.append(line)


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
