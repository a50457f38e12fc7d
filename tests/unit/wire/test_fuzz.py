"""Fuzz the frame decoder, the header parsers, every message decoder and the batch reader.

Contract under test: whatever bytes arrive, `wire` raises only its own WireError types
(never IndexError, struct.error, UnicodeDecodeError, RecursionError, MemoryError ...),
and every call returns (no hang).

Budget: ``FUZZ_EXAMPLES`` inputs in total (default 60,000, the quick CI mode; `make fuzz`
sets 1,000,000). Three quarters go to a seeded mutation loop, which is fast: a corpus of
valid request and response frames for every (message, version), mutated by bit flips,
interesting integers over length fields, insertions, deletions, duplications and cuts,
then fed through a FrameDecoder in random chunks, the header parser, the decoder the
header names, the decoder of the original (message, version), one other decoder, and
the record-batch reader. The rest go to two hypothesis tests (pure random frames, and
hypothesis-chosen mutations of corpus frames), which shrink what they find.

Reproduce a mutation-loop failure with the seed it prints: ``FUZZ_SEED=<seed>``.
A hang is caught by faulthandler, which dumps every stack and exits.
"""

from __future__ import annotations

import faulthandler
import os
import random
import string
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.wire.strategies import ALL_VERSIONS
from wire import codec
from wire._struct import FACTORY, FieldSpec, Message, Struct
from wire.errors import WireError
from wire.framing import FrameDecoder, frame, size_prefix
from wire.headers import (
    RequestHeader,
    ResponseHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
    response_header_version,
)
from wire.records import scan_batches, verify_crcs

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60000"))
FUZZ_SEED = int(os.environ.get("FUZZ_SEED", "20240611"))
HANG_TIMEOUT_S = 600
MUTATION_SHARE = 0.75

_MUTATIONS = int(FUZZ_EXAMPLES * MUTATION_SHARE)
_HYPOTHESIS = FUZZ_EXAMPLES - _MUTATIONS
_RANDOM_FRAMES = _HYPOTHESIS // 2
_MUTATED_FRAMES = _HYPOTHESIS - _RANDOM_FRAMES

_INTERESTING_32 = [0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0x7FFFFFFF, -0x80000000]
_INTERESTING_BYTES = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]
_INTS = {"int8": 7, "int16": 15, "uint16": 16, "int32": 31, "int64": 63}


# -------------------------------------------------------------------- seed corpus


def _random_value(spec: FieldSpec, elem: str, version: int, rng: random.Random) -> Any:
    if elem == "struct":
        assert spec.struct is not None
        return random_struct(spec.struct, version, rng)
    if elem in _INTS:
        bits = _INTS[elem]
        lo = 0 if elem == "uint16" else -(2**bits)
        hi = 2**bits - 1 if elem != "uint16" else 2**16 - 1
        return rng.choice([lo, hi, -1 if lo < 0 else 0, 0, 1, rng.randint(lo, hi)])
    if elem == "bool":
        return rng.random() < 0.5
    if elem == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if elem == "string":
        return "".join(rng.choice(string.printable + "é✓") for _ in range(rng.randint(0, 12)))
    if elem in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 40))
    raise ValueError(elem)


def random_struct(cls: type[Struct], version: int, rng: random.Random) -> Any:
    """A random valid value of cls at version (like strategies.message, but cheap)."""
    kwargs: dict[str, Any] = {}
    for spec in cls._SCHEMA:
        if not spec.present_in(version) or (spec.tag is not None and rng.random() < 0.5):
            if spec.default is FACTORY:
                kwargs[spec.name] = [] if spec.wire_type.startswith("[]") else spec.struct()  # type: ignore[misc]
            else:
                kwargs[spec.name] = spec.default
            continue
        if spec.nullable_in(version) and rng.random() < 0.2:
            kwargs[spec.name] = None
            continue
        elem = spec.wire_type.removeprefix("[]")
        if spec.wire_type.startswith("[]"):
            kwargs[spec.name] = [
                _random_value(spec, elem, version, rng) for _ in range(rng.randint(0, 3))
            ]
        else:
            kwargs[spec.name] = _random_value(spec, elem, version, rng)
    return cls(**kwargs)


