# Strategy: for each (message class, version) we write the Python source of one flat
# decode function and one flat encode function, straight from the FieldSpec rows of the
# generated classes, and compile it once (lazily, cached). Nested structs and arrays are
# inlined into the parent's loop, runs of fixed-size fields become one precompiled
# struct.unpack_from / pack call, and records are sliced (decode) or passed through as
# separate output parts (encode), so nothing costs time proportional to record bytes.
# kafka-python 3.x compiles its codec the same way; we do it ourselves because its
# generated code copies records, re-copies the rest of the buffer for every tagged field,
# and drops unknown tagged fields when encoding (see the closing note of issue 2).
#
# Decoding contract (every generated decoder):
#   * input is a 1-D memoryview of bytes; out-of-range reads surface as struct.error or
#     IndexError, which wire.codec turns into MalformedMessage;
#   * every length and count is checked against the bytes left before anything is
#     allocated or looped over, so time and memory are O(input size);
#   * unknown tagged fields, and known ones holding their default value, are kept raw in
#     `raw_tagged_fields` so that encode(decode(b)) == b for canonical encodings.
# Encoding contract: Java semantics. A null in a non-nullable position, a non-default value
# in a non-ignorable field the version lacks, or tagged fields in a non-flexible version
# raise LocalProtocolError.
"""Compile version-specialised decoders and encoders from the generated schema rows."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

from wire._struct import FACTORY, FieldSpec, Struct
from wire.errors import LocalProtocolError, MalformedMessage

__all__ = [
    "Decoder",
    "Encoder",
    "compile_decoder",
    "compile_encoder",
    "read_tags",
    "read_uvarint",
    "source_of",
    "write_tags",
]

#: decode(view, pos) -> (struct, new pos)
Decoder = Callable[[memoryview, int], tuple[Any, int]]
#: encode(struct, out): appends bytes-like parts to out
Encoder = Callable[[Any, list[Any]], None]

#: Records values at least this long are emitted as their own output part (no copy).
RECORDS_PART_MIN_BYTES = 4096

_FIXED = {
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


# ------------------------------------------------------------------------ runtime helpers


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


def _uvarint_bytes(value: int) -> bytes:
    if value < 0:
        raise LocalProtocolError(f"cannot encode {value} as an unsigned varint")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_TagEntry = tuple[str, Callable[[memoryview], Any], Callable[[Any], bool]]


def read_tags(data: memoryview, pos: int, obj: Any, tags: dict[int, _TagEntry]) -> int:
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
    out = bytearray(_uvarint_bytes(len(entries)))
    for tag, value in entries:
        out += _uvarint_bytes(tag)
        out += _uvarint_bytes(len(value))
        out += value
    return bytes(out)


def _malformed(msg: str) -> MalformedMessage:
    return MalformedMessage(msg)


def _local(msg: str) -> LocalProtocolError:
    return LocalProtocolError(msg)


_BASE_GLOBALS: dict[str, Any] = {
    "_new": object.__new__,
    "_UUID": UUID,
    "_uvarint": read_uvarint,
    "_uvarint_bytes": _uvarint_bytes,
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


# ------------------------------------------------------------------------ source builder


class _Source:
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


def _untagged(cls: type[Struct], version: int, flexible: bool) -> list[FieldSpec]:
    return [
        s for s in cls._SCHEMA if s.present_in(version) and not (flexible and s.tagged_in(version))
    ]


def _tagged(cls: type[Struct], version: int, flexible: bool) -> list[FieldSpec]:
    fields = [s for s in cls._SCHEMA if flexible and s.present_in(version) and s.tagged_in(version)]
    return sorted(fields, key=lambda s: s.tag or 0)


def _fixed_runs(fields: list[FieldSpec]) -> Iterator[list[FieldSpec] | FieldSpec]:
    """Fields in wire order, with each run of fixed-size fields grouped into one list
    (one struct call reads or writes the whole run)."""
    run: list[FieldSpec] = []
    for spec in fields:
        if spec.wire_type in _FIXED:
            run.append(spec)
            continue
        if run:
            yield run
            run = []
        yield spec
    if run:
        yield run


def _default_expr(src: _Source, spec: FieldSpec) -> str:
    """Source of a fresh default value for a field."""
    if spec.default is FACTORY:
        if spec.wire_type.startswith("[]"):
            return "[]"
        return f"{src.const(spec.struct, '_C')}()"
    if spec.default is None or isinstance(spec.default, bool | int | float):
        return repr(spec.default)
    return src.const(spec.default)


def _is_default_expr(src: _Source, spec: FieldSpec, expr: str) -> str:
    """Source of a boolean expression: is ``expr`` the field's default value?"""
    if spec.default is None:
        return f"({expr} is None)"
    if spec.default is FACTORY and spec.wire_type.startswith("[]"):
        return f"({expr} is not None and len({expr}) == 0)"
    if spec.default is FACTORY:
        assert spec.struct is not None
        parts = [_is_default_expr(src, s, f"{expr}.{s.name}") for s in spec.struct._SCHEMA]
        parts.append(f"not {expr}.raw_tagged_fields")
        return "(" + " and ".join(parts) + ")"
    if isinstance(spec.default, bool | int | float):
        return f"({expr} == {spec.default!r})"
    return f"({expr} == {src.const(spec.default)})"


