"""The request log's error_code: read at a fixed offset where the schema allows, else None.

Responses are encoded by kafka-python's protocol classes (an independent codec), so the
offsets derived from our schema tables are checked against real bytes.
"""

from __future__ import annotations

import pytest
from kafka.protocol.old.api_versions import ApiVersionsResponse
from kafka.protocol.old.fetch import FetchResponse
from kafka.protocol.old.find_coordinator import FindCoordinatorResponse
from kafka.protocol.old.metadata import MetadataResponse

from proxy.observability.error_peek import error_code_offset, peek_error_code


def _frame(response: object, correlation_id: int = 7) -> bytes:
    # Response header v0 (correlation id only) or v1 (+ empty tagged fields).
    flexible = getattr(response, "FLEXIBLE_VERSION", False)
    header = correlation_id.to_bytes(4, "big") + (b"\x00" if flexible else b"")
    return header + response.encode()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("api_key", "version", "offset"),
    [
        (18, 0, 0),  # ApiVersions: error_code first
        (18, 3, 0),
        (1, 6, None),  # Fetch before v7: no top-level error
        (1, 7, 4),  # Fetch v7+: after throttle_time_ms
        (10, 0, 0),  # FindCoordinator v0: error_code first
        (10, 2, 4),  # v1-v3: after throttle_time_ms
        (10, 4, None),  # v4+: errors per coordinator (batched)
        (3, 12, None),  # Metadata: errors per topic
        (0, 9, None),  # Produce: errors per partition
    ],
)
def test_offsets_come_from_the_schema(api_key: int, version: int, offset: int | None) -> None:
    assert error_code_offset(api_key, version) == offset


def test_peek_reads_real_responses() -> None:
    api_versions = ApiVersionsResponse[0](error_code=35, api_versions=[])
    assert peek_error_code(18, 0, _frame(api_versions)) == 35
    fetch = FetchResponse[7](throttle_time_ms=5, error_code=70, session_id=0, topics=[])
    assert peek_error_code(1, 7, _frame(fetch)) == 70
    coordinator = FindCoordinatorResponse[1](
        throttle_time_ms=0, error_code=15, error_message=None, node_id=-1, host="", port=-1
    )
    assert peek_error_code(10, 1, _frame(coordinator)) == 15
    metadata = MetadataResponse[1](brokers=[], controller_id=1, topics=[])
    assert peek_error_code(3, 1, _frame(metadata)) is None
    assert peek_error_code(1, 7, b"\x00\x00\x00\x07\x00") is None  # truncated: no guess
