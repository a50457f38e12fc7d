# Strategy: OpenSSL calls a context's sni_callback in the middle of the server's handshake,
# from inside the do_handshake call the accepting task made, so the callback runs in that
# task's context: a ContextVar set by the task before the handshake is where the callback
# finds the handshake it belongs to, and where the task finds the broker the name stood for
# afterwards. A name that stands for nothing ends the handshake with the alert a TLS server
# sends for it (unrecognized_name), before any certificate is shown.
"""SNI mode's handshake: the server name of a client's hello routed to a broker, or refused."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from proxy.security.server_names import ServerNames, UnknownServerName

__all__ = ["NamedHello", "expect_hello", "route_server_name"]


@dataclass(slots=True)
class NamedHello:
    """What one handshake's hello named: the broker (None: bootstrap), or why it was refused."""

    names: ServerNames
    node_id: int | None = None
    seen: bool = False
    refused: str = ""


_HELLO: ContextVar[NamedHello | None] = ContextVar("purgatory_proxy_sni_hello", default=None)


@contextmanager
def expect_hello(names: ServerNames) -> Iterator[NamedHello]:
    """Around one server handshake in this task: the hello's routing lands in what it yields."""
    hello = NamedHello(names)
    token = _HELLO.set(hello)
    try:
        yield hello
    finally:
        _HELLO.reset(token)


def route_server_name(
    tls: ssl.SSLSocket | ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
) -> int | None:
    """An ``SSLContext.sni_callback``: route the hello's name, or refuse the handshake."""
    hello = _HELLO.get()
    if hello is None:  # a handshake nobody expects a name from
        return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
    hello.seen = True
    try:
        hello.node_id = hello.names.route(server_name)
    except UnknownServerName as error:
        hello.refused = str(error)
        return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
    return None