# ------------------------------------------------------------------------------- decode


def _emit_read_length(src: _Source, ind: str, var: str, flexible: bool, legacy: str) -> None:
    """Read a length/count prefix into ``var``; -1 (or any negative) means null."""
    if flexible:
        b = src.var("b")
        src.emit(ind, f"{b} = data[pos]")
        src.emit(ind, f"if {b} < 128:")
        src.emit(ind, "    pos += 1")
        src.emit(ind, f"    {var} = {b} - 1")
        src.emit(ind, "else:")
        src.emit(ind, f"    {var}, pos = _uvarint(data, pos)")
        src.emit(ind, f"    {var} -= 1")
    elif legacy == "h":
        src.emit(ind, f"{var}, = _i16(data, pos)")
        src.emit(ind, "pos += 2")
    else:
        src.emit(ind, f"{var}, = _i32(data, pos)")
        src.emit(ind, "pos += 4")


def _emit_null(
    src: _Source, ind: str, target: str, spec: FieldSpec, version: int, what: str
) -> None:
    if spec.nullable_in(version):
        src.emit(ind, f"{target} = None")
    else:
        msg = f"{what} {spec.name} is null but not nullable in version {version}"
        src.emit(ind, f"raise _malformed({msg!r})")


def _emit_decode_value(
    src: _Source,
    ind: str,
    target: str,
    wire_type: str,
    spec: FieldSpec,
    version: int,
    flexible: bool,
    element: bool = False,
) -> None:
    """Decode one value of ``wire_type`` into the assignable expression ``target``."""
    if wire_type in _FIXED:
        code, size = _FIXED[wire_type]
        tmp = src.var("f")
        src.emit(ind, f"{tmp}, = {src.const(_unpacker('>' + code), '_u')}(data, pos)")
        src.emit(ind, f"pos += {size}")
        src.emit(ind, f"{target} = {'_UUID(bytes=' + tmp + ')' if wire_type == 'uuid' else tmp}")
    elif wire_type in ("string", "bytes", "records"):
        ln = src.var("ln")
        _emit_read_length(src, ind, ln, flexible, "h" if wire_type == "string" else "i")
        src.emit(ind, f"if {ln} < 0:")
        if element:
            src.emit(ind, f"    raise _malformed('null element in {spec.name}')")
        else:
            _emit_null(src, ind + "    ", target, spec, version, "field")
        src.emit(ind, "else:")
        end = src.var("e")
        src.emit(ind, f"    {end} = pos + {ln}")
        src.emit(ind, f"    if {end} > n:")
        src.emit(ind, f"        raise _malformed('{spec.name} runs past the end of the message')")
        if wire_type == "string":
            src.emit(ind, f"    {target} = str(data[pos:{end}], 'utf-8')")
        elif wire_type == "bytes":
            src.emit(ind, f"    {target} = bytes(data[pos:{end}])")
        else:
            src.emit(ind, f"    {target} = data[pos:{end}]")
        src.emit(ind, f"    pos = {end}")
    elif wire_type == "struct":
        assert spec.struct is not None
        obj = src.var("o")
        _emit_struct_decode(src, ind, spec.struct, version, flexible, obj)
        src.emit(ind, f"{target} = {obj}")
    else:
        raise ValueError(f"cannot decode type {wire_type}")


