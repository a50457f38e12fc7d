# Strategy: decide per request, from its header alone where possible, what the proxy must do
# with it, and rewrite the few responses that name brokers or versions.
#
#   - Every API in wire/'s tables (all of Kafka's own schemas, wire/_generate/) is forwarded
#     as bytes at whatever version the cluster offers, except the few the proxy looks inside
#     (LOOKED_INSIDE, each with its reason): those are decoded, so their versions are clamped
#     to the tables' ranges, and a version outside them closes the connection.
#   - APIs newer than the tables: not advertised, and a request for one closes the connection
#     with one log line (we could not tell where a broker address might hide in it).
#   - ApiVersions of a version we cannot decode: answered locally with Kafka's v0
#     UNSUPPORTED_VERSION response carrying our ranges, so clients retry lower. A broker
#     older than the client's version answers the same way, and that answer is passed on.
#   - SaslHandshake / SaslAuthenticate from clients: with client_auth = "none" refused locally
#     and not advertised (proxy/security/client_sasl.py); with "passthrough" forwarded as they are
#     and advertised, SaslHandshake from v1 on (v0 is followed by unframed SASL tokens, which a
#     proxy that reads Kafka frames cannot pass on: refused with the connection closed).
#   - Produce with acks=0: Kafka sends no response, so no response slot is kept for it.
#
# A response is re-encoded only when something in it changed; otherwise its bytes pass through.
"""What to do with each request, and the rewriting of responses that name brokers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from proxy.address import Address
from proxy.routing.topic_names import TopicNames
from proxy.security.client_sasl import CLIENT_SASL_APIS, ClientSaslV0, refuse_client_sasl
from wire.apis import API_BY_KEY, ApiKey, can_decode, response_header_version
from wire.codec import decode_api_versions_response, decode_response, encode
from wire.errors import UnknownApiKey, UnsupportedVersion
from wire.framing import frame
from wire.headers import (
    RequestHeader,
    ResponseHeader,
    encode_response_header,
    parse_request_header,
    parse_response_header,
)
from wire.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeClusterResponse,
    FetchResponse,
    FindCoordinatorResponse,
    MetadataResponse,
    ProduceResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
)
from wire.messages.api_versions_response import ApiVersion
from wire.messages.produce_response import PartitionProduceResponse, TopicProduceResponse
from wire.produce_summary import produce_response_has_no_tags, summarize_produce

if TYPE_CHECKING:
    from wire._struct import Message


class BrokerDirectory(Protocol):
    """What the rewriter needs to know brokers by (proxy/routing/directory.BrokerDirectory)."""

    topic_names: TopicNames

    def advertise(self, node_id: int, upstream: Address) -> Address: ...
    def learn_brokers(self, brokers: dict[int, Address]) -> None: ...


__all__ = [
    "LOOKED_INSIDE",
    "BrokerDirectory",
    "LocalAnswer",
    "ProducedPartitions",
    "RequestPlan",
    "advertise_node_endpoints",
    "plan_request",
    "produce_timed_out",
    "rewrite_response",
    "unsupported_api_versions",
]

UNSUPPORTED_VERSION = 35
REQUEST_TIMED_OUT = 7

#: The APIs the proxy decodes, and why. Only these have their ranges clamped in ApiVersions
#: answers (and versions outside wire/'s tables refused); the rest pass through as bytes.
LOOKED_INSIDE: Mapping[int, str] = MappingProxyType(
    {
        ApiKey.PRODUCE: "held until answered (acks, timeout, partitions read); KIP-951 hints",
        ApiKey.FETCH: "held and answered by the proxy (proxy/held); KIP-951 hints",
        ApiKey.METADATA: "names brokers; teaches the proxy brokers and topic ids",
        ApiKey.FIND_COORDINATOR: "names coordinators",
        ApiKey.SASL_HANDSHAKE: "refused by the proxy with client_auth = none",
        ApiKey.API_VERSIONS: "ranges rewritten; answered from the cluster's last answer",
        ApiKey.SASL_AUTHENTICATE: "refused with none; session lifetime read in passthrough",
        ApiKey.DESCRIBE_CLUSTER: "names brokers",
        ApiKey.SHARE_FETCH: "KIP-932 node endpoints",
        ApiKey.SHARE_ACKNOWLEDGE: "KIP-932 node endpoints",
    }
)

# Responses that name brokers, from every response schema of Kafka 4.4 with a host or port:
#   rewritten to the proxy's address for that node
#     Metadata (brokers); FindCoordinator (v0-3 one coordinator, v4+ one per key, for every
#     key type: 0 groups of every kind, 1 transactions, 2 share-partition state);
#     DescribeCluster (brokers); the node endpoints of Produce v10+ / Fetch v16+ (KIP-951) and
#     of ShareFetch / ShareAcknowledge (KIP-932, every version): clients follow leaders there.
#   left as they are
#     DescribeQuorum v2+ nodes' listeners: the controllers, which the proxy does not front
#       (clients reach them only through bootstrap.controllers, never through a broker port).
#     StreamsGroupHeartbeat / StreamsGroupDescribe endpoints: the Kafka Streams application
#       instances' own endpoints (interactive queries), not brokers.
#     ClientHost of DescribeGroups / ConsumerGroupDescribe / ShareGroupDescribe /
#       StreamsGroupDescribe members, and Host of DescribeAcls / DeleteAcls: client addresses.
#     Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot, UpdateRaftVoter: controller-only
#       KRaft APIs that brokers do not serve.
#
#: First versions whose responses can carry node endpoints (KIP-951, KIP-932).
_NODE_ENDPOINTS_SINCE: dict[int, int] = {
    ApiKey.PRODUCE: 10,
    ApiKey.FETCH: 16,
    ApiKey.SHARE_FETCH: 0,
    ApiKey.SHARE_ACKNOWLEDGE: 0,
}
_ALWAYS_REWRITTEN = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER}
)


@dataclass(frozen=True, slots=True)
class ProducedPartitions:
    """What a produce wrote to: enough to answer it with REQUEST_TIMED_OUT and to wake the
    fetches waiting on its partitions, without keeping its records alive."""

    timeout_ms: int
    topics: tuple[tuple[str, UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """A request to forward upstream, and what its response needs.

    ``body_offset``: where the request body starts in the frame body (after the header).
    ``client_sasl``: clients authenticate through the proxy (passthrough): an ApiVersions
    answer keeps the SASL APIs.
    """

    header: RequestHeader
    expects_response: bool
    rewrite: bool
    body_offset: int = 0
    produced: ProducedPartitions | None = None
    client_sasl: bool = False

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


@dataclass(frozen=True, slots=True)
class LocalAnswer:
    """A request the proxy answers itself; ``response`` is the whole frame, size included."""

    correlation_id: int
    response: bytes


def plan_request(
    body: bytes | bytearray | memoryview, brokers: BrokerDirectory, *, client_sasl: bool = False
) -> RequestPlan | LocalAnswer:
    """Classify one request frame body (the bytes after the size).

    ``client_sasl``: client_auth = "passthrough"; the client's SASL requests are forwarded.

    Raises:
        ClientSaslV0: SaslHandshake v0 in passthrough (see the module header).
        UnknownApiKey: an API the schema tables do not know.
        UnsupportedVersion: a version of an API the proxy rewrites that it cannot decode.
        MalformedMessage: a header (or Produce body) that does not parse.
    """
    header, header_length = parse_request_header(body)
    api_key, version = header.api_key, header.api_version
    route = _ROUTES.get((api_key, version))
    if route is None:
        route = _route(api_key, version)  # raises for what the proxy refuses
    rewrite, action = route
    if action == _FORWARD:
        passes_sasl = client_sasl and api_key == ApiKey.API_VERSIONS
        return RequestPlan(header, True, rewrite, header_length, None, passes_sasl)
    if action == _PRODUCE:
        # acks, timeout_ms and the partitions, records stepped over by their length: the
        # whole decode cost a dataclass per partition for three fields (profiled at 3.4 %
        # of the proxy's CPU with one record per request).
        produce = summarize_produce(memoryview(body)[header_length:], version)
        if produce.acks == 0:
            return RequestPlan(header, False, rewrite, header_length)
        produced = ProducedPartitions(produce.timeout_ms, produce.topics)
        return RequestPlan(header, True, rewrite, header_length, produced)
    if action == _UNSUPPORTED_API_VERSIONS:
        return LocalAnswer(header.correlation_id, unsupported_api_versions(header.correlation_id))
    if not client_sasl:  # client_auth = none: refused, never forwarded
        return LocalAnswer(header.correlation_id, refuse_client_sasl(header))
    if api_key == ApiKey.SASL_HANDSHAKE and version == 0:
        raise ClientSaslV0(
            "SaslHandshake v0 (unframed SASL tokens) cannot pass through the proxy; "
            "clients that speak SaslAuthenticate use v1"
        )
    return RequestPlan(header, True, False, header_length)


# What plan_request does with an (api key, version), decided once per pair: the checks below
# cost more than the rest of planning a small request.
_FORWARD, _PRODUCE, _UNSUPPORTED_API_VERSIONS, _CLIENT_SASL = range(4)
_ROUTES: dict[tuple[int, int], tuple[bool, int]] = {}
_MAX_ROUTES = 4096


def _route(api_key: int, version: int) -> tuple[bool, int]:
    """(whether the response is rewritten, what to do) for a request of this API version.

    Raises:
        UnknownApiKey: an API the schema tables do not know.
        UnsupportedVersion: a version of an API the proxy looks inside that it cannot decode.
    """
    spec = API_BY_KEY.get(api_key)
    if spec is None:
        raise UnknownApiKey(f"unknown API key {api_key}")
    if api_key == ApiKey.API_VERSIONS and not can_decode(api_key, version):
        return False, _UNSUPPORTED_API_VERSIONS  # not cached: any version may come
    if api_key in LOOKED_INSIDE and not can_decode(api_key, version):
        raise UnsupportedVersion(f"{spec.name} v{version} is not supported by the proxy")
    rewrite = api_key in _ALWAYS_REWRITTEN or (
        api_key in _NODE_ENDPOINTS_SINCE and version >= _NODE_ENDPOINTS_SINCE[api_key]
    )
    if api_key in CLIENT_SASL_APIS:  # refused with client_auth = none, else forwarded
        route = (False, _CLIENT_SASL)
    elif api_key == ApiKey.PRODUCE:
        route = (rewrite, _PRODUCE)
    else:
        route = (rewrite, _FORWARD)
    if len(_ROUTES) < _MAX_ROUTES:  # a client cycling through versions cannot grow it
        _ROUTES[api_key, version] = route
    return route


def rewrite_response(
    plan: RequestPlan, body: bytes | bytearray | memoryview, brokers: BrokerDirectory
) -> bytes | bytearray | memoryview:
    """The response frame body the client should see (``body`` itself when unchanged)."""
    api_key, version = plan.header.api_key, plan.header.api_version
    header_version = _response_header_version(api_key, version)
    if header_version == 0:
        start = 4  # the correlation id
    elif len(body) > 4 and body[4] == 0:
        start = 5  # and an empty tag section, as brokers send it
    else:
        _, start = parse_response_header(body, header_version)
    rest = memoryview(body)[start:]
    if api_key == ApiKey.PRODUCE and produce_response_has_no_tags(rest, version):
        return body  # no KIP-951 fields, nothing names a broker: not worth a decode
    if api_key == ApiKey.API_VERSIONS:
        # A broker that does not know the client's version answers with a v0 body (KIP-511).
        answer, version = decode_api_versions_response(rest, version)
        _clamp_api_versions(answer, keep_sasl=plan.client_sasl)
        return bytes(body[:start]) + encode(answer, version)
    message = decode_response(api_key, version, rest)
    if not _REWRITERS[api_key](message, brokers):
        return body
    return bytes(body[:start]) + encode(message, version)


_response_header_version = cache(response_header_version)


def _clamp_api_versions(message: ApiVersionsResponse, *, keep_sasl: bool) -> None:
    """Advertise only what the proxy passes on: every API the tables know, at the tables'
    ranges where the proxy looks inside; SASL only in passthrough, SaslHandshake from v1 (see
    the module header)."""
    kept: list[ApiVersion] = []
    for entry in message.api_keys:
        api_key = entry.api_key
        spec = API_BY_KEY.get(api_key)
        if spec is None or (api_key in CLIENT_SASL_APIS and not keep_sasl):
            continue  # we would close (or refuse) connections that use it: do not advertise it
        if api_key == ApiKey.SASL_HANDSHAKE:
            entry.min_version = max(entry.min_version, 1)
        if api_key in LOOKED_INSIDE:
            low = max(entry.min_version, spec.min_version)
            entry.max_version = min(entry.max_version, spec.max_version)
            if low > entry.max_version:
                continue
            # Kafka 4 advertises Produce from v0 though it serves v3+ (KAFKA-18659): librdkafka
            # before 2.10 turns compression off unless Produce v0 is advertised. Clients pick
            # their highest shared version, so keeping the cluster's minimum costs nothing.
            if api_key != ApiKey.PRODUCE:
                entry.min_version = low
        kept.append(entry)
    message.api_keys = kept
    # Tansu writes every top-level tagged field even at its default; Kafka omits those, and
    # librdkafka before 2.1 (Debian's kcat) cannot skip them. Encode them as Kafka would:
    # drop the default-valued known tags, keep tags the schema does not know.
    message.raw_tagged_fields = tuple(
        (tag, data) for tag, data in message.raw_tagged_fields if tag not in _KNOWN_TAGS
    )


_KNOWN_TAGS = frozenset(spec.tag for spec in ApiVersionsResponse._SCHEMA if spec.tag is not None)


def _rewrite_metadata(message: Message, brokers: BrokerDirectory) -> bool:
    assert isinstance(message, MetadataResponse)
    brokers.learn_brokers({b.node_id: Address(b.host, b.port) for b in message.brokers})
    for topic in message.topics:  # v10+: the ids clients may fetch and produce by
        if topic.name:
            brokers.topic_names.learn(topic.topic_id, topic.name)
    for broker in message.brokers:
        advertised = brokers.advertise(broker.node_id, Address(broker.host, broker.port))
        broker.host, broker.port = advertised.host, advertised.port
    return bool(message.brokers)


def _rewrite_find_coordinator(message: Message, brokers: BrokerDirectory) -> bool:
    assert isinstance(message, FindCoordinatorResponse)
    changed = False
    if message.error_code == 0 and message.node_id >= 0 and message.host:
        advertised = brokers.advertise(message.node_id, Address(message.host, message.port))
        message.host, message.port = advertised.host, advertised.port
        changed = True
    for coordinator in message.coordinators:
        if coordinator.error_code == 0 and coordinator.node_id >= 0 and coordinator.host:
            upstream = Address(coordinator.host, coordinator.port)
            advertised = brokers.advertise(coordinator.node_id, upstream)
            coordinator.host, coordinator.port = advertised.host, advertised.port
            changed = True
    return changed


def _rewrite_describe_cluster(message: Message, brokers: BrokerDirectory) -> bool:
    assert isinstance(message, DescribeClusterResponse)
    for broker in message.brokers:
        advertised = brokers.advertise(broker.broker_id, Address(broker.host, broker.port))
        broker.host, broker.port = advertised.host, advertised.port
    return bool(message.brokers)


def _rewrite_node_endpoints(message: Message, brokers: BrokerDirectory) -> bool:
    assert isinstance(
        message, ProduceResponse | FetchResponse | ShareFetchResponse | ShareAcknowledgeResponse
    )
    for endpoint in message.node_endpoints:
        advertised = brokers.advertise(endpoint.node_id, Address(endpoint.host, endpoint.port))
        endpoint.host, endpoint.port = advertised.host, advertised.port
    return bool(message.node_endpoints)


_REWRITERS: dict[int, Callable[[Message, BrokerDirectory], bool]] = {
    ApiKey.METADATA: _rewrite_metadata,
    ApiKey.FIND_COORDINATOR: _rewrite_find_coordinator,
    ApiKey.DESCRIBE_CLUSTER: _rewrite_describe_cluster,
    ApiKey.PRODUCE: _rewrite_node_endpoints,
    ApiKey.FETCH: _rewrite_node_endpoints,
    ApiKey.SHARE_FETCH: _rewrite_node_endpoints,
    ApiKey.SHARE_ACKNOWLEDGE: _rewrite_node_endpoints,
}


def advertise_node_endpoints(message: FetchResponse, brokers: BrokerDirectory) -> None:
    """Point a Fetch response the proxy built at the proxy's ports (KIP-951 leader hints)."""
    _rewrite_node_endpoints(message, brokers)


