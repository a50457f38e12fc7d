# Strategy: one module of typed dataclasses per message the proxy looks inside, written as
# checked-in Python so that `wire` needs neither the JSON nor the jar at run time. Each class
# carries its schema rows (FieldSpec: versions, nullability, tags, defaults); the codec is
# compiled from them at run time (wire/_compiler.py), so this file writes data, not code
# paths. Output follows ruff's format (line length, import order) so the files pass lint as
# they are written.
"""The source of one wire/messages/ module, from its message's schema."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .schemas import MAX_VERSION, KafkaSchemas, parse_versions, snake

__all__ = ["message_module_source", "module_name"]

LINE = 100
_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "float64": "float",
    "bool": "bool",
    "uuid": "UUID",
    "string": "str",
    "bytes": "bytes",
    "records": "BytesLike",
}


@dataclass
class _Field:
    name: str
    schema_name: str
    type: str  # element type for arrays ("struct" for struct elements)
    is_array: bool
    versions: tuple[int, int]
    nullable: tuple[int, int] | None
    tag: int | None
    tagged: tuple[int, int] | None
    ignorable: bool
    default: str  # Python source of the default value (FACTORY for fresh values)
    struct: _StructDef | None
    about: str

    @property
    def spec_type(self) -> str:
        return ("[]" if self.is_array else "") + self.type

    def annotation(self) -> str:
        inner = self.struct.name if self.struct else _PRIMITIVES[self.type]
        ann = f"list[{inner}]" if self.is_array else inner
        return ann + " | None" if self.nullable or self.default == "None" else ann


@dataclass
class _StructDef:
    name: str
    fields: list[_Field]
    about: str


def _default_source(f: dict[str, Any], type_: str, is_array: bool, nullable: bool) -> str:
    default = f.get("default")
    if isinstance(default, bool | int):  # written as JSON literals too ("default": -1)
        default = str(default).lower()
    if is_array or type_ == "struct":
        if default == "null":
            return "None"
        if default not in (None, ""):
            raise ValueError(f"unsupported default {default!r} for {f['name']}")
        return "FACTORY"
    if default == "null":
        if not nullable and type_ != "records":
            raise ValueError(f"null default for non-nullable {f['name']}")
        return "None"
    if type_ in ("int8", "int16", "int32", "int64", "uint16"):
        if default in (None, ""):
            return "0"
        return str(int(default, 16) if default.lower().startswith("0x") else int(default))
    if type_ == "float64":
        return repr(float(default or 0.0))
    if type_ == "bool":
        return "True" if str(default).lower() == "true" else "False"
    if type_ == "uuid":
        if default not in (None, ""):
            raise ValueError(f"unsupported uuid default for {f['name']}")
        return "ZERO_UUID"
    if type_ == "string":
        return json.dumps(default or "")
    if type_ == "bytes":
        return 'b""'
    if type_ == "records":
        return "None"  # Java generates null for records fields
    raise ValueError(f"unsupported type {type_}")


def _parse_struct(name: str, fields: list[dict[str, Any]], about: str) -> _StructDef:
    out: list[_Field] = []
    for f in fields:
        raw_type: str = f["type"]
        is_array = raw_type.startswith("[]")
        inner = raw_type.removeprefix("[]")
        struct = None
        if "fields" in f:
            struct = _parse_struct(inner, f["fields"], f.get("about", ""))
            type_ = "struct"
        elif inner in _PRIMITIVES:
            type_ = inner
        else:
            raise ValueError(f"unknown type {raw_type} of {f['name']}")
        if "flexibleVersions" in f:
            raise ValueError(f"field-level flexibleVersions on {f['name']} is not supported")
        versions = parse_versions(f["versions"])
        assert versions is not None
        nullable = parse_versions(f.get("nullableVersions"))
        if nullable and type_ == "struct" and not is_array:
            raise ValueError(f"nullable struct field {f['name']} (KIP-893) is not supported")
        tag = f.get("tag")
        tagged = parse_versions(f.get("taggedVersions")) if tag is not None else None
        if tag is not None and tagged is None:
            tagged = versions
        out.append(
            _Field(
                name=snake(f["name"]),
                schema_name=f["name"],
                type=type_,
                is_array=is_array,
                versions=versions,
                nullable=nullable,
                tag=tag,
                tagged=tagged,
                ignorable=bool(f.get("ignorable", False)),
                default=_default_source(f, type_, is_array, nullable is not None),
                struct=struct,
                about=f.get("about", ""),
            )
        )
    return _StructDef(name, out, about)


def _structs_postorder(s: _StructDef) -> Iterator[_StructDef]:
    for f in s.fields:
        if f.struct is not None:
            yield from _structs_postorder(f.struct)
    yield s


def _docstring(text: str, indent: str) -> list[str]:
    text = " ".join(text.split()).replace("\\", "\\\\").replace('"""', "'''")
    if not text:
        return []
    one = f'{indent}"""{text}"""'
    if len(one) <= LINE:
        return [one]
    wrapped = textwrap.wrap(text, LINE - len(indent) - 3)
    return [f'{indent}"""{wrapped[0]}', *(indent + w for w in wrapped[1:]), f'{indent}"""']


