"""Hypothesis strategies: random, valid messages of any (class, version), from the schema rows.

Why: every codec property (round trip, byte fidelity, agreement with kafka-python and
kio, framing under arbitrary chunking) quantifies over "all messages of this version".
The strategies read the same FieldSpec rows the codec is compiled from, but only to learn
types, ranges, nullability and tags; the values they produce are independent of it.

A value is valid for a version when fields the version lacks hold their defaults, nulls
appear only where the version allows them, and raw (unknown) tagged fields use tag
numbers the version does not define, in ascending order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from wire import codec
from wire._struct import FACTORY, ZERO_UUID, FieldSpec, Message, Struct

__all__ = [
    "ALL_VERSIONS",
    "Override",
    "fresh_default",
    "message",
    "message_and_version",
]

#: Every (message class, version) the codec supports.
ALL_VERSIONS: list[tuple[type[Message], int]] = [
    (cls, v)
    for table in (codec.REQUEST_CLASSES, codec.RESPONSE_CLASSES)
    for cls in table.values()
    for v in range(cls.VERSIONS[0], cls.VERSIONS[1] + 1)
]

#: (struct class, field spec, version) -> a strategy to use instead, or None.
Override = Callable[[type[Struct], FieldSpec, int], "st.SearchStrategy[Any] | None"]

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}


def fresh_default(spec: FieldSpec) -> Any:
    if spec.default is FACTORY:
        if spec.wire_type.startswith("[]"):
            return []
        assert spec.struct is not None
        return spec.struct()
    return spec.default


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    # Bias towards the edges and small values, where encodings change.
    edges = [lo, hi, -1, 0, 1, 127, 128, -129, 2**14, 2**21]
    return st.one_of(st.sampled_from([e for e in edges if lo <= e <= hi]), st.integers(lo, hi))


def _scalar(wire_type: str) -> st.SearchStrategy[Any]:
    if wire_type in _INTS:
        return _ints(*_INTS[wire_type])
    if wire_type == "bool":
        return st.booleans()
    if wire_type == "float64":
        return st.floats(allow_nan=False)
    if wire_type == "uuid":
        return st.one_of(st.just(ZERO_UUID), st.uuids())
    if wire_type == "string":
        # Past 127 UTF-8 bytes, compact lengths need a second varint byte.
        return st.one_of(st.text(max_size=12), st.text(min_size=40, max_size=90))
    if wire_type == "bytes":
        return st.binary(max_size=40)
    if wire_type == "records":
        return st.binary(max_size=300)
    raise ValueError(wire_type)


def _field(
    owner: type[Struct], spec: FieldSpec, version: int, override: Override | None, raw_tags: bool
) -> st.SearchStrategy[Any]:
    if override is not None:
        custom = override(owner, spec, version)
        if custom is not None:
            return custom
    is_array = spec.wire_type.startswith("[]")
    elem = spec.wire_type.removeprefix("[]")
    if elem == "struct":
        assert spec.struct is not None
        one = _struct(spec.struct, version, override, raw_tags)
    else:
        one = _scalar(elem)
    value = st.lists(one, max_size=3) if is_array else one
    if spec.nullable_in(version):
        value = st.one_of(st.none(), value)
    if spec.tag is not None:
        value = st.one_of(st.builds(lambda: fresh_default(spec)), value)
    return value


def _raw_tags(cls: type[Struct], version: int) -> st.SearchStrategy[tuple[tuple[int, bytes], ...]]:
    known = {s.tag for s in cls._SCHEMA if s.tag is not None and s.tagged_in(version)}
    tags = st.one_of(st.integers(0, 40), st.integers(0, 2**31 - 1)).filter(lambda t: t not in known)
    entries = st.lists(
        st.tuples(tags, st.binary(max_size=20)), max_size=3, unique_by=lambda e: e[0]
    )
    return entries.map(lambda es: tuple(sorted(es)))


def _struct(
    cls: type[Struct], version: int, override: Override | None, raw_tags: bool
) -> st.SearchStrategy[Any]:
    flexible = _flexible_of(cls, version)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for spec in cls._SCHEMA:
        if spec.present_in(version) and (
            spec.tag is None or (flexible and spec.tagged_in(version))
        ):
            fields[spec.name] = _field(cls, spec, version, override, raw_tags)
        else:
            fields[spec.name] = st.builds(lambda spec=spec: fresh_default(spec))
    if flexible and raw_tags:
        fields["raw_tagged_fields"] = st.one_of(st.just(()), _raw_tags(cls, version))
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


_FLEXIBLE: dict[type[Struct], int | None] = {}


def _register_flexible(top: type[Message]) -> None:
    """Nested structs are flexible exactly when their message is; remember the threshold."""
    stack: list[type[Struct]] = [top]
    while stack:
        cls = stack.pop()
        if cls in _FLEXIBLE:
            continue
        _FLEXIBLE[cls] = top.FIRST_FLEXIBLE_VERSION
        stack += [s.struct for s in cls._SCHEMA if s.struct is not None]


for _cls, _ in ALL_VERSIONS:
    _register_flexible(_cls)


def _flexible_of(cls: type[Struct], version: int) -> bool:
    first = _FLEXIBLE[cls]
    return first is not None and version >= first


def message(
    cls: type[Message],
    version: int,
    *,
    raw_tags: bool = True,
    override: Override | None = None,
) -> st.SearchStrategy[Any]:
    """Random valid instances of ``cls`` for ``version``.

    Args:
        raw_tags: include unknown tagged fields (libraries other than ours drop or reject
            them, so cross-library tests turn this off).
        override: replace the strategy of chosen fields (e.g. only error codes kio knows).
    """
    return _struct(cls, version, override, raw_tags)


def message_and_version(
    raw_tags: bool = True, override: Override | None = None
) -> st.SearchStrategy[tuple[Any, int]]:
    """(message, version) over every supported class and version."""
    return st.sampled_from(ALL_VERSIONS).flatmap(
        lambda cv: message(cv[0], cv[1], raw_tags=raw_tags, override=override).map(
            lambda m, v=cv[1]: (m, v)
        )
    )
