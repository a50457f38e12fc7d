# Strategy: Kafka describes every message in JSON (clients/src/main/resources/common/
# message/*.json), and ships those files inside its kafka-clients jar. This development tool
# reads them from the jar of the Kafka line the tests run (testbed/kafka_install.py resolves
# it from Maven Central) and writes checked-in Python: the API table of every API key
# (wire/_api_table.py) and one module of typed dataclasses per message the proxy looks
# inside (wire/messages/). Generated files are committed so that `wire` needs neither the
# JSON nor the jar at run time, and a test re-runs the generator to prove they are current.
# The codec itself is compiled at run time from the schema rows written here
# (wire/_compiler.py).
#
# Kafka's own schemas, not a client library's copy: kafka-python's copy lacked 25 APIs of
# Kafka 4 (share groups, KIP-848, Streams groups, telemetry, delegation tokens), and an API
# missing from the table is one the proxy cannot pass on. The schema format is read
# strictly: a key this file does not know (a new flag in a future Kafka) stops generation
# instead of being ignored, since any flag may change the bytes on the wire.
"""Generate wire/_api_table.py and wire/messages/ from the Kafka JSON message schemas.

Run ``python -m wire._generate`` after changing the message list or upgrading the
schema source; ``python -m wire._generate --check`` exits 1 if anything is stale. The
generator imports nothing from ``wire``, so if stale output keeps ``wire`` itself from
importing, load this file directly (importlib.util.spec_from_file_location) and call
``main()``; do not run it as a script from inside wire/, where ``_struct.py`` would
shadow the standard library module of that name.
"""

from __future__ import annotations

import argparse
import functools
import json
import keyword
import re
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.kafka_install import KAFKA_LINES, kafka_clients_jar

__all__ = ["DECODABLE_APIS", "generate", "main"]

#: The APIs whose bodies the proxy looks inside (the issue's list). Every other API key
#: is still in the API table; adding a name here is all it takes to decode it too.
DECODABLE_APIS = (
    "Produce",
    "Fetch",
    "ListOffsets",
    "Metadata",
    "FindCoordinator",
    "ApiVersions",
    "DescribeCluster",
    # The proxy's own SASL client (proxy/security/sasl_client.py) and its answer to clients (issue
    # 16).
    "SaslHandshake",
    "SaslAuthenticate",
    # Their responses name brokers (KIP-932 node endpoints), rewritten by proxy/routing/rewrite.py.
    "ShareFetch",
    "ShareAcknowledge",
)

#: The Kafka whose schemas the tables follow: the newest line the tests run against.
SCHEMA_KAFKA_VERSION = KAFKA_LINES[0]
_SCHEMA_DIR = "common/message/"
WIRE_DIR = Path(__file__).resolve().parent
MAX_VERSION = 0x7FFF
LINE = 100
_COMMENTS = re.compile(r"(?m)^\s*//.*\n?")
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


#: Schema keys and what they mean for the bytes on the wire. Top level: the message's
#: identity, version ranges and where it is served; "latestVersionUnstable" marks a newest
#: version still in development (brokers advertise it only when told to).
_MESSAGE_KEYS = frozenset(
    {"apiKey", "type", "name", "validVersions", "flexibleVersions", "fields", "commonStructs",
     "listeners", "latestVersionUnstable"}
)  # fmt: skip
#: Field keys. "about" is documentation; "entityType" (what an id or name refers to),
#: "mapKey" (Java builds a map keyed by it) and "zeroCopy" (Java shares the buffer) shape the
#: generated Java classes, not the encoding.
_FIELD_KEYS = frozenset(
    {"name", "type", "versions", "nullableVersions", "default", "ignorable", "tag",
     "taggedVersions", "flexibleVersions", "fields", "about", "entityType", "mapKey", "zeroCopy"}
)  # fmt: skip


@functools.cache
def _schema_texts() -> dict[str, str]:
    """Every ``common/message/*.json`` of the pinned kafka-clients jar, by message name."""
    with zipfile.ZipFile(kafka_clients_jar(SCHEMA_KAFKA_VERSION)) as jar:
        return {
            name[len(_SCHEMA_DIR) : -len(".json")]: jar.read(name).decode()
            for name in jar.namelist()
            if name.startswith(_SCHEMA_DIR) and name.endswith(".json")
        }