def produce_timed_out(plan: RequestPlan) -> bytes:
    """The whole response frame for a produce whose timeout_ms passed before the broker
    answered: REQUEST_TIMED_OUT for every partition, as a broker whose replicas are too slow
    would send it. The client retries it (idempotent producers without duplicates)."""
    assert plan.produced is not None
    header = plan.header
    response = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=name,
                topic_id=topic_id,
                partition_responses=[
                    PartitionProduceResponse(index=index, error_code=REQUEST_TIMED_OUT)
                    for index in indexes
                ],
            )
            for name, topic_id, indexes in plan.produced.topics
        ]
    )
    header_version = response_header_version(ApiKey.PRODUCE, header.api_version)
    return frame(
        encode_response_header(ResponseHeader(header.correlation_id), header_version),
        encode(response, header.api_version),
    )


def unsupported_api_versions(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions request of a version it does not know.

    A v0 body with UNSUPPORTED_VERSION and the ApiVersions range the proxy supports, so the
    client retries with the highest version it shares with us (the Java client and franz-go
    read exactly that entry).
    """
    low, high = ApiVersionsRequest.VERSIONS
    response = ApiVersionsResponse(
        error_code=UNSUPPORTED_VERSION,
        api_keys=[ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=low, max_version=high)],
    )
    body = correlation_id.to_bytes(4, "big", signed=True) + encode(response, 0)
    return len(body).to_bytes(4, "big") + body
