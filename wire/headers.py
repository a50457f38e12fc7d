# Strategy: headers are tiny and on every request's path, so they are hand-written here
# (RequestHeader.json has a field-level quirk the generic codec does not model: the
# client id is always a legacy INT16-length string, even in flexible header v2, so old
# brokers can read any ApiVersions request). Which header version an (api key, version)
# uses comes from the generated API table (wire.apis). Frames here are payloads without
# their 4-byte size prefix, as wire.framing returns them. The correlation id sits at a
# fixed offset (request: bytes 4..8, response: bytes 0..4), so rewriting it never touches
# the rest of the frame: in place for writable buffers, or by one copy otherwise.
"""Request and response headers: parse, encode, and correlation-id rewriting."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wire._struct import RawTaggedFields
from wire._tags import read_tags, write_tags
from wire.apis import request_header_version, response_header_version
from wire.errors import LocalProtocolError, MalformedMessage, WireError

__all__ = [
    "RequestHeader",
    "ResponseHeader",
    "encode_request_header",
    "encode_response_header",
    "parse_request_header",
    "parse_response_header",
    "peek_request_header",
    "peek_response_correlation_id",
    "replace_request_correlation_id",
    "replace_response_correlation_id",
    "request_header_version",
    "response_header_version",
    "set_request_correlation_id",
    "set_response_correlation_id",
]

_REQ = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class RequestHeader:
    """A request header, any version (v1: + client id, v2: + tagged fields)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None
    raw_tagged_fields: RawTaggedFields = ()


@dataclass(slots=True)
class ResponseHeader:
    """A response header, any version (v1: + tagged fields)."""

    correlation_id: int
    raw_tagged_fields: RawTaggedFields = ()


def peek_request_header(frame: _Buffer) -> tuple[int, int, int]:
    """(api key, api version, correlation id) from fixed offsets, for any API.

    Unlike :func:`parse_request_header` this needs no table lookup, so it also works for
    API keys and versions the tables do not know (enough to route or reject them).

    Raises:
        MalformedMessage: the frame is shorter than 8 bytes.
    """
    try:
        api_key, api_version, correlation_id = _REQ.unpack_from(frame)
    except struct.error as exc:
        raise MalformedMessage(f"request header needs 8 bytes, frame has {len(frame)}") from exc
    return api_key, api_version, correlation_id


def peek_response_correlation_id(frame: _Buffer) -> int:
    """The correlation id of a response frame (its first 4 bytes)."""
    try:
        (correlation_id,) = _I32.unpack_from(frame)
    except struct.error as exc:
        raise MalformedMessage(f"response header needs 4 bytes, frame has {len(frame)}") from exc
    return int(correlation_id)


def parse_request_header(
    frame: _Buffer, header_version: int | None = None
) -> tuple[RequestHeader, int]:
    """Parse the header at the start of a request frame.

    Args:
        frame: the request frame (without the size prefix).
        header_version: force a header version; by default it is looked up from the
            frame's api key and version (:func:`request_header_version`).

    Returns:
        The header and its encoded length: the body is ``frame[length:]``.

    Raises:
        UnknownApiKey: no header version given and the api key is not in the tables.
        UnsupportedVersion: no header version given and the api version is negative.
        MalformedMessage: the header is truncated or its client id is not UTF-8.
    """
    api_key, api_version, correlation_id = peek_request_header(frame)
    if header_version is None:
        header_version = request_header_version(api_key, api_version)
    header = RequestHeader(api_key, api_version, correlation_id)
    if header_version < 1:
        return header, 8
    try:
        (length,) = _I16.unpack_from(frame, 8)
        pos = 10
        if length >= 0:
            pos = 10 + length
            if pos > len(frame):
                raise MalformedMessage("client id runs past the end of the frame")
            header.client_id = str(frame[10:pos], "utf-8")
        if header_version >= 2:
            if frame[pos] == 0:
                pos += 1
            else:
                view = frame if isinstance(frame, memoryview) else memoryview(frame)
                pos = read_tags(view, pos, header, {})
    except WireError:
        raise
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise MalformedMessage(f"bad request header v{header_version}: {exc}") from exc
    return header, pos


