# Strategy: one small tree of typed errors for everything the proxy (not the wire codec)
# raises, so callers catch by meaning, never by message. The tree follows the style guide:
#
#     ProxyError
#     ├── PoolExhausted           allocate_nowait found the pool out of memory
#     ├── PoolMisuse (abstract)   a caller broke the pool's contract: a bug, not load
#     │   ├── InvalidAllocation   size < 1 or above the largest single allocation
#     │   ├── InvalidRelease      a lease released twice, or released to a foreign pool
#     │   └── WouldDeadlock       a lease holder waiting for more memory (KIP-72's rule)
#     ├── UpstreamUnavailable     raised ``from`` trio.BrokenResourceError
#     ├── OperationExpired        purgatory deadline passed -> REQUEST_TIMED_OUT
#     ├── StartupError            the proxy cannot start (port in use, no broker): one line
#     │   └── BrokerPortUnavailable   a broker's pinned port cannot be bound (which setting)
#     └── ConnectionClosed (abstract)  why one client connection ended; ``kind`` is the label
#         ├── ClientProtocolError      the client sent what Kafka would refuse (protocol_error)
#         ├── ClientClosed             the client went away inside a frame (client_closed)
#         │   └── ClientLeft           ... or with answers owed: a normal exit (client_closed)
#         ├── IdleTimeout              no request for connections.idle_timeout_ms
#         ├── FrameTimeout             a frame not complete in connections.frame_timeout_ms
#         ├── SendTimeout              an answer not taken in connections.send_timeout_ms
#         ├── AuthenticationTimeout    passthrough: not accepted by the cluster in time
#         ├── UpstreamFailed           no upstream, or it broke, closed or answered out of order
#         ├── OutOfDescriptors         its own upstream connection would exceed the budget
#         └── ConnectionBroken         a stream broke under us (reset, closed resource)
#
# A connection ends with exactly one ConnectionClosed (the first one noted wins): its message
# is the one log line, its ``kind`` the connections-closed metric's label.
#
# PoolMisuse subclasses also derive from the builtin a Python reader would expect
# (ValueError for bad arguments, RuntimeError for bad call order), so generic handlers
# keep working, but the proxy's own code catches the specific class.
"""Typed errors raised by the proxy (``wire`` has its own ``WireError`` tree)."""

from __future__ import annotations

__all__ = [
    "AuthenticationTimeout",
    "BrokerPortUnavailable",
    "ClientClosed",
    "ClientLeft",
    "ClientProtocolError",
    "ConnectionBroken",
    "ConnectionClosed",
    "FrameTimeout",
    "IdleTimeout",
    "InvalidAllocation",
    "InvalidRelease",
    "OperationExpired",
    "PoolExhausted",
    "PoolMisuse",
    "ProxyError",
    "SendTimeout",
    "StartupError",
    "UpstreamFailed",
    "UpstreamUnavailable",
    "WouldDeadlock",
]


class ProxyError(Exception):
    """Base class of every error the proxy raises on purpose."""


class PoolExhausted(ProxyError):
    """The memory pool had no memory available for a non-blocking allocation.

    This is load, not a bug: the caller should mute (wait with ``allocate``) or shed.
    """


class PoolMisuse(ProxyError):
    """A caller broke the memory pool's contract. Abstract: raise a subclass.

    Misuse fails loudly (trio's ``ConflictDetector`` spirit): these are bugs in the caller,
    and silently tolerating them would leak or double-count bytes under load.
    """

    def __init__(self, *args: object) -> None:
        if type(self) is PoolMisuse:
            raise TypeError("PoolMisuse is abstract; raise one of its subclasses")
        super().__init__(*args)


class InvalidAllocation(PoolMisuse, ValueError):
    """An allocation size below 1 byte or above the pool's largest single allocation."""


class InvalidRelease(PoolMisuse, RuntimeError):
    """A lease released a second time, or handed to a pool that did not issue it."""


class WouldDeadlock(PoolMisuse, RuntimeError):
    """A task that holds pool memory asked to wait for more (the KIP-72 deadlock rule).

    If every holder of memory could wait for more, the pool could end up empty with all
    holders parked and nobody left to release: a deadlock. Release (or hand off) first.
    """


class UpstreamUnavailable(ProxyError):
    """The upstream broker could not be reached or the connection broke.

    Raise it ``from`` the trio/OS error so the cause stays attached.
    """


class OperationExpired(ProxyError):
    """A delayed operation's deadline passed before it completed (REQUEST_TIMED_OUT)."""


class StartupError(ProxyError):
    """The proxy cannot start as configured: a port in use, no upstream and no embedded broker.

    The message is the whole story for the operator (the command line prints it as one line
    and exits 2), so it says what failed and what to change, and never carries a traceback.
    """


class BrokerPortUnavailable(StartupError):
    """A broker's listener cannot be bound on the port the configuration pins for it
    (``proxy.broker_ports``, or counting up from ``proxy.first_broker_port``).

    At start-up it stops the proxy (exit 2): waiting cannot free a port another process
    holds, and the message names the setting to change. A broker that joins a running
    cluster is retried instead, so the brokers already served keep their clients.
    """


class ConnectionClosed(ProxyError):
    """Why one client connection ended. Abstract: raise a subclass.

    The message is the one log line that says why; ``kind`` is the reason's label in the
    connections-closed metric (a class attribute, so the label set is fixed by the tree).
    """

    kind = "internal_error"

    def __init__(self, *args: object) -> None:
        if type(self) is ConnectionClosed:
            raise TypeError("ConnectionClosed is abstract; raise one of its subclasses")
        super().__init__(*args)


class ClientProtocolError(ConnectionClosed):
    """The client sent something no broker would accept (bad size, unknown API, bad body)."""

    kind = "protocol_error"


class ClientClosed(ConnectionClosed):
    """The client closed its side inside a frame."""

    kind = "client_closed"


class ClientLeft(ClientClosed):
    """The client closed or reset its connection while the proxy still had answers for it:
    how clients end normally (a consumer closing with a fetch held, a producer exiting with
    requests in flight). Logged at DEBUG, like a close between requests."""


class IdleTimeout(ConnectionClosed):
    """No request began within ``connections.idle_timeout_ms``."""

    kind = "idle_timeout"


class FrameTimeout(ConnectionClosed):
    """A frame whose size was read did not complete within ``connections.frame_timeout_ms``."""

    kind = "frame_timeout"


class SendTimeout(ConnectionClosed):
    """The client did not take an answer within ``connections.send_timeout_ms`` once writing
    it had to wait: it holds the answer's memory and reads nothing."""

    kind = "send_timeout"


class AuthenticationTimeout(ConnectionClosed):
    """Passthrough: the cluster had not accepted the client's authentication within
    ``connections.authentication_timeout_ms`` of its connecting."""

    kind = "authentication_timeout"


class UpstreamFailed(ConnectionClosed):
    """The upstream side cannot serve this connection: no address, unreachable, closed, or
    it answered a correlation id the proxy did not expect (the connection is out of step)."""

    kind = "upstream"


class OutOfDescriptors(ConnectionClosed):
    """The connection needed an upstream connection of its own while client connections held
    every descriptor the process can spare (proxy/primitives/descriptors.py)."""

    kind = "descriptors"


class AuthenticationFailed(ConnectionClosed):
    """The cluster refused a passthrough client's SASL authentication; like a Kafka broker,
    the proxy closes the connection once the answer is sent."""

    kind = "authentication_failed"


class ConnectionBroken(ConnectionClosed):
    """A stream broke under the connection (reset by the peer, closed resource)."""

    kind = "broken"
