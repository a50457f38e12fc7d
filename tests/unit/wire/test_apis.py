"""wire.apis: the API table generated from the schemas, and what can be decoded."""

from __future__ import annotations

import pytest

from wire import codec
from wire.apis import API_BY_KEY, APIS, ApiKey, api_spec, can_decode
from wire.errors import UnknownApiKey


def test_the_table_knows_the_client_apis() -> None:
    assert len(APIS) == len(API_BY_KEY) >= 50
    produce = api_spec(ApiKey.PRODUCE)
    assert (produce.name, produce.min_version, produce.max_version) == ("Produce", 3, 13)
    assert produce.first_flexible_version == 9
    assert "broker" in produce.listeners
    assert api_spec(ApiKey.SASL_HANDSHAKE).first_flexible_version is None
    assert api_spec(ApiKey.DESCRIBE_CLUSTER).first_flexible_version == 0
    assert api_spec(ApiKey.INIT_PRODUCER_ID).latest_version_unstable
    assert not api_spec(ApiKey.LIST_OFFSETS).latest_version_unstable
    assert [a.api_key for a in APIS] == sorted(API_BY_KEY)
    assert {k.value for k in ApiKey} == set(API_BY_KEY)


def test_unknown_key() -> None:
    with pytest.raises(UnknownApiKey):
        api_spec(7)


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [
        (ApiKey.PRODUCE, 3, True),
        (ApiKey.PRODUCE, 13, True),
        (ApiKey.PRODUCE, 2, False),  # removed in Kafka 4: forward, do not decode
        (ApiKey.PRODUCE, 14, False),  # newer than the tables
        (ApiKey.FETCH, 4, True),
        (ApiKey.FETCH, 18, True),
        (ApiKey.LIST_OFFSETS, 1, True),
        (ApiKey.METADATA, 0, True),
        (ApiKey.FIND_COORDINATOR, 6, True),
        (ApiKey.API_VERSIONS, 4, True),
        (ApiKey.DESCRIBE_CLUSTER, 2, True),
        (ApiKey.JOIN_GROUP, 0, False),  # known, forwarded only
        (999, 0, False),
    ],
)
def test_can_decode(api_key: int, version: int, expected: bool) -> None:
    assert can_decode(api_key, version) is expected


def test_can_decode_matches_the_codec_classes() -> None:
    for spec in APIS:
        assert spec.decodable == (spec.api_key in codec.REQUEST_CLASSES)
        if spec.decodable:
            for cls in (codec.request_class(spec.api_key), codec.response_class(spec.api_key)):
                assert (spec.min_version, spec.max_version) == cls.VERSIONS
                assert spec.first_flexible_version == cls.FIRST_FLEXIBLE_VERSION
