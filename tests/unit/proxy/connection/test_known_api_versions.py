"""The cluster's ApiVersions answer kept per port, and the requests it may answer."""

from __future__ import annotations

from proxy.connection.api_versions import KnownApiVersions
from wire.apis import ApiKey
from wire.codec import decode
from wire.headers import RequestHeader
from wire.messages import ApiVersionsResponse
from wire.messages.api_versions_response import ApiVersion


def _cluster_answer(api_versions_max: int) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        api_keys=[
            ApiVersion(api_key=ApiKey.PRODUCE, min_version=3, max_version=12),
            ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=api_versions_max),
        ]
    )


def _request(version: int) -> RequestHeader:
    return RequestHeader(ApiKey.API_VERSIONS, version, 7, "client")


def test_a_kept_answer_serves_the_versions_the_cluster_serves() -> None:
    known = KnownApiVersions(max_age_s=30)
    known.learn(1, _cluster_answer(api_versions_max=4), now_s=0)
    frame = known.answer(1, _request(3), now_s=1)
    assert frame is not None
    body = memoryview(frame)[8:]  # size, correlation id (header v0 at every version)
    assert decode(ApiVersionsResponse, body, 3).api_keys == _cluster_answer(4).api_keys


def test_a_version_the_cluster_does_not_serve_goes_to_the_cluster() -> None:
    """Kafka 3.9 serves ApiVersions up to v4: a v5 request (franz-go's first) must get the
    broker's own v0 UNSUPPORTED_VERSION answer, not the kept answer re-encoded as v5."""
    known = KnownApiVersions(max_age_s=30)
    known.learn(1, _cluster_answer(api_versions_max=4), now_s=0)
    assert known.answer(1, _request(5), now_s=1) is None
    assert known.answer(1, _request(4), now_s=1) is not None


def test_an_old_answer_or_another_port_is_not_used() -> None:
    known = KnownApiVersions(max_age_s=30)
    known.learn(1, _cluster_answer(api_versions_max=4), now_s=0)
    assert known.answer(1, _request(3), now_s=30) is None
    assert known.answer(2, _request(3), now_s=1) is None
