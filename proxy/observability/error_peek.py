# Strategy: many responses carry a top-level error_code at a fixed offset right after the
# response header, behind only fixed-size fields (ApiVersions: first; Fetch v7+, FindCoordinator
# v1-v3, JoinGroup v2+, Heartbeat v1+ ...: after throttle_time_ms). Where that holds, the request
# log can report the error by reading two bytes, with no decoding. The offset is derived once per
# (api key, version) from the generated schema tables, never from a hand-written list, and
# cached. Everywhere else (Produce and Metadata, whose errors are per partition or per topic,
# and the APIs the codec does not know) the error code is None: decoding a response the proxy
# would not otherwise decode, only to log it, would put per-byte work on the hot path.
"""Read a response's top-level error code where it sits at a fixed offset (no decoding)."""

from __future__ import annotations

from functools import cache

from wire.apis import API_BY_KEY, response_header_version
from wire.codec import RESPONSE_CLASSES

__all__ = ["error_code_offset", "peek_error_code"]

_FIXED_BYTES = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8,
                "float64": 8, "uuid": 16}  # fmt: skip


@cache
def error_code_offset(api_key: int, api_version: int) -> int | None:
    """Bytes between the end of the response header and a top-level ``error_code``.

    None when the response has no such field at this version, or when a variable-size field
    (a string, an array) comes before it, so finding it would mean decoding.
    """
    cls = RESPONSE_CLASSES.get(api_key)
    if cls is None:
        return None
    offset = 0
    for field in cls._SCHEMA:
        low, high = field.versions
        if field.tag is not None or not low <= api_version <= high:
            continue
        if field.name == "error_code" and field.wire_type == "int16":
            return offset
        size = _FIXED_BYTES.get(field.wire_type)
        if size is None:
            return None
        offset += size
    return None


@cache
def _where(api_key: int, api_version: int) -> tuple[int, bool] | None:
    """(offset after the header, whether the header is v1) or None; one cache hit per call."""
    offset = error_code_offset(api_key, api_version)
    if offset is None or api_key not in API_BY_KEY:
        return None
    return offset, response_header_version(api_key, api_version) >= 1


def peek_error_code(
    api_key: int, api_version: int, body: bytes | bytearray | memoryview
) -> int | None:
    """The top-level error code of response frame ``body`` (size prefix excluded), or None.

    Never raises: a response too short to hold the field gives None (the client will see
    and judge the same bytes).
    """
    where = _where(api_key, api_version)
    if where is None:
        return None
    offset, flexible_header = where
    start = 4  # correlation id
    if flexible_header:
        if len(body) <= start or body[start] != 0:
            return None  # header tagged fields present: rare; not worth parsing here
        start += 1
    position = start + offset
    if len(body) < position + 2:
        return None
    return int.from_bytes(body[position : position + 2], "big", signed=True)