def _emit_decode_field(
    src: _Source, ind: str, obj: str, spec: FieldSpec, version: int, flexible: bool
) -> None:
    target = f"{obj}.{spec.name}"
    if not spec.wire_type.startswith("[]"):
        _emit_decode_value(src, ind, target, spec.wire_type, spec, version, flexible)
        return
    elem = spec.wire_type[2:]
    cnt = src.var("c")
    _emit_read_length(src, ind, cnt, flexible, "i")
    src.emit(ind, f"if {cnt} < 0:")
    _emit_null(src, ind + "    ", target, spec, version, "array")
    src.emit(ind, f"elif {cnt} > n - pos:")
    src.emit(ind, f"    raise _malformed('{spec.name} count exceeds the bytes left')")
    src.emit(ind, "else:")
    body = ind + "    "
    if elem in _FIXED and elem != "uuid":
        code, size = _FIXED[elem]
        table = src.const(_array_unpackers(code), "_ua")
        src.emit(body, f"if {cnt} < {_ARRAY_TABLE_SIZE}:")
        src.emit(body, f"    {target} = [*{table}[{cnt}](data, pos)]")
        src.emit(body, "else:")
        src.emit(body, f"    {target} = list(_unpack_from('>%d{code}' % {cnt}, data, pos))")
        src.emit(body, f"pos += {size} * {cnt}")
        return
    lst = src.var("a")
    src.emit(body, f"{lst} = []")
    item = src.var("x")
    src.emit(body, f"for _ in range({cnt}):")
    _emit_decode_value(src, body + "    ", item, elem, spec, version, flexible, element=True)
    src.emit(body, f"    {lst}.append({item})")
    src.emit(body, f"{target} = {lst}")


_ARRAY_TABLE_SIZE = 64


@functools.cache
def _unpacker(fmt: str) -> Callable[..., tuple[Any, ...]]:
    return struct.Struct(fmt).unpack_from


@functools.cache
def _packer(fmt: str) -> Callable[..., bytes]:
    return struct.Struct(fmt).pack


@functools.cache
def _array_unpackers(code: str) -> list[Callable[..., tuple[Any, ...]]]:
    """unpack_from of 0 .. _ARRAY_TABLE_SIZE-1 values of one fixed type (arrays are short)."""
    return [_unpacker(f">{k}{code}") for k in range(_ARRAY_TABLE_SIZE)]


@functools.cache
def _array_packers(code: str) -> list[Callable[..., bytes]]:
    return [_packer(f">{k}{code}") for k in range(_ARRAY_TABLE_SIZE)]


