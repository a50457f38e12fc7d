# Strategy: the operator's HTTP endpoint, served from the proxy's own trio run with h11 (sans-I/O
# HTTP: bytes in, events out), the same shape as python-hyper/h11:examples/trio-server.py:
#
#   accept loop -> one task per HTTP connection -> h11.Connection -> route -> response
#
# Three routes, all GET/HEAD: /metrics (prometheus-client's exposition of the proxy's registry),
# /healthz (the process is alive and its trio loop answers) and /readyz (200 when no cause
# blocks readiness, else 503 naming every reason: proxy/observability/readiness.py). Scraping runs
# on the trio thread, between checkpoints, so the scrape-time collectors read the pool and purgatory
# without locks. Each receive is bounded by a timeout so an idle or slowloris scraper cannot
# hold a task forever; h11 bounds the header size itself (16 KiB).
#
# The endpoint must answer when the clients have taken every descriptor they may:
# its connections come out of the descriptors the client cap leaves aside
# (proxy/primitives/descriptors.py) and are at most _MAX_CONNECTIONS; a new one past that closes the
# oldest, so a probe always gets in, however many idle scrapers hold connections. Out of descriptors
# all the same, the accept loop waits and retries (proxy/primitives/accepting.py) instead of ending
# the proxy.
"""HTTP endpoint for operators: /metrics, /healthz, /readyz."""

from __future__ import annotations

import logging
from typing import NoReturn

import h11
import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from proxy.observability.readiness import Readiness
from proxy.primitives.accepting import accept_or_wait

__all__ = ["serve_http"]

log = logging.getLogger("purgatory_proxy.http")

_RECEIVE_TIMEOUT_S = 10.0
#: HTTP connections open at once (their descriptors are in connections.reserved_descriptors).
_MAX_CONNECTIONS = 16
_MAX_RECEIVE_BYTES = 16 * 1024
_TEXT = "text/plain; charset=utf-8"


async def serve_http(
    listener: trio.abc.Listener[trio.SocketStream],
    registry: CollectorRegistry,
    readiness: Readiness,
    handlers: trio.Nursery,
    accept_failures: Counter | None = None,
) -> NoReturn:
    """Accept HTTP connections on ``listener`` forever; each is served in ``handlers``.

    Args:
        listener: a bound listener (the caller binds it, so a bad address fails at start-up).
        registry: what /metrics exposes.
        readiness: what /readyz reports (503 with every reason while any cause blocks).
        handlers: the nursery that owns the connection tasks.
        accept_failures: counts accept() failures for lack of descriptors or memory.

    Resource handling: at most ``_MAX_CONNECTIONS`` connections; a new one closes the oldest.
    """
    open_scopes: dict[trio.CancelScope, None] = {}  # insertion order: oldest first
    async with listener:
        while True:
            stream = await accept_or_wait(listener, accept_failures, "the HTTP endpoint")
            if len(open_scopes) >= _MAX_CONNECTIONS:
                oldest = next(iter(open_scopes))
                del open_scopes[oldest]
                oldest.cancel()
            scope = trio.CancelScope()
            open_scopes[scope] = None
            handlers.start_soon(_serve_in, scope, open_scopes, stream, registry, readiness)


async def _serve_in(
    scope: trio.CancelScope,
    open_scopes: dict[trio.CancelScope, None],
    stream: trio.SocketStream,
    registry: CollectorRegistry,
    readiness: Readiness,
) -> None:
    """Serve one connection in ``scope`` (cancelled to make room for a newer one)."""
    try:
        with scope:
            await _serve_connection(stream, registry, readiness)
    finally:
        open_scopes.pop(scope, None)


async def _serve_connection(
    stream: trio.SocketStream, registry: CollectorRegistry, readiness: Readiness
) -> None:
    """Serve requests on one connection (keep-alive) until either side closes.

    Resource handling: the stream is closed in ``finally``, shielded.
    Error handling: a malformed request gets h11's status hint (400, 431 ...) and the
    connection is closed; a peer that goes away mid-response is not an error of ours.
    """
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            event = await _next_event(conn, stream)
            if isinstance(event, h11.ConnectionClosed) or event is None:
                return
            if isinstance(event, h11.Request):
                await _respond(conn, stream, event, registry, readiness)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
    except h11.RemoteProtocolError as error:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await _send(conn, stream, error.error_status_hint, _TEXT, f"{error}\n".encode())
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)


async def _next_event(conn: h11.Connection, stream: trio.SocketStream) -> object:
    """The next h11 event that is not Data of a request body we ignore, or None on timeout."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            with trio.move_on_after(_RECEIVE_TIMEOUT_S):
                conn.receive_data(await stream.receive_some(_MAX_RECEIVE_BYTES))
                continue
            return None
        if isinstance(event, h11.Data):
            continue  # a GET has no useful body
        return event


async def _respond(
    conn: h11.Connection,
    stream: trio.SocketStream,
    request: h11.Request,
    registry: CollectorRegistry,
    readiness: Readiness,
) -> None:
    # Finish reading the request (and any body) before answering, as h11 requires for reuse.
    while conn.their_state is h11.SEND_BODY:
        if await _next_event(conn, stream) is None:
            return
    target = request.target.split(b"?", 1)[0]
    if request.method not in (b"GET", b"HEAD"):
        status, content_type, body = 405, _TEXT, b"only GET and HEAD\n"
    elif target == b"/metrics":
        status, content_type, body = 200, CONTENT_TYPE_LATEST, generate_latest(registry)
    elif target == b"/healthz":
        status, content_type, body = 200, _TEXT, b"ok\n"
    elif target == b"/readyz":
        reasons = readiness.reasons()
        status, content_type = (503 if reasons else 200), _TEXT
        body = ("not ready: " + "; ".join(reasons) + "\n").encode() if reasons else b"ready\n"
    else:
        status, content_type, body = 404, _TEXT, b"not found: /metrics, /healthz, /readyz\n"
    await _send(
        conn,
        stream,
        status,
        content_type,
        b"" if request.method == b"HEAD" else body,
        content_length=len(body),
    )


async def _send(
    conn: h11.Connection,
    stream: trio.SocketStream,
    status: int,
    content_type: str,
    body: bytes,
    *,
    content_length: int | None = None,
) -> None:
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body) if content_length is None else content_length)),
    ]
    try:
        data = conn.send(h11.Response(status_code=status, headers=headers))
        data += conn.send(h11.Data(data=body)) if body else b""
        data += conn.send(h11.EndOfMessage())
    except h11.LocalProtocolError:
        conn.send_failed()
        raise trio.ClosedResourceError("cannot send a response on this connection") from None
    try:
        await stream.send_all(data)
    except BaseException:
        conn.send_failed()
        raise
