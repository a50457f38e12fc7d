# Strategy: a thin, typed front over wire/_compiler.py. Decoders and encoders are
# compiled on first use per (message class, version) and cached in two dicts, so the
# per-call cost is one dict lookup plus the generated code. Errors are translated here,
# once: whatever a generated decoder trips over (struct.error, IndexError, bad UTF-8)
# becomes MalformedMessage, and whatever an encoder trips over becomes LocalProtocolError,
# both chained to the original exception.
#
# Codec choice: the schema tables are Apache Kafka's JSON message definitions from the
# kafka-clients jar, turned into typed classes by wire/_generate/ and
# into code by wire/_compiler.py. kafka-python and kio serve as independent codecs in the
# round-trip tests (tests/unit/wire/); neither runs here.
"""Decode and encode the bodies of the Kafka messages the proxy looks inside.

Records stay opaque: decoding gives a ``memoryview`` into the input (no copy), and
encoding passes records through as separate output parts (:func:`encode_parts`).

Byte fidelity: for any canonical encoding ``b`` (what Kafka's own Java code writes),
``encode(decode(cls, b, v), v) == b``, unknown tagged fields included. Canonical means
shortest varints, tags in ascending order and each once, booleans as 0 or 1, and nulls
as length -1; other encodings decode fine but re-encode canonically.
"""

from __future__ import annotations

import struct
from typing import TypeVar

from wire import _compiler
from wire._struct import Message
from wire.apis import API_BY_KEY
from wire.errors import (
    LocalProtocolError,
    MalformedMessage,
    UnknownApiKey,
    UnsupportedVersion,
    WireError,
)
from wire.messages import REQUESTS, RESPONSES, ApiVersionsResponse

__all__ = [
    "REQUEST_CLASSES",
    "RESPONSE_CLASSES",
    "Message",
    "decode",
    "decode_api_versions_response",
    "decode_request",
    "decode_response",
    "encode",
    "encode_parts",
    "precompile",
    "request_class",
    "response_class",
]

M = TypeVar("M", bound=Message)

#: api key -> request class, for every API whose bodies wire can decode.
REQUEST_CLASSES: dict[int, type[Message]] = {c.API_KEY: c for c in REQUESTS}
#: api key -> response class, for every API whose bodies wire can decode.
RESPONSE_CLASSES: dict[int, type[Message]] = {c.API_KEY: c for c in RESPONSES}

_decoders: dict[tuple[type[Message], int], _compiler.Decoder] = {}
_encoders: dict[tuple[type[Message], int], _compiler.Encoder] = {}

# What generated code raises on bad input; anything else is a bug and propagates.
_DECODE_FAULTS = (struct.error, IndexError, UnicodeDecodeError, ValueError)
_ENCODE_FAULTS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)


def _class_for(table: dict[int, type[Message]], api_key: int, kind: str) -> type[Message]:
    cls = table.get(api_key)
    if cls is not None:
        return cls
    spec = API_BY_KEY.get(api_key)
    if spec is None:
        raise UnknownApiKey(f"unknown API key {api_key}")
    raise UnsupportedVersion(f"{spec.name} {kind}s are forwarded, not decoded")


def request_class(api_key: int) -> type[Message]:
    """The request class of a decodable API.

    Raises:
        UnknownApiKey: the key is not in the schema tables.
        UnsupportedVersion: the API is known but wire does not decode it.
    """
    return _class_for(REQUEST_CLASSES, api_key, "request")


def response_class(api_key: int) -> type[Message]:
    """The response class of a decodable API (raises like :func:`request_class`)."""
    return _class_for(RESPONSE_CLASSES, api_key, "response")


