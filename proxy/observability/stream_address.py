# Strategy: log lines name a connection by its addresses, and a stream may be a socket under
# any number of TLS layers (or a memory stream in the in-process tests, which has none). One
# function digs the socket out and asks it, so every log line spells addresses alike.
"""The addresses of a stream's two ends, for log lines."""

from __future__ import annotations

import trio

from proxy.address import Address

__all__ = ["stream_address"]


def stream_address(stream: trio.abc.Stream, *, local: bool = False) -> str:
    """``HOST:PORT`` of the peer (or, ``local``, of this end) of ``stream``, under any TLS;
    "?" when it has no socket or the socket no longer knows (a connection reset at once)."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return "?"
    try:
        name = stream.socket.getsockname() if local else stream.socket.getpeername()
    except OSError:
        return "?"
    host, port, *_ = name
    return str(Address(host, port))
