# Strategy: a broker made of the project's own wire/ codec, for the in-process tests of the
# connection layer (tests/unit/proxy/*/test_inprocess_*.py). It is not a Kafka: it knows one node,
# partitions as lists of opaque record blobs (one offset per produced blob), and answers
# ApiVersions, Metadata, Produce and Fetch the way the proxy's timing depends on:
#
#   - one connection's requests are answered in order (a slow answer delays those behind it);
#   - Produce: `produce_delay_s` before the answer (0: at once); acks=0 is answered or not as
#     `answer_acks0` says (Tansu answers, Kafka does not);
#   - Fetch: records from the fetch offset; while there are fewer than min_bytes, the fetch waits
#     for an append or its max_wait_ms (`long_poll = False`: a fetch with min_bytes > 0 ignores
#     appends and always waits max_wait_ms, which lets a test tell a wake-up by the proxy's
#     upstream watcher from one by a produce through the proxy). min_bytes 0 is answered at once.
#     `max_blobs_per_fetch` returns at most that many blobs per partition (a broker that stops
#     at max_bytes); `fetch_requests` keeps every Fetch with its correlation id.
#   - SASL (passthrough tests): with `users` set, a connection may authenticate with
#     SaslHandshake v1 + SaslAuthenticate PLAIN; `session_lifetime_ms` is handed out and enforced
#     as Kafka does (past it, anything but a SaslHandshake closes the connection); a failed
#     authentication is answered SASL_AUTHENTICATION_FAILED and the connection closed. A
#     connection that never authenticates is the anonymous principal (None), which is what the
#     proxy's own connections are here; a Fetch by a principal in `fetch_denied` is answered
#     TOPIC_AUTHORIZATION_FAILED for every partition (an ACL denial). `fetch_log` records who
#     fetched how many record bytes, with the correlation id. `fetch_withheld` leaves named
#     partitions out of a principal's Fetch answers (Kafka never does; a broker that might).
#   - ListOffsets: latest (-1) is the log's length, or what `latest_offsets` says for the
#     partition (Tansu 0.6 answers its last batch's base offset + 1); earliest (-2) is 0. An
#     unknown partition is UNKNOWN_TOPIC_OR_PARTITION; `offset_errors` answers a partition with
#     an error code instead. `break_on` closes the connection instead of answering the next
#     requests of an API (a broker that goes away: the proxy's channel fails them).
#   - Leader epochs (`new_leader_epoch`: the partition's leadership moved): a Fetch naming an
#     older current_leader_epoch is answered FENCED_LEADER_EPOCH for that partition, with the
#     current leader, at once or as soon as the epoch moves while it waits (Kafka's
#     DelayedFetch); -1 (unknown) is never fenced.
#   - `go_down()`: the process dies (kill -9): every connection ends at once, and connects are
#     refused until `down` is set False again. `freeze()`: it hangs (SIGSTOP): connections stay
#     open and are accepted, but no request is answered until `thaw()`.
#
# Time is trio's, so under MockClock/autojump every delay is exact virtual time. Connections
# come from ScriptedDialer (the proxy's Dialer protocol): one trio memory stream pair per
# connect, the broker's end served in the test's nursery.
"""A scripted in-memory broker on wire/, and the dialer that connects the proxy to it."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import trio
import trio.testing

from proxy.address import Address
from proxy.errors import UpstreamUnavailable
from testbed.fetch_acl import TOPIC_AUTHORIZATION_FAILED, fetch_denied
from wire.apis import API_BY_KEY, ApiKey, response_header_version
from wire.codec import Message, decode_request, encode
from wire.framing import NEED_DATA, FrameDecoder, frame
from wire.headers import ResponseHeader, encode_response_header, parse_request_header
from wire.messages import (
    ApiVersionsResponse,
    FetchRequest,
    FetchResponse,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from wire.messages.api_versions_response import ApiVersion
from wire.messages.fetch_response import FetchableTopicResponse, LeaderIdAndEpoch, PartitionData
from wire.messages.list_offsets_request import ListOffsetsRequest
from wire.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from wire.messages.metadata_response import (
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from wire.messages.produce_response import PartitionProduceResponse, TopicProduceResponse

__all__ = [
    "BROKER",
    "FENCED_LEADER_EPOCH",
    "NODE_ID",
    "TOPIC_AUTHORIZATION_FAILED",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "FetchByPrincipal",
    "ScriptedBroker",
    "ScriptedDialer",
]

NODE_ID = 1
#: Where the scripted broker says it is (only ever dialled through ScriptedDialer).
BROKER = Address("broker-1", 9092)
UNKNOWN_TOPIC_OR_PARTITION = 3
FENCED_LEADER_EPOCH = 74


SASL_AUTHENTICATION_FAILED = 58


@dataclass(frozen=True)
class FetchByPrincipal:
    """One Fetch the broker answered: who asked (None = anonymous), its correlation id, how
    many record bytes the answer carried, and its max wait."""

    principal: str | None
    correlation_id: int
    record_bytes: int
    max_wait_ms: int


@dataclass
class _Session:
    """One connection's authentication."""

    principal: str | None = None
    handshake: bool = False
    expires_s: float = math.inf


