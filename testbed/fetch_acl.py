# Strategy: an ACL denial, as Kafka answers a consumer without READ on the topic, made by
# whoever stands in for the broker (the tests' front for SaslPolicy.fetch_denied principals,
# the scripted broker of the in-process tests), so both answer with the same bytes; and the
# record bytes a Fetch answer carried, which the front's audit counts per principal.
"""Fetch answers the tests' brokers make or read: ACL denials, and record bytes carried."""

from __future__ import annotations

from testbed.sasl_server import response_frame
from wire.apis import ApiKey, response_header_version
from wire.codec import decode_request, decode_response, encode
from wire.headers import parse_request_header, parse_response_header
from wire.messages import FetchRequest, FetchResponse
from wire.messages.fetch_response import FetchableTopicResponse, PartitionData

__all__ = [
    "TOPIC_AUTHORIZATION_FAILED",
    "denied_fetch_answer",
    "fetch_denied",
    "fetch_record_bytes",
]

TOPIC_AUTHORIZATION_FAILED = 29


def denied_fetch_answer(frame_body: bytes | bytearray | memoryview) -> bytes:
    """The front's own answer to a Fetch request frame (no size prefix) from a denied principal.

    TOPIC_AUTHORIZATION_FAILED for every requested partition, no records, high watermark,
    last stable offset and log start offset -1 (Kafka's ``FetchResponse.partitionResponse``
    for an error); a size-prefixed frame, encoded with wire's FetchResponse.
    """
    header, start = parse_request_header(frame_body)
    version = header.api_version
    request = decode_request(ApiKey.FETCH, version, memoryview(frame_body)[start:])
    assert isinstance(request, FetchRequest)
    body = encode(fetch_denied(request), version)
    return response_frame(header.correlation_id, ApiKey.FETCH, version, body)


def fetch_denied(request: FetchRequest) -> FetchResponse:
    """An ACL denial of ``request``: TOPIC_AUTHORIZATION_FAILED for every partition asked for
    (also the scripted broker's, tests/support/scripted_broker.py)."""
    return FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic=topic.topic,
                topic_id=topic.topic_id,
                partitions=[
                    PartitionData(
                        partition_index=partition.partition,
                        error_code=TOPIC_AUTHORIZATION_FAILED,
                        high_watermark=-1,
                        records=b"",
                    )
                    for partition in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def fetch_record_bytes(version: int, answer: bytes | bytearray | memoryview) -> int:
    """Total record bytes in a Fetch response frame (no size prefix), over every partition."""
    header_version = response_header_version(ApiKey.FETCH, version)
    _, start = parse_response_header(answer, header_version)
    response = decode_response(ApiKey.FETCH, version, memoryview(answer)[start:])
    assert isinstance(response, FetchResponse)
    return sum(
        len(partition.records or b"")
        for topic in response.responses
        for partition in topic.partitions
    )
