# Strategy: the pure part of answering a client fetch from sessionless upstream fetches: the
# upstream request to send, what an answer teaches the proxy (canonical keys), whether it
# satisfies the client, and the response the client gets. In passthrough an answer to one
# identity teaches the others only offsets, and a response carries only what that identity's
# connection returned. No trio, no sockets.
"""Upstream fetch requests and client fetch responses, built from a fetch context."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import UUID

from proxy.held.fetch.session import FetchContext, PartitionNews
from proxy.held.partition_state import PartitionKey, PartitionStates, readable_end
from proxy.routing.topic_names import TopicNames
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    NodeEndpoint,
    PartitionData,
)

__all__ = [
    "FetchResults",
    "build_response",
    "canonical",
    "error_response",
    "has_unread_records",
    "learn",
    "nothing_to_tell",
    "reached_offsets",
    "satisfied",
    "upstream_request",
]

#: The partition as the client names it: (topic name or topic id, partition index).
ClientKey = tuple[str | UUID, int]


@dataclass(slots=True)
class FetchResults:
    """One upstream fetch's answer, by client key (records are views into its frame);
    ``error_code``: the broker refused the whole fetch (no partitions then). ``answered``: it
    is a broker's answer (False: nothing was asked). ``incomplete``: the broker left out some
    partition the fetch asked for on the client's own connection, whose answer is then given
    as it is (``satisfied``)."""

    partitions: dict[ClientKey, PartitionData] = field(default_factory=dict)
    throttle_time_ms: int = 0
    node_endpoints: list[NodeEndpoint] = field(default_factory=list)
    error_code: int = 0
    answered: bool = False
    incomplete: bool = False

    def size_bytes(self) -> int:
        """Roughly what the answer occupies: its records plus a little per partition."""
        per_partition = 64
        return sum(
            per_partition + (len(data.records) if data.records is not None else 0)
            for data in self.partitions.values()
        )

    @classmethod
    def of(cls, response: FetchResponse) -> FetchResults:
        partitions = {}
        for topic in response.responses:
            name: str | UUID = topic.topic_id if topic.topic_id.int else topic.topic
            for data in topic.partitions:
                partitions[name, data.partition_index] = data
        return cls(partitions, response.throttle_time_ms, response.node_endpoints, answered=True)


_Topic = TypeVar("_Topic", FetchTopic, FetchableTopicResponse)


def _topic_entry(topics: dict[str | UUID, _Topic], name: str | UUID, cls: type[_Topic]) -> _Topic:
    """The entry for topic ``name`` (a name, or an id from v13 on), created on first use."""
    topic = topics.get(name)
    if topic is None:
        topic = topics[name] = cls(topic_id=name) if isinstance(name, UUID) else cls(topic=name)
    return topic


def canonical(key: ClientKey, names: TopicNames) -> PartitionKey:
    """The proxy-wide key of a partition the client names by ``key``."""
    topic, index = key
    if isinstance(topic, UUID):
        return names.name_of(topic) or topic, index
    return key


def upstream_request(
    request: FetchRequest,
    context: FetchContext,
    max_bytes: int,
    max_wait_ms: int,
    min_bytes: int = 0,
) -> FetchRequest:
    """A sessionless fetch of every partition of ``context`` (the session's whole set for an
    incremental fetch), with the client's offsets, at most ``max_bytes``; min_bytes 0 unless
    given (a busy consumer's long-poll asks with the client's).

    min_bytes 0 makes a Kafka broker answer at once whatever ``max_wait_ms`` says. Tansu reads
    its storage within max_wait_ms and waits the whole of it when there is nothing (measured:
    1 ms returns no records from s3 storage, which needs ~10 ms), so ``max_wait_ms`` is the
    most such a broker may keep the fetch ([fetch] immediate_max_wait_ms).
    """
    topics: dict[str | UUID, FetchTopic] = {}
    for (name, index), cached in context.partitions.items():
        _topic_entry(topics, name, FetchTopic).partitions.append(
            FetchPartition(
                partition=index,
                current_leader_epoch=cached.current_leader_epoch,
                fetch_offset=cached.fetch_offset,
                last_fetched_epoch=cached.last_fetched_epoch,
                log_start_offset=cached.log_start_offset,
                partition_max_bytes=cached.partition_max_bytes,
            )
        )
    return FetchRequest(
        cluster_id=request.cluster_id,
        replica_id=request.replica_id,
        replica_state=request.replica_state,
        max_wait_ms=max(1, min(request.max_wait_ms, max_wait_ms)),
        min_bytes=min_bytes,
        max_bytes=max(1, min(request.max_bytes, max_bytes)),
        isolation_level=request.isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=list(topics.values()),
        rack_id=request.rack_id,
    )


def learn(
    results: FetchResults,
    states: PartitionStates,
    names: TopicNames,
    now_ms: int,
    *,
    errors: bool = True,
) -> list[PartitionKey]:
    """Record what an upstream answer (read at ``now_ms``) says about each partition; the
    canonical keys whose knowledge changed (their waiting fetches should be checked).
    ``errors=False``: partitions answered with an error are not recorded (an answer to one
    identity of many)."""
    changed = []
    for key, data in results.partitions.items():
        if data.error_code and not errors:
            continue
        ckey = canonical(key, names)
        if states.learn(
            ckey,
            data.high_watermark,
            data.last_stable_offset,
            data.log_start_offset,
            data.error_code,
            now_ms,
        ):
            changed.append(ckey)
    return changed


def satisfied(results: FetchResults, min_bytes: int) -> bool:
    """Kafka's rule for answering at once: an error on any partition, or min_bytes of records;
    and an incomplete answer on a client's own connection, which is its answer."""
    if results.incomplete:
        return True
    total = 0
    for data in results.partitions.values():
        if data.error_code:
            return True
        if data.records is not None:
            total += len(data.records)
    return total >= max(min_bytes, 1)