def encode_frame(msg: Message, version: int, correlation_id: int) -> bytes:
    """A whole frame payload (header + body) as a client or broker would send it."""
    cls = type(msg)
    if cls.KIND == "request":
        header = encode_request_header(
            RequestHeader(
                api_key=cls.API_KEY,
                api_version=version,
                correlation_id=correlation_id,
                client_id="f",
            )
        )
    else:
        header = encode_response_header(
            ResponseHeader(correlation_id=correlation_id),
            response_header_version(cls.API_KEY, version),
        )
    return header + codec.encode(msg, version)


def _build_corpus(per_version: int = 3) -> list[tuple[type[Message], int, bytes]]:
    rng = random.Random(12345)
    corpus = []
    for cls, version in ALL_VERSIONS:
        for _ in range(per_version):
            msg = random_struct(cls, version, rng)
            corpus.append((cls, version, encode_frame(msg, version, rng.getrandbits(31))))
    return corpus


CORPUS = _build_corpus()


# ---------------------------------------------------------------------- mutations


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        op = rng.randrange(8)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip a bit
            i = min(pos, len(buf) - 1)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # an interesting byte
            buf[min(pos, len(buf) - 1)] = rng.choice(_INTERESTING_BYTES)
        elif op == 2:  # an interesting int32 (length and count fields)
            value = rng.choice(_INTERESTING_32) & 0xFFFFFFFF
            buf[pos : pos + 4] = value.to_bytes(4, "big")
        elif op == 3:  # an interesting int16
            value = rng.choice(_INTERESTING_32) & 0xFFFF
            buf[pos : pos + 2] = value.to_bytes(2, "big")
        elif op == 4:  # insert random bytes
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 5:  # delete a range
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 6:  # duplicate a range
            buf[pos:pos] = buf[pos : pos + rng.randint(1, 32)]
        else:  # cut the tail
            del buf[pos:]
    return bytes(buf)


# -------------------------------------------------------------------- the harness

_DECODABLE = [(cls, v) for cls, v in ALL_VERSIONS]


def _scan_records(value: Any) -> None:
    """Run the batch reader over every records field of a decoded message."""
    if isinstance(value, list):
        for v in value:
            _scan_records(v)
    elif isinstance(value, Struct):
        for spec in type(value)._SCHEMA:
            field = getattr(value, spec.name)
            if spec.wire_type == "records":
                if field is not None:
                    scan_batches(field)
                    verify_crcs(field)
            elif spec.struct is not None:
                _scan_records(field)


