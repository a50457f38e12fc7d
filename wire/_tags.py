# Strategy: what the generated decoders and encoders call at run time: unsigned varints and
# tag sections (KIP-482). Unknown tagged fields, and known ones holding their default, are kept
# raw so that encode(decode(b)) == b; every count is checked against the bytes left first.
"""Varints and tag sections, for the generated codec and the hand-written header codec."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wire.errors import LocalProtocolError, MalformedMessage

__all__ = ["TagEntry", "read_tags", "read_uvarint", "uvarint_bytes", "write_tags"]


def read_uvarint(data: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes whose value fits a signed int32."""
    value = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 28:
            raise MalformedMessage("varint longer than 5 bytes")
    if value > 0x7FFFFFFF:
        raise MalformedMessage(f"varint {value} does not fit an int32")
    return value, pos


def uvarint_bytes(value: int) -> bytes:
    if value < 0:
        raise LocalProtocolError(f"cannot encode {value} as an unsigned varint")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


TagEntry = tuple[str, Callable[[memoryview], Any], Callable[[Any], bool]]


def read_tags(data: memoryview, pos: int, obj: Any, tags: dict[int, TagEntry]) -> int:
    """Read a tag section into obj's tagged attributes and ``raw_tagged_fields``."""
    count, pos = read_uvarint(data, pos)
    n = len(data)
    if count > n - pos:
        raise MalformedMessage(f"{count} tagged fields cannot fit in {n - pos} bytes")
    raw: list[tuple[int, bytes]] = []
    for _ in range(count):
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        end = pos + size
        if end > n:
            raise MalformedMessage(f"tagged field {tag} runs past the end of the message")
        entry = tags.get(tag)
        if entry is None:
            raw.append((tag, bytes(data[pos:end])))
        else:
            name, decode, is_default = entry
            value = decode(data[pos:end])
            if is_default(value):
                # Present but equal to the default: Java would not have written it, so
                # keep the bytes to write it back exactly.
                raw.append((tag, bytes(data[pos:end])))
            setattr(obj, name, value)
        pos = end
    obj.raw_tagged_fields = tuple(raw)
    return pos


def write_tags(known: list[tuple[int, bytes]] | None, raw: Any) -> bytes:
    """A tag section from encoded known fields plus the raw ones they do not replace."""
    entries = list(known) if known else []
    if raw:
        taken = {tag for tag, _ in entries}
        entries += [(int(tag), bytes(value)) for tag, value in raw if tag not in taken]
        entries.sort(key=lambda e: e[0])
    out = bytearray(uvarint_bytes(len(entries)))
    for tag, value in entries:
        out += uvarint_bytes(tag)
        out += uvarint_bytes(len(value))
        out += value
    return bytes(out)
