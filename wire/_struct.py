# Strategy: the generated message modules (wire/messages/) are plain slotted dataclasses,
# one class per struct of a Kafka message schema, spanning all versions of it, like the
# Java client's *Data classes. Each class also carries its schema as a tuple of FieldSpec
# rows (`_SCHEMA`), which wire/_compiler.py turns into one decode and one encode function
# per (message, version). Nothing here does I/O or depends on a codec library.
"""Base classes and schema rows shared by the generated message classes."""

from __future__ import annotations

from typing import ClassVar, NamedTuple
from uuid import UUID

__all__ = [
    "FACTORY",
    "MAX_VERSION",
    "ZERO_UUID",
    "BytesLike",
    "FieldSpec",
    "Message",
    "RawTaggedFields",
    "Struct",
]

#: Upper bound used for open version ranges ("3+" is (3, MAX_VERSION)).
MAX_VERSION = 0x7FFF

#: The default (and "no topic id") value of uuid fields.
ZERO_UUID = UUID(int=0)

#: What records fields accept. Decoding gives a memoryview into the decoded buffer.
BytesLike = bytes | bytearray | memoryview

#: Tagged fields kept as raw bytes: ((tag, value bytes), ...) in ascending tag order.
RawTaggedFields = tuple[tuple[int, bytes], ...]


class _Factory:
    """Marks a FieldSpec default that is a fresh value per instance (list or struct)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FACTORY"


FACTORY = _Factory()


class FieldSpec(NamedTuple):
    """One field of a struct, as written in the Kafka JSON schema.

    Attributes:
        name: the Python attribute (snake_case of the schema name).
        wire_type: ``int8`` ... ``int64``, ``uint16``, ``float64``, ``bool``, ``uuid``,
            ``string``, ``bytes``, ``records``, ``struct``, or ``[]`` + one of those.
        versions: inclusive range of versions that have the field.
        nullable: versions in which it may be null, or None.
        tag: its tag number if it is a tagged field, else None.
        tagged: versions in which it is tagged, or None.
        ignorable: whether a non-default value may be silently dropped when encoding a
            version without the field (otherwise that is a LocalProtocolError).
        default: the default value, or FACTORY for a fresh empty list / default struct.
        struct: the class of a struct or struct-array field, else None.
    """

    name: str
    wire_type: str
    versions: tuple[int, int]
    nullable: tuple[int, int] | None
    tag: int | None
    tagged: tuple[int, int] | None
    ignorable: bool
    default: object
    struct: type[Struct] | None

    def present_in(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]

    def tagged_in(self, version: int) -> bool:
        return self.tagged is not None and self.tagged[0] <= version <= self.tagged[1]


class Struct:
    """Base of every generated struct class.

    Subclasses are ``@dataclass(slots=True, kw_only=True)`` classes whose last field is
    ``raw_tagged_fields``: the tagged fields of the decoded bytes that are unknown to the
    schema, plus known ones that carried their default value. Keeping them makes
    decode-then-encode reproduce the input bytes exactly.
    """

    __slots__ = ()

    #: The schema rows of this struct, in wire order.
    _SCHEMA: ClassVar[tuple[FieldSpec, ...]] = ()


class Message(Struct):
    """Base of the top-level request and response classes."""

    __slots__ = ()

    #: The Kafka API key.
    API_KEY: ClassVar[int]
    #: ``"request"`` or ``"response"``.
    KIND: ClassVar[str]
    #: Inclusive range of versions the schema defines.
    VERSIONS: ClassVar[tuple[int, int]]
    #: First flexible version (compact encodings, tagged fields), or None.
    FIRST_FLEXIBLE_VERSION: ClassVar[int | None]
