# Strategy: `wire` is the Kafka wire protocol as a sans-I/O library, modelled on h11:
# bytes in, values out, no sockets, no clocks, no threads, no async framework. Each
# concern has its own module and this file re-exports the public surface.
"""The Kafka wire protocol, sans I/O.

errors.py           WireError tree (Local vs Remote, each with a Kafka error-code hint)
sentinel.py         named sentinels for the state machines (NEED_DATA)
framing.py          size-prefixed frames: FrameDecoder, read_frame_size, frame
headers.py          request/response headers, correlation-id rewriting
apis.py             the API table: names, version ranges, flexible versions, header versions
codec.py            decode/encode of message bodies (classes in wire.messages, generated)
records.py          record-batch headers, counts and CRCs without decoding records
produce_summary.py  Produce fast paths: acks, timeout and partitions; an untagged response
messages/           the generated message classes, one module per request or response
_generate/          generates messages/ and _api_table.py from the JSON schemas of a
                    kafka-clients jar (a development tool, never imported at run time)
_api_table.py       every API key in the schema tables (generated)
_struct.py          base classes and schema rows of the generated classes
_compiler.py        compiles a decoder and an encoder per (message class, version)
_source.py          the compiler's source builder and what it asks of schema rows
_emit_decode.py     the decode emitter: flat loops, records sliced, lengths checked first
_emit_encode.py     the encode emitter: Java's semantics, records passed through
_tags.py            varints and tag sections, called by generated code and headers.py
"""

from __future__ import annotations

from wire import messages
from wire.apis import (
    API_BY_KEY,
    APIS,
    ApiKey,
    ApiSpec,
    api_spec,
    can_decode,
    request_header_version,
    response_header_version,
)
from wire.codec import (
    Message,
    decode,
    decode_api_versions_response,
    decode_request,
    decode_response,
    encode,
    encode_parts,
    precompile,
    request_class,
    response_class,
)
from wire.errors import (
    CorruptRecords,
    FrameTooLarge,
    LocalProtocolError,
    LooksLikeTLS,
    MalformedMessage,
    NegativeFrameSize,
    RemoteProtocolError,
    TruncatedFrame,
    UnknownApiKey,
    UnsupportedVersion,
    WireError,
)
from wire.framing import (
    CLOSED,
    DEFAULT_MAX_FRAME_BYTES,
    NEED_DATA,
    FrameDecoder,
    frame,
    read_frame_size,
    size_prefix,
)
from wire.headers import (
    RequestHeader,
    ResponseHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
    peek_request_header,
    peek_response_correlation_id,
    replace_request_correlation_id,
    replace_response_correlation_id,
    set_request_correlation_id,
    set_response_correlation_id,
)
from wire.records import (
    BatchScan,
    Compression,
    RecordBatchHeader,
    TimestampType,
    iter_batches,
    scan_batches,
    verify_crc,
    verify_crcs,
)

__all__ = [
    "APIS",
    "API_BY_KEY",
    "CLOSED",
    "DEFAULT_MAX_FRAME_BYTES",
    "NEED_DATA",
    "ApiKey",
    "ApiSpec",
    "BatchScan",
    "Compression",
    "CorruptRecords",
    "FrameDecoder",
    "FrameTooLarge",
    "LocalProtocolError",
    "LooksLikeTLS",
    "MalformedMessage",
    "Message",
    "NegativeFrameSize",
    "RecordBatchHeader",
    "RemoteProtocolError",
    "RequestHeader",
    "ResponseHeader",
    "TimestampType",
    "TruncatedFrame",
    "UnknownApiKey",
    "UnsupportedVersion",
    "WireError",
    "api_spec",
    "can_decode",
    "decode",
    "decode_api_versions_response",
    "decode_request",
    "decode_response",
    "encode",
    "encode_parts",
    "encode_request_header",
    "encode_response_header",
    "frame",
    "iter_batches",
    "messages",
    "parse_request_header",
    "parse_response_header",
    "peek_request_header",
    "peek_response_correlation_id",
    "precompile",
    "read_frame_size",
    "replace_request_correlation_id",
    "replace_response_correlation_id",
    "request_class",
    "request_header_version",
    "response_class",
    "response_header_version",
    "scan_batches",
    "set_request_correlation_id",
    "set_response_correlation_id",
    "size_prefix",
    "verify_crc",
    "verify_crcs",
]