def _check_keys(where: str, data: dict[str, Any], known: frozenset[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"{where}: schema keys {unknown} are new to wire/_generate.py; find out what they "
            "mean for the encoding and teach the generator before regenerating"
        )


def _check_fields(message: str, fields: list[dict[str, Any]]) -> None:
    for f in fields:
        _check_keys(f"{message}.{f['name']}", f, _FIELD_KEYS)
        _check_fields(message, f.get("fields", []))


def load_schema(name: str) -> dict[str, Any]:
    """One JSON schema by message name, with comments stripped and common structs inlined.

    Raises:
        ValueError: the schema uses a key this generator does not know.
    """
    data: dict[str, Any] = json.loads(_COMMENTS.sub("", _schema_texts()[name]))
    _check_keys(name, data, _MESSAGE_KEYS)
    _check_fields(name, data.get("fields", []))
    for struct in data.get("commonStructs", []):
        _check_fields(name, struct["fields"])
    common = {s["name"]: s for s in data.get("commonStructs", [])}

    def inline(fields: list[dict[str, Any]]) -> None:
        for f in fields:
            inner = f["type"].removeprefix("[]")
            if inner in common and "fields" not in f:
                f["fields"] = common[inner]["fields"]
            inline(f.get("fields", []))

    inline(data.get("fields", []))
    return data


def schema_names() -> list[str]:
    return sorted(_schema_texts())


def parse_versions(text: str | None) -> tuple[int, int] | None:
    """Kafka version-range syntax: "3+", "0-4", "2", "none" or absent."""
    if text is None or text.strip() in ("", "none"):
        return None
    text = text.strip()
    if text.endswith("+"):
        return (int(text[:-1]), MAX_VERSION)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def snake(name: str) -> str:
    """Schema name to attribute name, the same rule kafka-python uses."""
    out = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return out + "_" if keyword.iskeyword(out) else out


# --------------------------------------------------------------------------- API table


def api_table_source() -> str:
    rows = []
    for name in schema_names():
        data = load_schema(name)
        if data.get("type") != "request":
            continue
        response = load_schema(name[: -len("Request")] + "Response")
        valid = parse_versions(data["validVersions"])
        if valid is None:
            # "none": an API Kafka removed (the ZooKeeper-era LeaderAndIsr, StopReplica,
            # UpdateMetadata, ControlledShutdown), kept as a file only to reserve its key.
            continue
        flexible = parse_versions(data.get("flexibleVersions"))
        rflexible = parse_versions(response.get("flexibleVersions"))
        assert flexible == rflexible, name
        rows.append(
            (
                data["apiKey"],
                name[: -len("Request")],
                valid[0],
                valid[1],
                None if flexible is None else flexible[0],
                bool(data.get("latestVersionUnstable", False)),
                tuple(data.get("listeners", ())),
            )
        )
    rows.sort()
    body = "\n".join(f"    {row!r},".replace("'", '"') for row in rows)
    members = "\n".join(f"    {snake(row[1]).upper()} = {row[0]}" for row in rows)
    return (
        _banner("every *Request.json / *Response.json")
        + '"""Every API key in the schema tables (generated; see wire/_generate.py)."""\n\n'
        + "from __future__ import annotations\n\n"
        + "from enum import IntEnum\n\n\n"
        + "class ApiKey(IntEnum):\n"
        + '    """Kafka API keys by name."""\n\n'
        + members
        + "\n\n\n"
        + "#: (api_key, name, min_version, max_version, first_flexible_version,\n"
        + "#:  latest_version_unstable, listeners)\n"
        + "API_ROWS: tuple[tuple[int, str, int, int, int | None, bool, tuple[str, ...]], ...] = (\n"
        + body
        + "\n)\n"
    )


# ----------------------------------------------------------------------- message modules


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


def message_module_source(name: str) -> str:
    data = load_schema(name)
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

    lines = [_banner(f"{name}.json").rstrip("\n")]
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


def messages_init_source() -> str:
    lines = [_banner("the message list in wire/_generate.py").rstrip("\n")]
    lines.append('"""Typed message classes of the APIs wire can decode (generated)."""')
    lines += ["", "from __future__ import annotations", "", "from wire._struct import Message"]
    names = []
    for api in sorted(DECODABLE_APIS):
        for kind in ("Request", "Response"):
            message = api + kind
            names.append(message)
            lines.append(f"from wire.messages.{module_name(message)} import {message}")
    lines += ["", "__all__ = ["]
    lines += [f'    "{n}",' for n in ["REQUESTS", "RESPONSES", *sorted(names)]]
    lines += ["]", ""]
    for kind in ("Request", "Response"):
        lines.append(f"#: Every decodable {kind.lower()} class, by API name.")
        lines.append(f"{kind.upper()}S: tuple[type[Message], ...] = (")
        lines += [f"    {api}{kind}," for api in sorted(DECODABLE_APIS)]
        lines.append(")")
    lines.append("")
    return "\n".join(lines)


def _banner(source: str) -> str:
    return (
        "# Generated by `python -m wire._generate`. Do not edit.\n"
        f"# Source: {source} of Apache Kafka's message schemas\n"
        f"# ({_SCHEMA_DIR} in org.apache.kafka:kafka-clients:{SCHEMA_KAFKA_VERSION}).\n"
    )


def generate() -> dict[Path, str]:
    """Every generated file: path -> content."""
    files = {WIRE_DIR / "_api_table.py": api_table_source()}
    files[WIRE_DIR / "messages" / "__init__.py"] = messages_init_source()
    for api in DECODABLE_APIS:
        for kind in ("Request", "Response"):
            message = api + kind
            path = WIRE_DIR / "messages" / f"{module_name(message)}.py"
            files[path] = message_module_source(message)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    stale = []
    for path, content in generate().items():
        if not path.exists() or path.read_text() != content:
            stale.append(path)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
    for path in stale:
        print(("stale: " if args.check else "wrote: ") + str(path.relative_to(WIRE_DIR.parent)))
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