def _emit_struct_decode(
    src: _Source, ind: str, cls: type[Struct], version: int, flexible: bool, obj: str
) -> None:
    src.emit(ind, f"{obj} = _new({src.const(cls, '_C')})")
    for run in _fixed_runs(_untagged(cls, version, flexible)):
        if isinstance(run, list):
            fmt = ">" + "".join(_FIXED[s.wire_type][0] for s in run)
            size = sum(_FIXED[s.wire_type][1] for s in run)
            unpack = src.const(_unpacker(fmt), "_u")
            targets = []
            uuids = []
            for s in run:
                if s.wire_type == "uuid":
                    tmp = src.var("id")
                    uuids.append((s, tmp))
                    targets.append(tmp)
                else:
                    targets.append(f"{obj}.{s.name}")
            lhs = targets[0] + "," if len(targets) == 1 else ", ".join(targets)
            src.emit(ind, f"{lhs} = {unpack}(data, pos)")
            src.emit(ind, f"pos += {size}")
            for s, tmp in uuids:
                src.emit(ind, f"{obj}.{s.name} = _UUID(bytes={tmp})")
        else:
            _emit_decode_field(src, ind, obj, run, version, flexible)
    tagged = _tagged(cls, version, flexible)
    for s in cls._SCHEMA:
        if not s.present_in(version) or s in tagged:
            src.emit(ind, f"{obj}.{s.name} = {_default_expr(src, s)}")
    if not flexible:
        src.emit(ind, f"{obj}.raw_tagged_fields = ()")
        return
    table: dict[int, _TagEntry] = {}
    for s in tagged:
        assert s.tag is not None
        table[s.tag] = (s.name, _tag_decoder(s, version), _is_default_fn(s))
    src.emit(ind, "if data[pos] == 0:")
    src.emit(ind, "    pos += 1")
    src.emit(ind, f"    {obj}.raw_tagged_fields = ()")
    src.emit(ind, "else:")
    src.emit(ind, f"    pos = read_tags(data, pos, {obj}, {src.const(table, '_T')})")


def _tag_decoder(spec: FieldSpec, version: int) -> Callable[[memoryview], Any]:
    """A function decoding exactly one tagged field's value from its own byte slice."""
    src = _Source()
    src.emit("", "def _decode_tag(data):")
    src.emit("    ", "n = len(data)")
    src.emit("    ", "pos = 0")
    holder = src.var("h")
    src.emit("    ", f"{holder} = _new({src.const(_Holder)})")
    untagged = spec._replace(tag=None, tagged=None)
    _emit_decode_field(src, "    ", holder, untagged._replace(name="value"), version, True)
    src.emit("    ", "if pos != n:")
    src.emit("    ", f"    raise _malformed('tagged field {spec.name} has trailing bytes')")
    src.emit("    ", f"return {holder}.value")
    fn: Callable[[memoryview], Any] = src.compile("_decode_tag", f"<wire tag {spec.name}>")
    return fn


class _Holder:
    __slots__ = ("value",)


def _is_default_fn(spec: FieldSpec) -> Callable[[Any], bool]:
    src = _Source()
    src.emit("", "def _is_default(v):")
    src.emit("    ", f"return {_is_default_expr(src, spec, 'v')}")
    fn: Callable[[Any], bool] = src.compile("_is_default", f"<wire default {spec.name}>")
    return fn


# ------------------------------------------------------------------------------- encode


def _emit_write_length(src: _Source, ind: str, expr: str, flexible: bool, legacy: str) -> None:
    """Write the length/count ``expr`` (not null)."""
    if flexible:
        v = src.var("L")
        src.emit(ind, f"{v} = {expr} + 1")
        src.emit(ind, f"if {v} < 128:")
        src.emit(ind, f"    buf.append({v})")
        src.emit(ind, "else:")
        src.emit(ind, f"    buf += _uvarint_bytes({v})")
    else:
        src.emit(ind, f"buf += {'_p16' if legacy == 'h' else '_p32'}({expr})")


def _emit_write_null(
    src: _Source, ind: str, spec: FieldSpec, version: int, flexible: bool, legacy: str, path: str
) -> None:
    if spec.nullable_in(version):
        if flexible:
            src.emit(ind, "buf.append(0)")
        else:
            src.emit(ind, "buf += " + repr(b"\xff" * (2 if legacy == "h" else 4)))
    else:
        msg = f"{path} is None but not nullable in version {version}"
        src.emit(ind, f"raise _local({msg!r})")