def _attempt(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except WireError:
        return None


def exercise(payload: bytes, cls: type[Message], version: int, rng: random.Random) -> None:
    """Feed one frame payload to everything; only WireError may come out."""
    # 1. framing: a size prefix (sometimes mutated), random chunks, a random limit.
    stream = size_prefix(len(payload)) + payload
    if rng.random() < 0.1:
        stream = mutate(stream[:8], rng) + stream[8:]
    decoder = FrameDecoder(rng.choice([16, 1 << 10, 1 << 20]))
    pos = 0
    while pos < len(stream):
        step = rng.choice([1, 3, 7, 64, 4096])
        decoder.receive_data(stream[pos : pos + step])
        pos += step
        if _attempt(lambda: _drain(decoder)) is None:
            break
    else:
        decoder.receive_data(b"")
        _attempt(lambda: _drain(decoder))

    # 2. the header parser, then the decoder the (possibly mutated) header names.
    if cls.KIND == "request":
        parsed = _attempt(lambda: parse_request_header(payload))
        if parsed is not None:
            header, offset = parsed
            msg = _attempt(
                lambda: codec.decode_request(header.api_key, header.api_version, payload[offset:])
            )
            if msg is not None:
                _attempt(lambda: _scan_records(msg))
        offset = _header_length(payload, 2 if _flexible(cls, version) else 1)
    else:
        hv = response_header_version(cls.API_KEY, version)
        _attempt(lambda: parse_response_header(payload, hv))
        offset = 4 + hv

    # 3. the decoder of the original message, and one other decoder, on the body.
    body = memoryview(payload)[offset:]
    msg = _attempt(lambda: codec.decode(cls, body, version))
    if msg is not None:
        _attempt(lambda: _scan_records(msg))
        # Whatever decodes must re-encode.
        codec.encode(msg, version)
    other_cls, other_version = rng.choice(_DECODABLE)
    _attempt(lambda: codec.decode(other_cls, body, other_version))
    _attempt(lambda: scan_batches(body))


def _drain(decoder: FrameDecoder) -> int:
    count = 0
    while isinstance(decoder.next_frame(), memoryview):
        count += 1
        if count > 1_000_000:
            raise AssertionError("frame decoder loops")
    return count


def _flexible(cls: type[Message], version: int) -> bool:
    first = cls.FIRST_FLEXIBLE_VERSION
    return first is not None and version >= first


def _header_length(payload: bytes, header_version: int) -> int:
    """Where the body starts in an unmutated request frame (for the body decoders)."""
    if len(payload) < 10:
        return min(len(payload), 8)
    (length,) = struct.unpack_from(">h", payload, 8)
    return min(len(payload), 10 + max(length, 0) + (1 if header_version >= 2 else 0))


# -------------------------------------------------------------------------- tests


def test_mutated_corpus_frames() -> None:
    """The seeded mutation loop (the bulk of the budget)."""
    rng = random.Random(FUZZ_SEED)
    slowest = 0.0
    faulthandler.dump_traceback_later(HANG_TIMEOUT_S, exit=True)
    try:
        for i in range(_MUTATIONS):
            cls, version, seed_frame = rng.choice(CORPUS)
            payload = (
                mutate(seed_frame, rng)
                if rng.random() < 0.95
                else rng.randbytes(rng.randint(0, 64))
            )
            started = time.perf_counter()
            try:
                exercise(payload, cls, version, rng)
            except Exception as exc:
                raise AssertionError(
                    f"input {i} (FUZZ_SEED={FUZZ_SEED}): {type(exc).__name__}: {exc}\n"
                    f"decoding {cls.__name__} v{version}, payload {payload.hex()}"
                ) from exc
            slowest = max(slowest, time.perf_counter() - started)
    finally:
        faulthandler.cancel_dump_traceback_later()
    # Inputs are at most a few KiB; every loop in wire is bounded by the input size.
    assert slowest < 1.0, f"slowest input took {slowest:.3f} s"


def _fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=max(examples, 1), deadline=None, suppress_health_check=list(HealthCheck)
    )


@_fuzz_settings(_RANDOM_FRAMES)
@given(
    payload=st.binary(max_size=200),
    target=st.sampled_from(_DECODABLE),
    seed=st.integers(0, 2**32),
)
def test_random_frames(payload: bytes, target: tuple[type[Message], int], seed: int) -> None:
    cls, version = target
    exercise(payload, cls, version, random.Random(seed))


@_fuzz_settings(_MUTATED_FRAMES)
@given(
    index=st.integers(0, len(CORPUS) - 1),
    edits=st.lists(
        st.tuples(st.integers(0, 4096), st.binary(min_size=0, max_size=6), st.integers(0, 6)),
        min_size=1,
        max_size=4,
    ),
    seed=st.integers(0, 2**32),
)
def test_hypothesis_mutations(index: int, edits: list[tuple[int, bytes, int]], seed: int) -> None:
    """Hypothesis picks a corpus frame and splices (position, new bytes, bytes removed)."""
    cls, version, seed_frame = CORPUS[index]
    buf = bytearray(seed_frame)
    for pos, new, removed in edits:
        at = pos % (len(buf) + 1)
        buf[at : at + removed] = new
    exercise(bytes(buf), cls, version, random.Random(seed))


def test_the_budget_adds_up() -> None:
    assert _MUTATIONS + _RANDOM_FRAMES + _MUTATED_FRAMES == FUZZ_EXAMPLES
    assert FUZZ_EXAMPLES >= 50_000 or "FUZZ_EXAMPLES" in os.environ


def test_every_decoder_is_in_the_corpus() -> None:
    assert {(cls, v) for cls, v, _ in CORPUS} == set(ALL_VERSIONS)
    for cls, version, payload in CORPUS[:20]:
        # Sanity: unmutated corpus frames decode.
        header_version = 2 if _flexible(cls, version) else 1
        if cls.KIND == "request":
            header, offset = parse_request_header(payload)
            assert offset == _header_length(payload, header_version)
            assert header.api_key == cls.API_KEY
            codec.decode(cls, payload[offset:], version)
        frame(payload)
