"""Issue 30: the proxy offers clients every API Apache Kafka offers them, on both lines users run.

An Apache Kafka node (4.4 and 3.9.2, `running_kafka`) is asked ApiVersions directly and through
the real proxy process, on the bootstrap port and on the broker's port, with client_auth
"none" and "passthrough". Nothing may be missing through the proxy except what it refuses on
purpose (SaslHandshake / SaslAuthenticate with client_auth none), and a range may differ only
for an API the proxy looks inside (proxy.routing.rewrite.LOOKED_INSIDE), where it is what wire/ can
decode. Bodies are read with kio, not with the proxy's own codec.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from proxy.routing.rewrite import LOOKED_INSIDE
from testbed.kafka_cluster import running_kafka
from testbed.kafka_install import KAFKA_LINES
from testbed.proxy_process import running_proxy
from tests.support.kio_client import KioConnection, kio_request
from tests.support.raw_tls_client import RawKafka
from wire.apis import API_BY_KEY, ApiKey
from wire.messages import ApiVersionsRequest, ApiVersionsResponse

Ranges = dict[int, tuple[int, int]]
CLIENT_SASL = {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
PASSTHROUGH = {"PURGATORY_PROXY_PROXY__CLIENT_AUTH": "passthrough"}
UNSUPPORTED_VERSION = 35


def _ranges(address: str) -> Ranges:
    """What ``address`` answers ApiVersions v3 with: api key -> (min, max)."""
    request = kio_request(
        ApiKey.API_VERSIONS, 3, client_software_name="kafka4-api-test", client_software_version="1"
    )
    with KioConnection(address) as connection:
        answer = connection.call(request)
    assert answer.error_code == 0
    return {int(e.api_key): (int(e.min_version), int(e.max_version)) for e in answer.api_keys}


def _broker_port_address(bootstrap: str) -> str:
    """The address the proxy advertises for the cluster's one broker (Metadata through it)."""
    request = kio_request(
        ApiKey.METADATA,
        12,
        topics=(),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with KioConnection(bootstrap) as connection:
        (broker,) = connection.call(request).brokers
    return f"{broker.host}:{broker.port}"


def _expected_through_proxy(direct: Ranges, *, client_sasl: bool) -> Ranges:
    """The proxy's documented policy applied to the cluster's answer."""
    expected: Ranges = {}
    for api_key, (low, high) in direct.items():
        spec = API_BY_KEY.get(api_key)
        if spec is None or (api_key in CLIENT_SASL and not client_sasl):
            continue
        if api_key == ApiKey.SASL_HANDSHAKE:
            low = max(low, 1)
        if api_key in LOOKED_INSIDE:
            high = min(high, spec.max_version)
            if api_key != ApiKey.PRODUCE:
                low = max(low, spec.min_version)
        expected[api_key] = (low, high)
    return expected


def _v5_answer(address: str) -> ApiVersionsResponse:
    """ApiVersions v5 (KIP-1242), as a Kafka 4.4 Java client sends it first."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        request = ApiVersionsRequest(
            client_software_name="kafka4-api-test", client_software_version="1", node_id=-1
        )
        answer = RawKafka(sock).call(ApiKey.API_VERSIONS, 5, request)
    assert isinstance(answer, ApiVersionsResponse), f"{address} closed the connection"
    return answer


@pytest.fixture(scope="module", params=KAFKA_LINES)
def kafka(request: pytest.FixtureRequest) -> Iterator[str]:
    """The PLAINTEXT address of a one-node Apache Kafka of each line users run."""
    with running_kafka(1, version=request.param) as cluster:
        yield cluster.bootstrap()


@pytest.mark.parametrize("client_sasl", [False, True], ids=["client_auth-none", "passthrough"])
def test_nothing_is_dropped_but_the_refusals_and_only_decoded_apis_are_clamped(
    kafka: str, client_sasl: bool
) -> None:
    direct = _ranges(kafka)
    unknown = sorted(set(direct) - set(API_BY_KEY))
    assert unknown == [], f"APIs the cluster offers that wire/'s tables lack: {unknown}"
    with running_proxy(kafka, env=PASSTHROUGH if client_sasl else None) as proxy:
        on_bootstrap = _ranges(proxy.bootstrap)
        on_broker_port = _ranges(_broker_port_address(proxy.bootstrap))
    expected = _expected_through_proxy(direct, client_sasl=client_sasl)
    assert on_bootstrap == expected
    assert on_broker_port == expected
    dropped = set(direct) - set(on_bootstrap)
    assert dropped == (set() if client_sasl else CLIENT_SASL)
    differing = {k for k in on_bootstrap if on_bootstrap[k] != direct[k]}
    assert differing <= set(LOOKED_INSIDE) | {ApiKey.SASL_HANDSHAKE}


def test_kafka_4_apis_are_offered_exactly_as_the_cluster_offers_them(kafka: str) -> None:
    """Against the line wire/'s tables come from, the proxy changes no range at all; against
    3.9 only Fetch's lower end (v0-v3 were removed from the schemas in Kafka 4)."""
    direct = _ranges(kafka)
    with running_proxy(kafka, env=PASSTHROUGH) as proxy:
        through = _ranges(proxy.bootstrap)
    differing = {
        API_BY_KEY[k].name: (direct[k], through[k]) for k in through if through[k] != direct[k]
    }
    if ApiKey.SHARE_FETCH in direct:  # Kafka 4
        assert differing == {"SaslHandshake": ((0, 1), (1, 1))}
        kafka_4 = (
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            ApiKey.SHARE_FETCH,
            ApiKey.STREAMS_GROUP_HEARTBEAT,
        )
        for api_key in (*kafka_4, ApiKey.CREATE_DELEGATION_TOKEN):
            assert through[api_key] == direct[api_key]
    else:
        fetch_low = API_BY_KEY[ApiKey.FETCH].min_version
        assert differing == {
            "SaslHandshake": ((0, 1), (1, 1)),
            "Fetch": (direct[ApiKey.FETCH], (fetch_low, direct[ApiKey.FETCH][1])),
        }


def test_api_versions_v5_through_the_proxy_as_the_cluster_answers_it(kafka: str) -> None:
    """A Kafka 4.4 client opens with ApiVersions v5. A 4.4 cluster answers it; a 3.9 cluster
    answers with a v0 UNSUPPORTED_VERSION body naming v0-v4, and the client retries: through
    the proxy the client must see the same."""
    direct = _v5_answer(kafka)
    with running_proxy(kafka) as proxy:
        through = _v5_answer(proxy.bootstrap)
    assert through.error_code == direct.error_code
    if direct.error_code == UNSUPPORTED_VERSION:
        ranges = [(e.api_key, e.min_version, e.max_version) for e in through.api_keys]
        assert ranges == [(ApiKey.API_VERSIONS, 0, 4)]
    else:
        assert direct.error_code == 0
        assert {e.api_key for e in through.api_keys} == {
            e.api_key for e in direct.api_keys
        } - CLIENT_SASL
