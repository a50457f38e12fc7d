# Strategy: for each (message class, version) we write the Python source of one flat
# decode function and one flat encode function, straight from the FieldSpec rows of the
# generated classes, and compile it once (lazily, cached). Nested structs and arrays are
# inlined into the parent's loop, runs of fixed-size fields become one precompiled
# struct.unpack_from / pack call, and records are sliced (decode) or passed through as
# separate output parts (encode), so nothing costs time proportional to record bytes.
# kafka-python 3.x compiles its codec the same way; we do it ourselves because its
# generated code copies records, re-copies the rest of the buffer for every tagged field,
# and drops unknown tagged fields when encoding.
#
# The pieces: wire/_tags.py (run-time varints and tag sections), wire/_source.py (the source
# builder), wire/_emit_decode.py and wire/_emit_encode.py (one direction each).
"""Compile version-specialised decoders and encoders from the generated schema rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from wire._emit_decode import emit_struct_decode
from wire._emit_encode import emit_struct_encode
from wire._source import Source
from wire._struct import Struct

__all__ = ["Decoder", "Encoder", "compile_decoder", "compile_encoder", "source_of"]

#: decode(view, pos) -> (struct, new pos)
Decoder = Callable[[memoryview, int], tuple[Any, int]]
#: encode(struct, out): appends bytes-like parts to out
Encoder = Callable[[Any, list[Any]], None]


def _flexible(cls: type[Any], version: int) -> bool:
    first = getattr(cls, "FIRST_FLEXIBLE_VERSION", None)
    return first is not None and version >= first


def _decoder_source(cls: type[Struct], version: int) -> Source:
    src = Source()
    src.emit("", "def _decode(data, pos):")
    src.emit("    ", "n = len(data)")
    emit_struct_decode(src, "    ", cls, version, _flexible(cls, version), "msg")
    src.emit("    ", "return msg, pos")
    return src


def _encoder_source(cls: type[Struct], version: int) -> Source:
    src = Source()
    src.emit("", "def _encode(msg, out):")
    src.emit("    ", "buf = bytearray()")
    emit_struct_encode(
        src, "    ", cls, version, _flexible(cls, version), "msg", cls.__name__, True
    )
    src.emit("    ", "out.append(buf)")
    return src


def compile_decoder(cls: type[Struct], version: int) -> Decoder:
    """The decoder of ``cls`` at ``version`` (not cached; see wire.codec).

    Its contract: the input is a 1-D memoryview of bytes, and out-of-range reads surface as
    struct.error or IndexError (wire.codec turns them into MalformedMessage); every length and
    count is checked against the bytes left before anything is allocated or looped over, so
    time and memory are O(input size); unknown tagged fields, and known ones holding their
    default value, are kept raw in ``raw_tagged_fields`` so that encode(decode(b)) == b for
    canonical encodings.
    """
    fn: Decoder = _decoder_source(cls, version).compile(
        "_decode", f"<wire decode {cls.__name__} v{version}>"
    )
    return fn


def compile_encoder(cls: type[Struct], version: int) -> Encoder:
    """The encoder of ``cls`` at ``version`` (not cached; see wire.codec).

    Its contract is Java's: a null in a non-nullable position, a non-default value in a
    non-ignorable field the version lacks, or tagged fields in a non-flexible version raise
    LocalProtocolError.
    """
    fn: Encoder = _encoder_source(cls, version).compile(
        "_encode", f"<wire encode {cls.__name__} v{version}>"
    )
    return fn


def source_of(cls: type[Struct], version: int) -> Iterator[str]:
    """The generated decoder and encoder source (for debugging and the docs)."""
    yield _decoder_source(cls, version).text()
    yield _encoder_source(cls, version).text()
