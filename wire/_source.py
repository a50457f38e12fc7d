# Strategy: the shared workshop of the codec compiler: a Source collects the lines of one
# generated function and the globals they name, and the helpers here answer the questions both
# directions ask of a schema row (which fields a version has, which runs are fixed-size, what a
# field's default is). The decode and encode emitters are wire/_emit_decode.py and
# wire/_emit_encode.py.
"""The generated source's builder, its globals, and what both emitters ask of schema rows."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

from wire._struct import FACTORY, FieldSpec, Struct
from wire._tags import read_tags, read_uvarint, uvarint_bytes, write_tags
from wire.errors import LocalProtocolError, MalformedMessage

#: Records values at least this long are emitted as their own output part (no copy).
RECORDS_PART_MIN_BYTES = 4096

FIXED = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _malformed(msg: str) -> MalformedMessage:
    return MalformedMessage(msg)


def _local(msg: str) -> LocalProtocolError:
    return LocalProtocolError(msg)


_BASE_GLOBALS: dict[str, Any] = {
    "_new": object.__new__,
    "_UUID": UUID,
    "_uvarint": read_uvarint,
    "_uvarint_bytes": uvarint_bytes,
    "read_tags": read_tags,
    "write_tags": write_tags,
    "_malformed": _malformed,
    "_local": _local,
    "_i16": _I16.unpack_from,
    "_i32": _I32.unpack_from,
    "_p16": _I16.pack,
    "_p32": _I32.pack,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_RECORDS_PART_MIN_BYTES": RECORDS_PART_MIN_BYTES,
}


class Source:
    """Lines of one generated module plus the globals they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.globs: dict[str, Any] = dict(_BASE_GLOBALS)
        self._n = 0
        self._consts: dict[int, str] = {}

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def const(self, value: Any, prefix: str = "_k") -> str:
        key = id(value)
        if key not in self._consts:
            name = self.var(prefix)
            self.globs[name] = value
            self._consts[key] = name
        return self._consts[key]

    def emit(self, indent: str, line: str) -> None:
        self.lines.append(indent + line)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def compile(self, name: str, filename: str) -> Any:
        exec(compile(self.text(), filename, "exec"), self.globs)
        return self.globs[name]


def untagged_fields(cls: type[Struct], version: int, flexible: bool) -> list[FieldSpec]:
    return [
        s for s in cls._SCHEMA if s.present_in(version) and not (flexible and s.tagged_in(version))
    ]


def tagged_fields(cls: type[Struct], version: int, flexible: bool) -> list[FieldSpec]:
    fields = [s for s in cls._SCHEMA if flexible and s.present_in(version) and s.tagged_in(version)]
    return sorted(fields, key=lambda s: s.tag or 0)


def fixed_runs(fields: list[FieldSpec]) -> Iterator[list[FieldSpec] | FieldSpec]:
    """Fields in wire order, with each run of fixed-size fields grouped into one list
    (one struct call reads or writes the whole run)."""
    run: list[FieldSpec] = []
    for spec in fields:
        if spec.wire_type in FIXED:
            run.append(spec)
            continue
        if run:
            yield run
            run = []
        yield spec
    if run:
        yield run


def default_expr(src: Source, spec: FieldSpec) -> str:
    """Source of a fresh default value for a field."""
    if spec.default is FACTORY:
        if spec.wire_type.startswith("[]"):
            return "[]"
        return f"{src.const(spec.struct, '_C')}()"
    if spec.default is None or isinstance(spec.default, bool | int | float):
        return repr(spec.default)
    return src.const(spec.default)


def is_default_expr(src: Source, spec: FieldSpec, expr: str) -> str:
    """Source of a boolean expression: is ``expr`` the field's default value?"""
    if spec.default is None:
        return f"({expr} is None)"
    if spec.default is FACTORY and spec.wire_type.startswith("[]"):
        return f"({expr} is not None and len({expr}) == 0)"
    if spec.default is FACTORY:
        assert spec.struct is not None
        parts = [is_default_expr(src, s, f"{expr}.{s.name}") for s in spec.struct._SCHEMA]
        parts.append(f"not {expr}.raw_tagged_fields")
        return "(" + " and ".join(parts) + ")"
    if isinstance(spec.default, bool | int | float):
        return f"({expr} == {spec.default!r})"
    return f"({expr} == {src.const(spec.default)})"


ARRAY_TABLE_SIZE = 64


@functools.cache
def unpacker(fmt: str) -> Callable[..., tuple[Any, ...]]:
    return struct.Struct(fmt).unpack_from


@functools.cache
def packer(fmt: str) -> Callable[..., bytes]:
    return struct.Struct(fmt).pack


@functools.cache
def array_unpackers(code: str) -> list[Callable[..., tuple[Any, ...]]]:
    """unpack_from of 0 .. ARRAY_TABLE_SIZE-1 values of one fixed type (arrays are short)."""
    return [unpacker(f">{k}{code}") for k in range(ARRAY_TABLE_SIZE)]


@functools.cache
def array_packers(code: str) -> list[Callable[..., bytes]]:
    return [packer(f">{k}{code}") for k in range(ARRAY_TABLE_SIZE)]


class Holder:
    __slots__ = ("value",)


def is_default_fn(spec: FieldSpec) -> Callable[[Any], bool]:
    src = Source()
    src.emit("", "def _is_default(v):")
    src.emit("    ", f"return {is_default_expr(src, spec, 'v')}")
    fn: Callable[[Any], bool] = src.compile("_is_default", f"<wire default {spec.name}>")
    return fn