def _emit_encode_value(
    src: _Source,
    ind: str,
    expr: str,
    wire_type: str,
    spec: FieldSpec,
    version: int,
    flexible: bool,
    path: str,
    parts: bool,
    element: bool = False,
) -> None:
    if wire_type in _FIXED:
        code, _ = _FIXED[wire_type]
        pack = src.const(_packer(">" + code), "_p")
        value = f"{expr}.bytes" if wire_type == "uuid" else expr
        src.emit(ind, f"buf += {pack}({value})")
        return
    if wire_type in ("string", "bytes", "records"):
        v = src.var("v")
        legacy = "h" if wire_type == "string" else "i"
        src.emit(ind, f"{v} = {expr}")
        src.emit(ind, f"if {v} is None:")
        if element:
            src.emit(ind, f"    raise _local('null element in {path}')")
        else:
            _emit_write_null(src, ind + "    ", spec, version, flexible, legacy, path)
        src.emit(ind, "else:")
        body = ind + "    "
        if wire_type == "string":
            src.emit(body, f"{v} = {v}.encode('utf-8')")
        _emit_write_length(src, body, f"len({v})", flexible, legacy)
        if wire_type == "records" and parts:
            src.emit(body, f"if len({v}) >= _RECORDS_PART_MIN_BYTES:")
            src.emit(body, "    out.append(buf)")
            src.emit(body, f"    out.append({v})")
            src.emit(body, "    buf = bytearray()")
            src.emit(body, "else:")
            src.emit(body, f"    buf += {v}")
        else:
            src.emit(body, f"buf += {v}")
        return
    if wire_type == "struct":
        assert spec.struct is not None
        obj = src.var("o")
        src.emit(ind, f"{obj} = {expr}")
        _emit_struct_encode(src, ind, spec.struct, version, flexible, obj, path, parts)
        return
    raise ValueError(f"cannot encode type {wire_type}")


def _emit_encode_field(
    src: _Source,
    ind: str,
    obj: str,
    spec: FieldSpec,
    version: int,
    flexible: bool,
    path: str,
    parts: bool,
) -> None:
    expr = f"{obj}.{spec.name}"
    if not spec.wire_type.startswith("[]"):
        _emit_encode_value(src, ind, expr, spec.wire_type, spec, version, flexible, path, parts)
        return
    elem = spec.wire_type[2:]
    a = src.var("a")
    src.emit(ind, f"{a} = {expr}")
    src.emit(ind, f"if {a} is None:")
    _emit_write_null(src, ind + "    ", spec, version, flexible, "i", path)
    src.emit(ind, "else:")
    body = ind + "    "
    _emit_write_length(src, body, f"len({a})", flexible, "i")
    if elem in _FIXED and elem != "uuid":
        code, _ = _FIXED[elem]
        table = src.const(_array_packers(code), "_pa")
        src.emit(body, f"if len({a}) < {_ARRAY_TABLE_SIZE}:")
        src.emit(body, f"    buf += {table}[len({a})](*{a})")
        src.emit(body, "else:")
        src.emit(body, f"    buf += _pack('>%d{code}' % len({a}), *{a})")
        return
    item = src.var("x")
    src.emit(body, f"for {item} in {a}:")
    _emit_encode_value(
        src, body + "    ", item, elem, spec, version, flexible, path + "[]", parts, element=True
    )