class _CloseAfter(Exception):
    """Send ``answer`` (if any), then close the connection."""

    def __init__(self, answer: bytes | None = None) -> None:
        self.answer = answer


class ScriptedBroker:
    """One broker node: partitions, answers, and what it was asked (``requests``)."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[bytes]] = {}
        self.requests: list[tuple[int, float]] = []  # (api key, virtual time received)
        self.produce_delay_s = 0.0
        self.answer_acks0 = True
        self.long_poll = True
        #: A Fetch whose max wait ran out is answered this much later (a busy broker, or a
        #: proxy whose loop reads the answer late: the same to the proxy).
        self.late_fetch_s = 0.0
        #: Fetch answers report this log start offset per partition (records deleted), not 0.
        self.log_start_offsets: dict[tuple[str, int], int] = {}
        #: ListOffsets latest per partition instead of the log's length (a broker like Tansu).
        self.latest_offsets: dict[tuple[str, int], int] = {}
        #: ListOffsets answers these partitions with this error code.
        self.offset_errors: dict[tuple[str, int], int] = {}
        #: API key -> how many of its next requests close the connection instead of an answer.
        self.break_on: dict[int, int] = {}
        #: Every ListOffsets request received, decoded.
        self.list_offsets_requests: list[ListOffsetsRequest] = []
        #: SASL PLAIN accounts (empty: no SASL), see the module header.
        self.users: dict[str, str] = {}
        self.session_lifetime_ms = 0
        self.fetch_denied: set[str | None] = set()
        self.fetch_log: list[FetchByPrincipal] = []
        #: Principal -> partitions left out of its Fetch answers.
        self.fetch_withheld: dict[str | None, set[tuple[str, int]]] = {}
        #: At most this many blobs per partition in a Fetch answer (None: all of them).
        self.max_blobs_per_fetch: int | None = None
        #: Every Fetch received: (correlation id, request).
        self.fetch_requests: list[tuple[int, FetchRequest]] = []
        #: Connections being served now (the proxy's upstream sockets that are open).
        self.open_connections = 0
        self._appended = trio.lowlevel.ParkingLot()
        #: Refuses connections (see ``go_down``).
        self.down = False
        self._connections: set[trio.CancelScope] = set()
        self._thawed: trio.Event | None = None  # set while frozen
        #: Leader epoch per partition (0 until `new_leader_epoch`).
        self.leader_epochs: dict[tuple[str, int], int] = {}

    def create_topic(self, name: str, partitions: int = 1) -> None:
        for index in range(partitions):
            self.logs.setdefault((name, index), [])

    def append(self, topic: str, partition: int, records: bytes) -> None:
        """Write records behind the proxy's back (another client of the cluster)."""
        self.logs[(topic, partition)].append(records)
        self._appended.unpark_all()

    def new_leader_epoch(self, topic: str, partition: int) -> None:
        """The partition's leadership moved: fetches naming the old epoch are fenced."""
        key = (topic, partition)
        self.leader_epochs[key] = self.leader_epochs.get(key, 0) + 1
        self._appended.unpark_all()

    def fetches(self) -> int:
        """Fetch requests received so far (the proxy's first looks, re-fetches, watcher polls)."""
        return sum(1 for api_key, _ in self.requests if api_key == ApiKey.FETCH)

    def list_offsets_times(self) -> list[float]:
        """When each ListOffsets request was received (virtual time)."""
        return [at for api_key, at in self.requests if api_key == ApiKey.LIST_OFFSETS]

    def go_down(self) -> None:
        """Die like a killed broker: every connection ends now, new ones are refused."""
        self.down = True
        for connection in self._connections:
            connection.cancel()

    def freeze(self) -> None:
        """Hang like a stopped process: requests are read, none is answered until thawed."""
        if self._thawed is None:
            self._thawed = trio.Event()

    def thaw(self) -> None:
        thawed, self._thawed = self._thawed, None
        if thawed is not None:
            thawed.set()

    async def serve(self, stream: trio.abc.Stream) -> None:
        """Answer one connection's requests in order until it closes or the broker dies."""
        self.open_connections += 1
        with trio.CancelScope() as alive:
            self._connections.add(alive)
            try:
                await self._serve(stream)
            finally:
                self._connections.discard(alive)
                self.open_connections -= 1

    async def _serve(self, stream: trio.abc.Stream) -> None:
        decoder = FrameDecoder()
        session = _Session()
        async with stream:
            while True:
                body = decoder.next_frame()
                if body is NEED_DATA:
                    try:
                        decoder.receive_data(await stream.receive_some(65536))
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return
                    continue
                if not isinstance(body, memoryview):
                    return  # CLOSED
                if self._breaks(body):
                    return
                while self._thawed is not None:
                    await self._thawed.wait()
                try:
                    answer = await self._answer(body, session)
                except _CloseAfter as close:
                    if close.answer is not None:
                        with contextlib.suppress(
                            trio.BrokenResourceError, trio.ClosedResourceError
                        ):
                            await stream.send_all(close.answer)
                    return
                if answer is not None:
                    try:
                        await stream.send_all(answer)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        return

    def _breaks(self, body: memoryview) -> bool:
        """Whether this request closes the connection instead (``break_on``)."""
        header, _ = parse_request_header(body)
        left = self.break_on.get(header.api_key, 0)
        if left <= 0:
            return False
        self.break_on[header.api_key] = left - 1
        self.requests.append((header.api_key, trio.current_time()))
        return True

    async def _answer(self, body: memoryview, session: _Session) -> bytes | None:
        header, start = parse_request_header(body)
        api_key, version = header.api_key, header.api_version
        self.requests.append((api_key, trio.current_time()))
        request = decode_request(api_key, version, body[start:])
        reauthenticating = api_key == ApiKey.SASL_HANDSHAKE or (
            api_key == ApiKey.SASL_AUTHENTICATE and session.handshake
        )
        if trio.current_time() >= session.expires_s and not reauthenticating:
            raise _CloseAfter()  # KIP-368: the session ran out
        response: (
            ApiVersionsResponse
            | MetadataResponse
            | ProduceResponse
            | FetchResponse
            | ListOffsetsResponse
            | SaslHandshakeResponse
            | SaslAuthenticateResponse
        )
        if api_key == ApiKey.SASL_HANDSHAKE:
            assert isinstance(request, SaslHandshakeRequest)
            session.handshake = request.mechanism == "PLAIN" and bool(self.users)
            response = SaslHandshakeResponse(
                error_code=0 if session.handshake else 33, mechanisms=["PLAIN"]
            )
        elif api_key == ApiKey.SASL_AUTHENTICATE:
            assert isinstance(request, SaslAuthenticateRequest)
            response = self._authenticate(request, session)
            if response.error_code:
                raise _CloseAfter(self._frame(header.correlation_id, api_key, version, response))
        elif api_key == ApiKey.API_VERSIONS:
            response = ApiVersionsResponse(
                api_keys=[
                    ApiVersion(
                        api_key=key, min_version=spec.min_version, max_version=spec.max_version
                    )
                    for key, spec in sorted(API_BY_KEY.items())
                ]
            )
            version = 0 if version > 3 else version
        elif api_key == ApiKey.METADATA:
            response = self._metadata()
        elif api_key == ApiKey.PRODUCE:
            assert isinstance(request, ProduceRequest)
            produce = self._produce(request)
            if self.produce_delay_s:
                await trio.sleep(self.produce_delay_s)
            if request.acks == 0 and not self.answer_acks0:
                return None
            response = produce
        elif api_key == ApiKey.FETCH:
            assert isinstance(request, FetchRequest)
            self.fetch_requests.append((header.correlation_id, request))
            if session.principal in self.fetch_denied:
                response = fetch_denied(request)
            else:
                response = await self._fetch(request)
            withheld = self.fetch_withheld.get(session.principal, set())
            for topic_answer in response.responses:
                topic_answer.partitions = [
                    p for p in topic_answer.partitions
                    if (topic_answer.topic, p.partition_index) not in withheld
                ]  # fmt: skip
            self.fetch_log.append(
                FetchByPrincipal(
                    session.principal,
                    header.correlation_id,
                    sum(len(p.records or b"") for t in response.responses for p in t.partitions),
                    request.max_wait_ms,
                )
            )
        elif api_key == ApiKey.LIST_OFFSETS:
            assert isinstance(request, ListOffsetsRequest)
            self.list_offsets_requests.append(request)
            response = self._list_offsets(request)
        else:
            raise AssertionError(f"the scripted broker has no script for API {api_key}")
        return self._frame(header.correlation_id, api_key, version, response)

    @staticmethod
    def _frame(correlation_id: int, api_key: int, version: int, response: Message) -> bytes:
        header_version = response_header_version(api_key, version)
        return frame(
            encode_response_header(ResponseHeader(correlation_id), header_version),
            encode(response, version),
        )

    def _authenticate(
        self, request: SaslAuthenticateRequest, session: _Session
    ) -> SaslAuthenticateResponse:
        if not session.handshake:
            return SaslAuthenticateResponse(error_code=34, error_message="no handshake")
        session.handshake = False
        _, user, password = bytes(request.auth_bytes).split(b"\0", 2)
        if self.users.get(user.decode()) != password.decode():
            return SaslAuthenticateResponse(
                error_code=SASL_AUTHENTICATION_FAILED, error_message="bad credentials"
            )
        session.principal = user.decode()
        lifetime = self.session_lifetime_ms
        session.expires_s = trio.current_time() + lifetime / 1000 if lifetime else math.inf
        return SaslAuthenticateResponse(session_lifetime_ms=lifetime)

    def _metadata(self) -> MetadataResponse:
        topics: dict[str, list[int]] = {}
        for name, index in self.logs:
            topics.setdefault(name, []).append(index)
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=NODE_ID, host=BROKER.host, port=BROKER.port)],
            controller_id=NODE_ID,
            topics=[
                MetadataResponseTopic(
                    name=name,
                    partitions=[
                        MetadataResponsePartition(
                            partition_index=index,
                            leader_id=NODE_ID,
                            replica_nodes=[NODE_ID],
                            isr_nodes=[NODE_ID],
                        )
                        for index in sorted(indexes)
                    ],
                )
                for name, indexes in topics.items()
            ],
        )

    def _produce(self, request: ProduceRequest) -> ProduceResponse:
        responses = []
        for topic in request.topic_data:
            partitions = []
            for data in topic.partition_data:
                log = self.logs[(topic.name, data.index)]
                partitions.append(PartitionProduceResponse(index=data.index, base_offset=len(log)))
                log.append(bytes(data.records or b""))
            responses.append(TopicProduceResponse(name=topic.name, partition_responses=partitions))
        self._appended.unpark_all()
        return ProduceResponse(responses=responses)

    async def _fetch(self, request: FetchRequest) -> FetchResponse:
        if request.min_bytes > 0:  # min_bytes 0 is answered at once, as Kafka does
            with trio.move_on_after(request.max_wait_ms / 1000) as waited:
                if not self.long_poll:
                    await trio.sleep_forever()
                while self._fetchable(request) < request.min_bytes and not self._fenced(request):
                    await self._appended.park()
            if waited.cancelled_caught and self.late_fetch_s:
                await trio.sleep(self.late_fetch_s)
        topics = []
        for topic in request.topics:
            partitions = []
            for wanted in topic.partitions:
                epoch = self.leader_epochs.get((topic.topic, wanted.partition), 0)
                if 0 <= wanted.current_leader_epoch < epoch:
                    leader = LeaderIdAndEpoch(leader_id=NODE_ID, leader_epoch=epoch)
                    partitions.append(PartitionData(partition_index=wanted.partition,
                        error_code=FENCED_LEADER_EPOCH, current_leader=leader))  # fmt: skip
                    continue
                log = self.logs.get((topic.topic, wanted.partition), [])
                blobs = log[wanted.fetch_offset :][: self.max_blobs_per_fetch]
                partitions.append(
                    PartitionData(
                        partition_index=wanted.partition,
                        high_watermark=len(log),
                        last_stable_offset=len(log),
                        log_start_offset=self.log_start_offsets.get(
                            (topic.topic, wanted.partition), 0
                        ),
                        records=b"".join(blobs),
                    )
                )
            topics.append(FetchableTopicResponse(topic=topic.topic, partitions=partitions))
        return FetchResponse(responses=topics)

    def _list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        topics = []
        for topic in request.topics:
            partitions = []
            for wanted in topic.partitions:
                key = (topic.name, wanted.partition_index)
                answer = ListOffsetsPartitionResponse(partition_index=wanted.partition_index)
                log = self.logs.get(key)
                if log is None:
                    answer.error_code = UNKNOWN_TOPIC_OR_PARTITION
                elif key in self.offset_errors:
                    answer.error_code = self.offset_errors[key]
                elif wanted.timestamp == -1:  # latest
                    answer.offset = self.latest_offsets.get(key, len(log))
                elif wanted.timestamp == -2:  # earliest
                    answer.offset = 0
                partitions.append(answer)
            topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
        return ListOffsetsResponse(topics=topics)

    def _fenced(self, request: FetchRequest) -> bool:
        return any(
            0 <= p.current_leader_epoch < self.leader_epochs.get((t.topic, p.partition), 0)
            for t in request.topics
            for p in t.partitions
        )

    def _fetchable(self, request: FetchRequest) -> int:
        return sum(
            sum(len(blob) for blob in self.logs.get((t.topic, p.partition), [])[p.fetch_offset :])
            for t in request.topics
            for p in t.partitions
        )


class ScriptedDialer:
    """The proxy's Dialer for tests: each connect is a memory stream pair to ``broker``.

    ``connects`` counts connections made, per address (the proxy's upstream sockets).
    """

    def __init__(self, broker: ScriptedBroker, nursery: trio.Nursery) -> None:
        self._broker = broker
        self._nursery = nursery
        self.connects: dict[Address, int] = {}

    async def connect(self, address: Address) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        if self._broker.down:
            raise UpstreamUnavailable(f"{address}: connection refused")
        self.connects[address] = self.connects.get(address, 0) + 1
        proxy_end, broker_end = trio.testing.memory_stream_pair()
        self._nursery.start_soon(self._broker.serve, broker_end)
        return proxy_end