def encode_request_header(header: RequestHeader, header_version: int | None = None) -> bytes:
    """Encode a request header (version looked up from its api key/version by default)."""
    if header_version is None:
        header_version = request_header_version(header.api_key, header.api_version)
    try:
        out = bytearray(_REQ.pack(header.api_key, header.api_version, header.correlation_id))
        if header_version >= 1:
            if header.client_id is None:
                out += b"\xff\xff"
            else:
                client_id = header.client_id.encode("utf-8")
                out += _I16.pack(len(client_id))
                out += client_id
        if header_version >= 2:
            out += write_tags(None, header.raw_tagged_fields) if header.raw_tagged_fields else b"\0"
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError) as exc:
        raise LocalProtocolError(f"cannot encode request header: {exc}") from exc
    return bytes(out)


def parse_response_header(frame: _Buffer, header_version: int) -> tuple[ResponseHeader, int]:
    """Parse the header at the start of a response frame.

    Args:
        frame: the response frame (without the size prefix).
        header_version: from :func:`response_header_version` of the request's api key
            and version (responses do not say which API they answer).

    Returns:
        The header and its encoded length: the body is ``frame[length:]``.
    """
    header = ResponseHeader(correlation_id=peek_response_correlation_id(frame))
    pos = 4
    if header_version >= 1:
        view = frame if isinstance(frame, memoryview) else memoryview(frame)
        try:
            if view[pos] == 0:
                pos += 1
            else:
                pos = read_tags(view, pos, header, {})
        except WireError:
            raise
        except (struct.error, IndexError) as exc:
            raise MalformedMessage(f"bad response header v{header_version}: {exc}") from exc
    return header, pos


def encode_response_header(header: ResponseHeader, header_version: int) -> bytes:
    """Encode a response header of the given version."""
    try:
        out = _I32.pack(header.correlation_id)
    except struct.error as exc:
        raise LocalProtocolError(f"cannot encode response header: {exc}") from exc
    if header_version >= 1:
        out += write_tags(None, header.raw_tagged_fields) if header.raw_tagged_fields else b"\0"
    return out


def _replace(frame: _Buffer, offset: int, correlation_id: int, kind: str) -> bytes:
    if len(frame) < offset + 4:
        raise MalformedMessage(f"{kind} frame of {len(frame)} bytes has no correlation id")
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    try:
        cid = _I32.pack(correlation_id)
    except struct.error as exc:
        raise LocalProtocolError(f"correlation id {correlation_id} does not fit an int32") from exc
    return b"".join((view[:offset], cid, view[offset + 4 :]))


def replace_request_correlation_id(frame: _Buffer, correlation_id: int) -> bytes:
    """A copy of a request frame with only its correlation id (bytes 4..8) replaced."""
    return _replace(frame, 4, correlation_id, "request")


def replace_response_correlation_id(frame: _Buffer, correlation_id: int) -> bytes:
    """A copy of a response frame with only its correlation id (bytes 0..4) replaced."""
    return _replace(frame, 0, correlation_id, "response")


def _set(frame: bytearray | memoryview, offset: int, correlation_id: int, kind: str) -> None:
    if len(frame) < offset + 4:
        raise MalformedMessage(f"{kind} frame of {len(frame)} bytes has no correlation id")
    try:
        _I32.pack_into(frame, offset, correlation_id)
    except (struct.error, TypeError) as exc:
        raise LocalProtocolError(f"cannot set the correlation id in place: {exc}") from exc


def set_request_correlation_id(frame: bytearray | memoryview, correlation_id: int) -> None:
    """Overwrite a request frame's correlation id in place (the frame must be writable).

    O(1): use it on frames :class:`wire.framing.FrameDecoder` assembled (writable), and
    :func:`replace_request_correlation_id` on read-only ones.
    """
    _set(frame, 4, correlation_id, "request")


def set_response_correlation_id(frame: bytearray | memoryview, correlation_id: int) -> None:
    """Overwrite a response frame's correlation id in place (the frame must be writable)."""
    _set(frame, 0, correlation_id, "response")