def _emit_struct_encode(
    src: _Source,
    ind: str,
    cls: type[Struct],
    version: int,
    flexible: bool,
    obj: str,
    path: str,
    parts: bool,
) -> None:
    tagged = _tagged(cls, version, flexible)
    for s in cls._SCHEMA:
        if not s.present_in(version) and not s.ignorable:
            msg = f"{path}.{s.name} has a non-default value but version {version} lacks it"
            src.emit(ind, f"if not {_is_default_expr(src, s, f'{obj}.{s.name}')}:")
            src.emit(ind, f"    raise _local({msg!r})")
    for run in _fixed_runs(_untagged(cls, version, flexible)):
        if isinstance(run, list):
            fmt = ">" + "".join(_FIXED[s.wire_type][0] for s in run)
            pack = src.const(_packer(fmt), "_p")
            args = [
                f"{obj}.{s.name}.bytes" if s.wire_type == "uuid" else f"{obj}.{s.name}" for s in run
            ]
            src.emit(ind, f"buf += {pack}({', '.join(args)})")
        else:
            path_of = f"{path}.{run.name}"
            _emit_encode_field(src, ind, obj, run, version, flexible, path_of, parts)
    if not flexible:
        # Java: "Tagged fields were set, but version N of this message does not support them."
        msg = f"{path} has tagged fields but version {version} is not flexible"
        src.emit(ind, f"if {obj}.raw_tagged_fields:")
        src.emit(ind, f"    raise _local({msg!r})")
        return
    known = src.var("t")
    if tagged:
        src.emit(ind, f"{known} = None")
    for s in tagged:
        value = f"{obj}.{s.name}"
        enc = src.const(_tag_encoder(s, version, f"{path}.{s.name}"), "_te")
        src.emit(ind, f"if not {_is_default_expr(src, s, value)}:")
        src.emit(ind, f"    if {known} is None:")
        src.emit(ind, f"        {known} = []")
        src.emit(ind, f"    {known}.append(({s.tag}, {enc}({value})))")
    raw = f"{obj}.raw_tagged_fields"
    cond = f"{known} is None and not {raw}" if tagged else f"not {raw}"
    src.emit(ind, f"if {cond}:")
    src.emit(ind, "    buf.append(0)")
    src.emit(ind, "else:")
    src.emit(ind, f"    buf += write_tags({known if tagged else 'None'}, {raw})")


def _tag_encoder(spec: FieldSpec, version: int, path: str) -> Callable[[Any], bytes]:
    src = _Source()
    src.emit("", "def _encode_tag(value):")
    src.emit("    ", "buf = bytearray()")
    holder = src.var("h")
    src.emit("    ", f"{holder} = _new({src.const(_Holder)})")
    src.emit("    ", f"{holder}.value = value")
    untagged = spec._replace(name="value", tag=None, tagged=None)
    _emit_encode_field(src, "    ", holder, untagged, version, True, path, parts=False)
    src.emit("    ", "return bytes(buf)")
    fn: Callable[[Any], bytes] = src.compile("_encode_tag", f"<wire tag {path}>")
    return fn


# ----------------------------------------------------------------------------- public


def _flexible(cls: type[Any], version: int) -> bool:
    first = getattr(cls, "FIRST_FLEXIBLE_VERSION", None)
    return first is not None and version >= first


def _decoder_source(cls: type[Struct], version: int) -> _Source:
    src = _Source()
    src.emit("", "def _decode(data, pos):")
    src.emit("    ", "n = len(data)")
    _emit_struct_decode(src, "    ", cls, version, _flexible(cls, version), "msg")
    src.emit("    ", "return msg, pos")
    return src


def _encoder_source(cls: type[Struct], version: int) -> _Source:
    src = _Source()
    src.emit("", "def _encode(msg, out):")
    src.emit("    ", "buf = bytearray()")
    _emit_struct_encode(
        src, "    ", cls, version, _flexible(cls, version), "msg", cls.__name__, True
    )
    src.emit("    ", "out.append(buf)")
    return src


def compile_decoder(cls: type[Struct], version: int) -> Decoder:
    """The decoder of ``cls`` at ``version`` (not cached; see wire.codec)."""
    fn: Decoder = _decoder_source(cls, version).compile(
        "_decode", f"<wire decode {cls.__name__} v{version}>"
    )
    return fn


def compile_encoder(cls: type[Struct], version: int) -> Encoder:
    """The encoder of ``cls`` at ``version`` (not cached; see wire.codec)."""
    fn: Encoder = _encoder_source(cls, version).compile(
        "_encode", f"<wire encode {cls.__name__} v{version}>"
    )
    return fn


def source_of(cls: type[Struct], version: int) -> Iterator[str]:
    """The generated decoder and encoder source (for debugging and the docs)."""
    yield _decoder_source(cls, version).text()
    yield _encoder_source(cls, version).text()
