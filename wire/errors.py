# Strategy: one small tree of exception types, split (as in h11) by who was at fault.
# Everything `wire` raises on purpose is a WireError. Bad bytes from the peer raise a
# RemoteProtocolError subclass that names what was wrong, so the proxy can log one clear
# line and close that connection. Misuse of the library by the caller (encoding a value
# that does not fit, asking for a version that has no such field) is a LocalProtocolError.
# Each error carries a Kafka error-code hint: the code a broker would use for the same
# fault. Kafka usually answers these faults by closing the connection, so the hint is for
# logs and for the few places where a response can carry it (UNSUPPORTED_VERSION).
"""The exceptions raised by :mod:`wire`."""

from __future__ import annotations

__all__ = [
    "CORRUPT_MESSAGE",
    "INVALID_REQUEST",
    "MESSAGE_TOO_LARGE",
    "NONE",
    "UNKNOWN_SERVER_ERROR",
    "UNSUPPORTED_VERSION",
    "CorruptRecords",
    "FrameTooLarge",
    "LocalProtocolError",
    "LooksLikeTLS",
    "MalformedMessage",
    "NegativeFrameSize",
    "RemoteProtocolError",
    "TruncatedFrame",
    "UnknownApiKey",
    "UnsupportedVersion",
    "WireError",
]

# Kafka error codes used as hints (org.apache.kafka.common.protocol.Errors).
UNKNOWN_SERVER_ERROR = -1
NONE = 0
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42


class WireError(Exception):
    """Base of every error :mod:`wire` raises on purpose. Not instantiated directly.

    Attributes:
        error_code: the Kafka error code a broker would associate with this fault; a hint
            for logs and responses, never used by :mod:`wire` itself.
    """

    error_code: int = UNKNOWN_SERVER_ERROR

    def __init__(self, msg: str, *, error_code: int | None = None) -> None:
        if type(self) in _ABSTRACT:
            raise TypeError(f"{type(self).__name__} is abstract; raise a subclass")
        super().__init__(msg)
        self.msg = msg
        if error_code is not None:
            self.error_code = error_code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.msg!r}, error_code={self.error_code})"


class LocalProtocolError(WireError):
    """The caller asked for something the protocol cannot express.

    Examples: encoding an int that does not fit its field, a null where the version
    forbids it, or a non-default value for a field the target version does not have.
    """

    error_code = UNKNOWN_SERVER_ERROR


class RemoteProtocolError(WireError):
    """The peer sent bytes that break the protocol. Abstract: raise a subclass."""

    error_code = INVALID_REQUEST


class FrameTooLarge(RemoteProtocolError):
    """A frame's size prefix exceeds the configured maximum (``socket.request.max.bytes``).

    Attributes:
        size_bytes: the size the peer announced.
        max_frame_bytes: the limit it exceeded.
    """

    error_code = MESSAGE_TOO_LARGE

    def __init__(self, msg: str, *, size_bytes: int, max_frame_bytes: int) -> None:
        super().__init__(msg)
        self.size_bytes = size_bytes
        self.max_frame_bytes = max_frame_bytes


class LooksLikeTLS(FrameTooLarge):
    """The "size prefix" is the start of a TLS record (a TLS client on a plaintext port).

    A TLS ClientHello starts ``16 03 01 ..``, which read as a size is about 369 MB
    (369296129 for the classic ``16 03 01 02 00`` hello), hence the subclass of
    :class:`FrameTooLarge`.
    """


class NegativeFrameSize(RemoteProtocolError):
    """A frame's size prefix is negative."""


class TruncatedFrame(RemoteProtocolError):
    """The peer closed the connection in the middle of a frame."""


class MalformedMessage(RemoteProtocolError):
    """A header or body is truncated, has trailing bytes, or holds an impossible value."""


class CorruptRecords(MalformedMessage):
    """A records blob holds a batch that cannot be a record batch (or fails its CRC)."""

    error_code = CORRUPT_MESSAGE


class UnsupportedVersion(RemoteProtocolError):
    """The API is known but this version of it cannot be decoded here."""

    error_code = UNSUPPORTED_VERSION


class UnknownApiKey(RemoteProtocolError):
    """The request names an API key that is not in the schema tables."""

    error_code = INVALID_REQUEST


_ABSTRACT = (WireError, RemoteProtocolError)