def has_unread_records(context: FetchContext, results: FetchResults, isolation_level: int) -> bool:
    """Whether the answer says some partition has records past the client's offset that it
    did not return (a broker that ran out of max_wait while reading its storage)."""
    for key, cached in context.partitions.items():
        data = results.partitions.get(key)
        if data is None or data.error_code or data.records:
            continue
        readable = readable_end(data.high_watermark, data.last_stable_offset, isolation_level)
        if readable > cached.fetch_offset:
            return True
    return False


def reached_offsets(
    context: FetchContext,
    states: PartitionStates,
    names: TopicNames,
    isolation_level: int,
) -> list[tuple[PartitionKey, int]]:
    """Per partition (canonical key), the offset past which new data would wake the fetch:
    the readable end the proxy knows, or the fetch offset if that is further."""
    reached = []
    for key, cached in context.partitions.items():
        ckey = canonical(key, names)
        state = states.get(ckey)
        offset = cached.fetch_offset
        if state is not None and not state.stale:
            offset = max(offset, state.available(isolation_level))
        reached.append((ckey, offset))
    return reached


def build_response(
    context: FetchContext,
    results: FetchResults,
    states: PartitionStates,
    names: TopicNames,
    now_ms: int,
    fill: Container[tuple[object, int]] | None = None,
) -> FetchResponse:
    """The client's response: the upstream answer's partitions, the session id, and for an
    incremental session only the partitions with news (KIP-227).

    ``fill``: the partitions missing from ``results`` that may be reported from what the proxy
    knows; None = all of them (the proxy's identity). Others are left out of the response.
    """
    parts: dict[ClientKey, PartitionData] = {}
    news: dict[ClientKey, PartitionNews] = {}
    for key, cached in context.partitions.items():
        data = results.partitions.get(key)
        if data is None:
            if fill is not None and key not in fill:
                continue  # not returned to this identity: nothing to say about it
            # Not in the answer (the fetch was not sent upstream, or the broker left it out):
            # report what the proxy knows, with no records. Its PartitionData is built only if
            # the response carries it: an idle incremental fetch carries nothing, and building
            # one (nested defaults included) cost more than the rest of the partition's work.
            state = states.get(canonical(key, names))
            if state is not None:
                news[key] = PartitionNews(
                    state.high_watermark, state.last_stable_offset, state.log_start_offset, False
                )
            else:
                news[key] = PartitionNews(
                    cached.told_high_watermark,
                    cached.told_last_stable_offset,
                    cached.told_log_start_offset,
                    False,
                )
            continue
        parts[key] = data
        news[key] = PartitionNews(
            data.high_watermark,
            data.last_stable_offset,
            data.log_start_offset,
            bool(data.records),
            data.error_code,
        )
    session_id, carried = context.respond(news, now_ms)
    topics: dict[str | UUID, FetchableTopicResponse] = {}
    for key in carried:
        data = parts.get(key)
        if data is None:
            told = news.get(key)
            if told is None:
                continue  # (a full fetch's partition left unfilled)
            data = PartitionData(
                partition_index=key[1],
                high_watermark=told.high_watermark,
                last_stable_offset=told.last_stable_offset,
                log_start_offset=told.log_start_offset,
                records=b"",
            )
        _topic_entry(topics, key[0], FetchableTopicResponse).partitions.append(data)
    return FetchResponse(
        throttle_time_ms=results.throttle_time_ms,
        session_id=session_id,
        responses=list(topics.values()),
        node_endpoints=results.node_endpoints,
    )


def nothing_to_tell(context: FetchContext, states: PartitionStates, names: TopicNames) -> bool:
    """Whether ``build_response`` for ``context``'s incremental session, with no upstream
    answer, would carry no partition: what the proxy knows of each is what the client was
    last told (``FetchContext.respond`` would find no change). Cheaper than building it."""
    for key, cached in context.partitions.items():
        state = states.get(canonical(key, names))
        if state is not None and not cached.was_told(
            state.high_watermark, state.last_stable_offset, state.log_start_offset
        ):
            return False
    return True


def error_response(error_code: int) -> FetchResponse:
    """A fetch refused as a whole (a session error): the code at the top level, nothing else."""
    return FetchResponse(error_code=error_code)
