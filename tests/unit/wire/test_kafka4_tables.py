"""The tables come from Kafka 4's own schemas: every API a Kafka 4.4 broker offers clients is
in them, and the generator reads the schema format strictly."""

from __future__ import annotations

import pytest

from tests.unit.wire.kafka_bytes import KAFKA_SAMPLES
from wire import _generate
from wire.apis import API_BY_KEY, ApiKey, api_spec


def _advertised_by_kafka_4_4() -> dict[int, tuple[int, int]]:
    """The API ranges a Kafka 4.4 broker answered a client with (captured, kafka_bytes.json)."""
    answer = next(
        s.kafka_json
        for s in KAFKA_SAMPLES
        if s.message == "ApiVersionsResponse" and s.kafka_json["errorCode"] == 0
    )
    return {e["apiKey"]: (e["minVersion"], e["maxVersion"]) for e in answer["apiKeys"]}


def test_every_api_a_kafka_4_4_broker_offers_is_in_the_tables() -> None:
    advertised = _advertised_by_kafka_4_4()
    assert len(advertised) >= 75
    assert sorted(set(advertised) - set(API_BY_KEY)) == []
    for api_key, (_, high) in advertised.items():
        assert high <= api_spec(api_key).max_version, api_spec(api_key).name


def test_the_kafka_4_apis_kafka_python_lacked_are_known_by_name() -> None:
    for name in (
        "CONSUMER_GROUP_HEARTBEAT", "CONSUMER_GROUP_DESCRIBE", "GET_TELEMETRY_SUBSCRIPTIONS",
        "PUSH_TELEMETRY", "SHARE_GROUP_HEARTBEAT", "SHARE_GROUP_DESCRIBE", "SHARE_FETCH",
        "SHARE_ACKNOWLEDGE", "DESCRIBE_SHARE_GROUP_OFFSETS", "ALTER_SHARE_GROUP_OFFSETS",
        "DELETE_SHARE_GROUP_OFFSETS", "STREAMS_GROUP_HEARTBEAT", "STREAMS_GROUP_DESCRIBE",
        "CREATE_DELEGATION_TOKEN", "RENEW_DELEGATION_TOKEN", "EXPIRE_DELEGATION_TOKEN",
        "DESCRIBE_DELEGATION_TOKEN",
    ):  # fmt: skip
        assert ApiKey[name] in API_BY_KEY


def test_removed_apis_are_left_out() -> None:
    """LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown (keys 4-7) are kept
    in Kafka's schemas with validVersions "none": no version to advertise or forward."""
    assert not {4, 5, 6, 7} & set(API_BY_KEY)


_FUTURE = '{"apiKey": 99, "type": "request", "name": "FutureRequest", "validVersions": "0", '


@pytest.mark.parametrize(
    ("schema", "new_key"),
    [
        (_FUTURE + '"apiStability": "evolving", "fields": []}', "apiStability"),
        (_FUTURE + '"fields": [{"name": "X", "type": "int32", "versions": "0+", "encoding": 1}]}',
         "encoding"),
    ],
    ids=["message-key", "field-key"],
)  # fmt: skip
def test_a_schema_key_the_generator_does_not_know_stops_it(schema: str, new_key: str) -> None:
    """A flag a future Kafka adds may change the bytes: generation stops until it is taught."""
    schemas = _generate.KafkaSchemas({"FutureRequest": schema}, kafka_version="99.0.0")
    with pytest.raises(ValueError, match=new_key):
        schemas.load("FutureRequest")