def _view(body: bytes | bytearray | memoryview) -> memoryview:
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def decode(cls: type[M], body: bytes | bytearray | memoryview, version: int) -> M:
    """Decode a whole message body (the frame after its header).

    Args:
        cls: the message class, e.g. ``FetchResponse``.
        body: exactly the body's bytes. Records fields in the result are views into it.
        version: the API version from the request header.

    Raises:
        UnsupportedVersion: ``version`` is outside ``cls.VERSIONS``.
        MalformedMessage: the body is truncated, has trailing bytes, or holds a null,
            count or string that the schema does not allow.
    """
    key = (cls, version)
    fn = _decoders.get(key)
    if fn is None:
        lo, hi = cls.VERSIONS
        if not lo <= version <= hi:
            raise UnsupportedVersion(f"{cls.__name__} v{version} is outside v{lo}-v{hi}")
        fn = _decoders[key] = _compiler.compile_decoder(cls, version)
    view = _view(body)
    try:
        msg, pos = fn(view, 0)
    except WireError:
        raise
    except _DECODE_FAULTS as exc:
        raise MalformedMessage(f"{cls.__name__} v{version}: {exc}") from exc
    if pos != len(view):
        raise MalformedMessage(f"{cls.__name__} v{version}: {len(view) - pos} trailing bytes")
    result: M = msg
    return result


def decode_request(api_key: int, api_version: int, body: bytes | bytearray | memoryview) -> Message:
    """Decode a request body given the header's api key and version."""
    return decode(request_class(api_key), body, api_version)


def decode_response(
    api_key: int, api_version: int, body: bytes | bytearray | memoryview
) -> Message:
    """Decode a response body given the api key and version of its request."""
    return decode(response_class(api_key), body, api_version)


def decode_api_versions_response(
    body: bytes | bytearray | memoryview, version: int
) -> tuple[ApiVersionsResponse, int]:
    """Decode an ApiVersions response the way Kafka clients do, with the v0 fallback.

    A broker that does not support the request's version answers with a v0 body
    (UNSUPPORTED_VERSION plus its ranges), whatever version was asked for. Like the Java
    client, try ``version`` first and fall back to v0.

    Returns:
        The response and the version it was actually decoded with.
    """
    try:
        return decode(ApiVersionsResponse, body, version), version
    except MalformedMessage:
        if version == 0:
            raise
        return decode(ApiVersionsResponse, body, 0), 0


def precompile(cls: type[Message]) -> None:
    """Compile ``cls``'s decoder and encoder for every version now, not on first use.

    For the messages a server decodes and encodes on every request of a hot API: compiling
    one version costs about a millisecond per direction (Fetch: ~3 ms for the request and
    response of one version, ~40 ms for all), which otherwise lands in the first such
    request's latency.
    """
    lo, hi = cls.VERSIONS
    for version in range(lo, hi + 1):
        key = (cls, version)
        if key not in _decoders:
            _decoders[key] = _compiler.compile_decoder(cls, version)
        if key not in _encoders:
            _encoders[key] = _compiler.compile_encoder(cls, version)


def encode_parts(msg: Message, version: int) -> list[bytes | bytearray | memoryview]:
    """Encode a message body as a list of parts to write in order (records uncopied).

    Raises:
        LocalProtocolError: ``version`` is outside the message's range, a value does not
            fit its field, a non-nullable field is None, or a non-ignorable field the
            version lacks holds a non-default value.
    """
    cls = type(msg)
    key = (cls, version)
    fn = _encoders.get(key)
    if fn is None:
        lo, hi = cls.VERSIONS
        if not lo <= version <= hi:
            raise LocalProtocolError(f"{cls.__name__} v{version} is outside v{lo}-v{hi}")
        fn = _encoders[key] = _compiler.compile_encoder(cls, version)
    out: list[bytes | bytearray | memoryview] = []
    try:
        fn(msg, out)
    except WireError:
        raise
    except _ENCODE_FAULTS as exc:
        raise LocalProtocolError(f"cannot encode {cls.__name__} v{version}: {exc}") from exc
    return out


def encode(msg: Message, version: int) -> bytes:
    """Encode a message body into one ``bytes`` (see :func:`encode_parts`)."""
    parts = encode_parts(msg, version)
    return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
