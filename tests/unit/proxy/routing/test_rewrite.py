"""Response rewriting and request planning, checked with kafka-python as the independent codec.

Inputs are encoded by kafka-python, passed through ``rewrite_response`` as a broker's
response frame would be, and decoded again by kafka-python: every broker address must now
be the proxy's, and everything else must be unchanged.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kafka.protocol.admin.cluster import DescribeClusterResponse as KpDescribeCluster
from kafka.protocol.consumer.fetch import FetchResponse as KpFetch
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KpApiVersions
from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse as KpFindCoordinator
from kafka.protocol.metadata.metadata import MetadataResponse as KpMetadata
from kafka.protocol.producer.produce import ProduceResponse as KpProduce

from proxy.address import Address
from proxy.routing.rewrite import LocalAnswer, RequestPlan, plan_request, rewrite_response
from tests.support.directory_double import PROXY_HOST, Directory
from wire.apis import API_BY_KEY, ApiKey, response_header_version
from wire.errors import UnknownApiKey, UnsupportedVersion
from wire.headers import RequestHeader, encode_request_header


def _respond(api_key: int, version: int, kp_message: Any) -> bytes:
    """A response frame body as a broker sends it: correlation id, header tags, body."""
    header = struct.pack(">i", 7)
    if response_header_version(api_key, version) >= 1:
        header += b"\x00"
    return header + bytes(kp_message.encode(version=version))


def _rewrite(api_key: int, version: int, kp_message: Any, directory: Directory) -> Any:
    plan = RequestPlan(
        RequestHeader(api_key=api_key, api_version=version, correlation_id=7), True, True
    )
    frame = _respond(api_key, version, kp_message)
    out = rewrite_response(plan, frame, directory)
    assert out[:4] == frame[:4]
    start = 5 if response_header_version(api_key, version) >= 1 else 4
    return type(kp_message).decode(bytes(out[start:]), version=version)


@pytest.mark.parametrize("version", [0, 1, 4, 7, 9, 12, 13])
def test_metadata_brokers_point_at_the_proxy(version: int) -> None:
    broker = KpMetadata.MetadataResponseBroker
    brokers = [
        broker(node_id=n, host=f"kafka-{n}.internal", port=9092, rack=None) for n in (1, 2, 3)
    ]
    message = KpMetadata(version=version, brokers=brokers, topics=[], controller_id=2)
    directory = Directory()
    out = _rewrite(ApiKey.METADATA, version, message, directory)
    assert [(b.node_id, b.host, b.port) for b in out.brokers] == [
        (n, PROXY_HOST, 20000 + n) for n in (1, 2, 3)
    ]
    assert directory.upstream == {n: Address(f"kafka-{n}.internal", 9092) for n in (1, 2, 3)}


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator_single(version: int) -> None:
    message = KpFindCoordinator(
        version=version, error_code=0, node_id=2, host="kafka-2.internal", port=9092
    )
    out = _rewrite(ApiKey.FIND_COORDINATOR, version, message, Directory())
    assert (out.node_id, out.host, out.port) == (2, PROXY_HOST, 20002)


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_batched_skips_errors(version: int) -> None:
    ok = KpFindCoordinator.Coordinator(
        key="g1", node_id=3, host="kafka-3.internal", port=9093, error_code=0, error_message=None
    )
    failed = KpFindCoordinator.Coordinator(
        key="g2", node_id=-1, host="", port=-1, error_code=15, error_message="not available"
    )
    message = KpFindCoordinator(version=version, coordinators=[ok, failed])
    out = _rewrite(ApiKey.FIND_COORDINATOR, version, message, Directory())
    first, second = out.coordinators
    assert (first.key, first.node_id, first.host, first.port) == ("g1", 3, PROXY_HOST, 20003)
    assert (second.node_id, second.host, second.port, second.error_code) == (-1, "", -1, 15)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster(version: int) -> None:
    broker = KpDescribeCluster.DescribeClusterBroker(
        broker_id=5, host="kafka-5.internal", port=9092, rack="r1"
    )
    message = KpDescribeCluster(
        version=version, error_code=0, cluster_id="c", controller_id=5, brokers=[broker]
    )
    out = _rewrite(ApiKey.DESCRIBE_CLUSTER, version, message, Directory())
    (only,) = out.brokers
    assert (only.broker_id, only.host, only.port, only.rack) == (5, PROXY_HOST, 20005, "r1")


@pytest.mark.parametrize(("kp_class", "api_key", "version"), [
    (KpFetch, ApiKey.FETCH, 16), (KpFetch, ApiKey.FETCH, 17),
    (KpProduce, ApiKey.PRODUCE, 10), (KpProduce, ApiKey.PRODUCE, 11),
])  # fmt: skip
def test_kip951_node_endpoints(kp_class: Any, api_key: int, version: int) -> None:
    endpoint = kp_class.NodeEndpoint(node_id=4, host="kafka-4.internal", port=9092, rack=None)
    message = kp_class(version=version, responses=[], node_endpoints=[endpoint])
    out = _rewrite(api_key, version, message, Directory())
    (only,) = out.node_endpoints
    assert (only.node_id, only.host, only.port) == (4, PROXY_HOST, 20004)


def test_unchanged_response_passes_through_as_the_same_bytes() -> None:
    plan = RequestPlan(
        RequestHeader(api_key=ApiKey.FETCH, api_version=16, correlation_id=7), True, True
    )
    frame = _respond(ApiKey.FETCH, 16, KpFetch(version=16, responses=[], node_endpoints=[]))
    assert rewrite_response(plan, frame, Directory()) is frame


def test_api_versions_clamped_to_what_the_proxy_decodes() -> None:
    entries = [
        KpApiVersions.ApiVersion(api_key=ApiKey.FETCH, min_version=0, max_version=99),
        KpApiVersions.ApiVersion(api_key=ApiKey.JOIN_GROUP, min_version=0, max_version=9),
        KpApiVersions.ApiVersion(api_key=31999, min_version=0, max_version=1),
    ]
    message = KpApiVersions(version=3, error_code=0, api_keys=entries, finalized_features_epoch=-1)
    out = _rewrite(ApiKey.API_VERSIONS, 3, message, Directory())
    got = {entry.api_key: (entry.min_version, entry.max_version) for entry in out.api_keys}
    fetch = API_BY_KEY[ApiKey.FETCH]
    assert got == {
        ApiKey.FETCH: (fetch.min_version, fetch.max_version),  # decoded: clamped to our range
        ApiKey.JOIN_GROUP: (0, 9),  # only forwarded: the upstream's range stays
    }  # and the unknown key 31999 is gone


def _request(api_key: int, version: int, body: bytes = b"") -> bytes:
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=9, client_id="t")
    return encode_request_header(header) + body


def test_plan_unknown_api_key_is_refused() -> None:
    with pytest.raises(UnknownApiKey):
        plan_request(struct.pack(">hhih", 31999, 0, 9, -1), Directory())


def test_plan_unsupported_version_of_a_rewritten_api_is_refused() -> None:
    with pytest.raises(UnsupportedVersion):
        plan_request(_request(ApiKey.METADATA, 99), Directory())


def test_plan_api_versions_too_new_is_answered_locally_like_kafka() -> None:
    plan = plan_request(_request(ApiKey.API_VERSIONS, 99), Directory())
    assert isinstance(plan, LocalAnswer)
    size, correlation_id = struct.unpack(">ii", plan.response[:8])
    assert (size, correlation_id) == (len(plan.response) - 4, 9)
    answer = KpApiVersions.decode(plan.response[8:], version=0)
    assert answer.error_code == 35  # UNSUPPORTED_VERSION
    (entry,) = answer.api_keys
    assert entry.api_key == ApiKey.API_VERSIONS and entry.max_version >= 3


@pytest.mark.parametrize(("acks", "answered"), [(0, False), (1, True), (-1, True)])
def test_plan_produce_acks(acks: int, answered: bool) -> None:
    from kafka.protocol.producer.produce import ProduceRequest as KpProduceRequest

    body = bytes(
        KpProduceRequest(
            version=7, transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[]
        ).encode(version=7)
    )
    plan = plan_request(_request(ApiKey.PRODUCE, 7, body), Directory())
    assert isinstance(plan, RequestPlan)
    assert plan.expects_response is answered
    assert plan.rewrite is False  # v7 responses carry no broker addresses