def _range(r: tuple[int, int] | None) -> str:
    if r is None:
        return "None"
    return f"({r[0]}, {'MAX_VERSION' if r[1] == MAX_VERSION else r[1]})"


def message_module_source(schemas: KafkaSchemas, name: str) -> str:
    data = schemas.load(name)
    top = _parse_struct(name, data["fields"], "")
    versions = parse_versions(data["validVersions"])
    flexible = parse_versions(data.get("flexibleVersions"))
    assert versions is not None
    structs = list(_structs_postorder(top))
    names = [s.name for s in structs]
    if len(set(names)) != len(names):
        raise ValueError(f"{name}: duplicate struct names {names}")

    uses = {f.default for s in structs for f in s.fields}
    types = {f.type for s in structs for f in s.fields}
    imports = ["MAX_VERSION", "FieldSpec", "Message", "RawTaggedFields"]
    if len(structs) > 1:
        imports.append("Struct")
    if "FACTORY" in uses or any(f.struct for s in structs for f in s.fields):
        imports.append("FACTORY")
    if "ZERO_UUID" in uses:
        imports.append("ZERO_UUID")
    if "records" in types:
        imports.append("BytesLike")
    need_field = any(f.default == "FACTORY" for s in structs for f in s.fields)

    lines = [schemas.banner(f"{name}.json").rstrip("\n")]
    lines.append(f'"""{name} (API key {data["apiKey"]}), versions {versions[0]}-{versions[1]}."""')
    lines += ["", "from __future__ import annotations", ""]
    lines.append("from dataclasses import dataclass" + (", field" if need_field else ""))
    lines.append("from typing import ClassVar")
    if "uuid" in types:
        lines.append("from uuid import UUID")
    lines.append("")
    lines += _import_lines("wire._struct", imports)
    lines += ["", "__all__ = [", *(f'    "{n}",' for n in sorted(names)), "]"]

    for s in structs:
        lines += ["", "", "@dataclass(slots=True, kw_only=True)"]
        base = "Message" if s is top else "Struct"
        lines.append(f"class {s.name}({base}):")
        doc = s.about if s is not top else f"The {name} message, all versions."
        lines += _docstring(doc, "    ")
        lines.append("")
        if s is top:
            lines.append(f"    API_KEY: ClassVar[int] = {data['apiKey']}")
            lines.append(f'    KIND: ClassVar[str] = "{data["type"]}"')
            lines.append(f"    VERSIONS: ClassVar[tuple[int, int]] = {versions!r}")
            first_flexible = None if flexible is None else flexible[0]
            lines.append(f"    FIRST_FLEXIBLE_VERSION: ClassVar[int | None] = {first_flexible}")
            lines.append("")
        for f in s.fields:
            ann = f.annotation()
            if f.default == "FACTORY":
                factory = "list" if f.is_array else f.struct.name  # type: ignore[union-attr]
                decl = f"    {f.name}: {ann} = field(default_factory={factory})"
            else:
                decl = f"    {f.name}: {ann} = {f.default}"
            lines.append(decl)
            about = f.about
            vs = (
                f"versions {f.versions[0]}+"
                if f.versions[1] == MAX_VERSION
                else (f"versions {f.versions[0]}-{f.versions[1]}")
            )
            about = f"{about} ({vs}{', tagged' if f.tag is not None else ''})"
            lines += _docstring(about, "    ")
        lines.append("    raw_tagged_fields: RawTaggedFields = ()")
        lines.append('    """Unknown (or default-valued) tagged fields, kept for byte fidelity."""')

    lines += ["", ""]
    for s in structs:
        lines.append(f"{s.name}._SCHEMA = (")
        for f in s.fields:
            struct = f.struct.name if f.struct else "None"
            lines.append(
                f'    FieldSpec("{f.name}", "{f.spec_type}", {_range(f.versions)}, '
                f"{_range(f.nullable)}, {f.tag!r}, {_range(f.tagged)}, {f.ignorable!r}, "
                f"{f.default}, {struct}),"
            )
        lines.append(")")
    return _reflow("\n".join(lines) + "\n")


def _import_lines(module: str, names: list[str]) -> list[str]:
    """One ``from module import ...`` in ruff's isort order (constants, classes, rest)."""

    def key(n: str) -> tuple[int, str]:
        return (0 if n.isupper() else 1 if n[0].isupper() else 2, n)

    names = sorted(set(names), key=key)
    one = f"from {module} import {', '.join(names)}"
    if len(one) <= LINE:
        return [one]
    return [f"from {module} import (", *(f"    {n}," for n in names), ")"]


def _reflow(source: str) -> str:
    """Break over-long FieldSpec rows at their commas (keeps ruff's line length)."""
    out = []
    for line in source.splitlines():
        if len(line) > LINE and line.lstrip().startswith("FieldSpec("):
            indent = line[: len(line) - len(line.lstrip())]
            inner = line.strip()[len("FieldSpec(") : -len("),")]
            parts = _split_top_level(inner)
            out.append(indent + "FieldSpec(")
            out += [f"{indent}    {p.strip()}," for p in parts]
            out.append(indent + "),")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur += ch
    parts.append(cur)
    return parts


def module_name(message: str) -> str:
    return snake(message)
