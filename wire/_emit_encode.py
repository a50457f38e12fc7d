# Strategy: the encode half of the compiler, with Java's semantics: a null in a non-nullable
# position, a non-default value in a non-ignorable field the version lacks, or tagged fields in
# a non-flexible version raise LocalProtocolError. Runs of fixed-size fields are one
# precompiled struct.pack; records of RECORDS_PART_MIN_BYTES or more go out as their own part.
"""Emit the source of a version-specialised encoder (see wire/_compiler.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wire._source import (
    ARRAY_TABLE_SIZE,
    FIXED,
    Holder,
    Source,
    array_packers,
    fixed_runs,
    is_default_expr,
    packer,
    tagged_fields,
    untagged_fields,
)
from wire._struct import FieldSpec, Struct

__all__ = ["emit_struct_encode"]


def _emit_write_length(src: Source, ind: str, expr: str, flexible: bool, legacy: str) -> None:
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
    src: Source, ind: str, spec: FieldSpec, version: int, flexible: bool, legacy: str, path: str
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
    src: Source,
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
    if wire_type in FIXED:
        code, _ = FIXED[wire_type]
        pack = src.const(packer(">" + code), "_p")
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
        emit_struct_encode(src, ind, spec.struct, version, flexible, obj, path, parts)
        return
    raise ValueError(f"cannot encode type {wire_type}")


def _emit_encode_field(
    src: Source,
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
    if elem in FIXED and elem != "uuid":
        code, _ = FIXED[elem]
        table = src.const(array_packers(code), "_pa")
        src.emit(body, f"if len({a}) < {ARRAY_TABLE_SIZE}:")
        src.emit(body, f"    buf += {table}[len({a})](*{a})")
        src.emit(body, "else:")
        src.emit(body, f"    buf += _pack('>%d{code}' % len({a}), *{a})")
        return
    item = src.var("x")
    src.emit(body, f"for {item} in {a}:")
    _emit_encode_value(
        src, body + "    ", item, elem, spec, version, flexible, path + "[]", parts, element=True
    )


def emit_struct_encode(
    src: Source,
    ind: str,
    cls: type[Struct],
    version: int,
    flexible: bool,
    obj: str,
    path: str,
    parts: bool,
) -> None:
    tagged = tagged_fields(cls, version, flexible)
    for s in cls._SCHEMA:
        if not s.present_in(version) and not s.ignorable:
            msg = f"{path}.{s.name} has a non-default value but version {version} lacks it"
            src.emit(ind, f"if not {is_default_expr(src, s, f'{obj}.{s.name}')}:")
            src.emit(ind, f"    raise _local({msg!r})")
    for run in fixed_runs(untagged_fields(cls, version, flexible)):
        if isinstance(run, list):
            fmt = ">" + "".join(FIXED[s.wire_type][0] for s in run)
            pack = src.const(packer(fmt), "_p")
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
        src.emit(ind, f"if not {is_default_expr(src, s, value)}:")
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
    src = Source()
    src.emit("", "def _encode_tag(value):")
    src.emit("    ", "buf = bytearray()")
    holder = src.var("h")
    src.emit("    ", f"{holder} = _new({src.const(Holder)})")
    src.emit("    ", f"{holder}.value = value")
    untagged = spec._replace(name="value", tag=None, tagged=None)
    _emit_encode_field(src, "    ", holder, untagged, version, True, path, parts=False)
    src.emit("    ", "return bytes(buf)")
    fn: Callable[[Any], bytes] = src.compile("_encode_tag", f"<wire tag {path}>")
    return fn
