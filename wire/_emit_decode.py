# Strategy: the decode half of the compiler. For one (message class, version) it writes one
# flat function: nested structs and arrays inlined into the parent's loop, runs of fixed-size
# fields read by one precompiled struct.unpack_from, records sliced, never copied. Every length
# and count is checked against the bytes left before anything is allocated or looped over.
"""Emit the source of a version-specialised decoder (see wire/_compiler.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wire._source import (
    ARRAY_TABLE_SIZE,
    FIXED,
    Holder,
    Source,
    array_unpackers,
    default_expr,
    fixed_runs,
    is_default_fn,
    tagged_fields,
    unpacker,
    untagged_fields,
)
from wire._struct import FieldSpec, Struct
from wire._tags import TagEntry

__all__ = ["emit_struct_decode"]


def _emit_read_length(src: Source, ind: str, var: str, flexible: bool, legacy: str) -> None:
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
    src: Source, ind: str, target: str, spec: FieldSpec, version: int, what: str
) -> None:
    if spec.nullable_in(version):
        src.emit(ind, f"{target} = None")
    else:
        msg = f"{what} {spec.name} is null but not nullable in version {version}"
        src.emit(ind, f"raise _malformed({msg!r})")


def _emit_decode_value(
    src: Source,
    ind: str,
    target: str,
    wire_type: str,
    spec: FieldSpec,
    version: int,
    flexible: bool,
    element: bool = False,
) -> None:
    """Decode one value of ``wire_type`` into the assignable expression ``target``."""
    if wire_type in FIXED:
        code, size = FIXED[wire_type]
        tmp = src.var("f")
        src.emit(ind, f"{tmp}, = {src.const(unpacker('>' + code), '_u')}(data, pos)")
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
        emit_struct_decode(src, ind, spec.struct, version, flexible, obj)
        src.emit(ind, f"{target} = {obj}")
    else:
        raise ValueError(f"cannot decode type {wire_type}")


def _emit_decode_field(
    src: Source, ind: str, obj: str, spec: FieldSpec, version: int, flexible: bool
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
    if elem in FIXED and elem != "uuid":
        code, size = FIXED[elem]
        table = src.const(array_unpackers(code), "_ua")
        src.emit(body, f"if {cnt} < {ARRAY_TABLE_SIZE}:")
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


def emit_struct_decode(
    src: Source, ind: str, cls: type[Struct], version: int, flexible: bool, obj: str
) -> None:
    src.emit(ind, f"{obj} = _new({src.const(cls, '_C')})")
    for run in fixed_runs(untagged_fields(cls, version, flexible)):
        if isinstance(run, list):
            fmt = ">" + "".join(FIXED[s.wire_type][0] for s in run)
            size = sum(FIXED[s.wire_type][1] for s in run)
            unpack = src.const(unpacker(fmt), "_u")
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
    tagged = tagged_fields(cls, version, flexible)
    for s in cls._SCHEMA:
        if not s.present_in(version) or s in tagged:
            src.emit(ind, f"{obj}.{s.name} = {default_expr(src, s)}")
    if not flexible:
        src.emit(ind, f"{obj}.raw_tagged_fields = ()")
        return
    table: dict[int, TagEntry] = {}
    for s in tagged:
        assert s.tag is not None
        table[s.tag] = (s.name, _tag_decoder(s, version), is_default_fn(s))
    src.emit(ind, "if data[pos] == 0:")
    src.emit(ind, "    pos += 1")
    src.emit(ind, f"    {obj}.raw_tagged_fields = ()")
    src.emit(ind, "else:")
    src.emit(ind, f"    pos = read_tags(data, pos, {obj}, {src.const(table, '_T')})")


def _tag_decoder(spec: FieldSpec, version: int) -> Callable[[memoryview], Any]:
    """A function decoding exactly one tagged field's value from its own byte slice."""
    src = Source()
    src.emit("", "def _decode_tag(data):")
    src.emit("    ", "n = len(data)")
    src.emit("    ", "pos = 0")
    holder = src.var("h")
    src.emit("    ", f"{holder} = _new({src.const(Holder)})")
    untagged = spec._replace(tag=None, tagged=None)
    _emit_decode_field(src, "    ", holder, untagged._replace(name="value"), version, True)
    src.emit("    ", "if pos != n:")
    src.emit("    ", f"    raise _malformed('tagged field {spec.name} has trailing bytes')")
    src.emit("    ", f"return {holder}.value")
    fn: Callable[[memoryview], Any] = src.compile("_decode_tag", f"<wire tag {spec.name}>")
    return fn
