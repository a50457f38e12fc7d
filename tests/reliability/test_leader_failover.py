# Strategy: issue 30, item 4 - a partition's leader lost, brought back and moved, on a three-node
# Apache Kafka (RF 3, min ISR 2) of the test's own, while an idempotent producer and a consumer
# group (librdkafka) run through the proxy and a raw consumer is held in the proxy.
#
#   1. kill -9 the leader L of the data topic's partition 0 (and of an idle topic, where a raw
#      Fetch is held in the proxy on L's port). The held fetch's connection must end at once
#      (a client's connection to a killed broker breaks, which is what makes it look for the
#      new leader; answered "nothing new" instead, consumers stayed on the dead leader), and
#      the clients must produce and consume L's partitions again on the new leader.
#   2. L is started again on its ports and data and rejoins the in-sync replicas.
#   3. A preferred-leader election gives L its partitions back while both nodes are up, so the
#      old leader answers with KIP-951's hints (current_leader, and node_endpoints naming the
#      new leader's address). Through the proxy those must name the proxy's port for L: read in
#      a raw Fetch v16 held on the old leader's port when the election came, naming the leader
#      epoch as clients do (Kafka answers it at once FENCED_LEADER_EPOCH; so must the proxy,
#      not at its max wait), and in a raw Produce v12 sent to the old leader's port afterwards
#      (NOT_LEADER_OR_FOLLOWER).
#   4. Partition 0 is reassigned off L (AlterPartitionReassignments) while traffic runs.
#
# Then what the clients were told is held against what the cluster has, exactly
# (tests/support/broker_faults_ledger.py): acks=all on RF 3 loses nothing, every acknowledged
# record is at its offset, everything was consumed and the group committed to the end.
# A leader that hangs instead (SIGSTOP) is tests/reliability/test_broker_faults.py's hung-leader.
"""A leader killed, restarted, elected back and reassigned under traffic through the proxy."""

from __future__ import annotations

import time
import uuid
from uuid import UUID

from kafka import KafkaAdminClient, TopicPartition

from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.processes import free_port
from testbed.proxy_process import running_proxy
from testbed.topics import create_topic
from tests.support.broker_faults import ProxyHttp, partition_state, wait_for_isr
from tests.support.broker_faults_scenario import (
    Outcome,
    fmt,
    recovery,
    running_clients,
    settle,
    wait_for,
)
from tests.support.broker_faults_traffic import GroupConsumer, PacedProducer
from tests.support.load_wire import record_batch
from tests.support.wire_socket import Closed, WireSocket, metadata
from wire.messages.fetch_request import FetchPartition, FetchRequest, FetchTopic
from wire.messages.fetch_response import FetchResponse
from wire.messages.produce_request import PartitionProduceData, ProduceRequest, TopicProduceData
from wire.messages.produce_response import ProduceResponse

PARTITIONS = 3
INTERVAL_S = 0.002  # ~500 records/s
CLIENTS = {"reconnect.backoff.max.ms": 500, "message.timeout.ms": 120_000}
#: Kafka fences a dead broker after its session timeout (6 s in the testbed), then elects;
#: the clients must be back on the new leader well within this (hang guard, not a target).
FAILOVER_BOUND_S = 30.0
#: A held fetch on a killed broker's port must end this soon (its max wait is far longer).
HELD_END_BOUND_S = 5.0
HELD_MAX_WAIT_MS = 30_000
#: A held fetch on the old leader's port must be answered this soon after an election.
ELECTION_ANSWER_BOUND_S = 5.0
FETCH_VERSION = 16  # KIP-951: current_leader and node_endpoints
PRODUCE_VERSION = 12  # KIP-951, and the last version with topic names
RUN_AFTER_S = 5.0
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74


def test_leader_killed_restarted_elected_and_moved_loses_nothing() -> None:
    topic, idle, group = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("failover", "idle", "g"))
    metrics_port = free_port()
    out = Outcome("leader-failover")
    with (
        running_kafka(3) as cluster,
        running_proxy(cluster.bootstrap(), "--metrics", f"127.0.0.1:{metrics_port}") as proxy,
    ):
        http = ProxyHttp(metrics_port)
        create_topic(cluster.bootstrap(), name=topic, partitions=PARTITIONS)
        leader = partition_state(cluster.bootstrap(), topic).leader
        others = [n for n in (1, 2, 3) if n != leader]
        create_topic(cluster.bootstrap(), name=idle, replicas=[leader, *others])  # led by it
        ports = {b.node_id: b.port for b in metadata(proxy.bootstrap, idle).brokers}
        proxy_host = proxy.host
        led = _partitions_led_by(cluster, topic, leader)
        producer = PacedProducer(proxy.bootstrap, topic, 1_000_000, INTERVAL_S, config=CLIENTS)
        consumer = GroupConsumer(proxy.bootstrap, topic, group, config=CLIENTS)
        with running_clients(consumer, producer):
            wait_for(lambda: len(consumer.consumed) >= 500, 90, "steady traffic")

            # 1. the leader killed, a consumer held on its port
            idle_id, epoch = _topic_id_and_epoch(proxy.bootstrap, idle)
            with WireSocket(f"{proxy_host}:{ports[leader]}") as held:
                held.send(_fetch(idle_id, epoch, HELD_MAX_WAIT_MS), FETCH_VERSION)
                time.sleep(1.0)  # held in the proxy: nothing to read on the idle topic
                killed_s = time.monotonic()
                cluster.kill(leader)
                held_end = _ending(held)
                held_end_s = time.monotonic() - killed_s
            out.check(
                held_end == "closed" and held_end_s <= HELD_END_BOUND_S,
                f"a fetch held on the killed leader's port: {held_end} after {held_end_s:.1f} s "
                f"(its max wait {HELD_MAX_WAIT_MS} ms); the connection must end at once",
            )
            wait_for(lambda: _moved(producer, consumer, killed_s, led), FAILOVER_BOUND_S,
                     "clients on the new leader")  # fmt: skip
            failover = recovery(producer, consumer, killed_s, partitions=led)

            # 2. the leader back
            cluster.start(leader)
            started_s = time.monotonic()
            for name in (topic, idle):  # (a preferred leader out of the ISR is not elected)
                wait_for_isr(cluster.bootstrap(), name, 0, {1, 2, 3}, timeout_s=90)
            rejoined_s = time.monotonic() - started_s
            interim = partition_state(cluster.bootstrap(), idle).leader

            # 3. a preferred election under a held fetch: KIP-951 hints through the proxy
            interim_port = ports[interim]
            _, epoch = _topic_id_and_epoch(proxy.bootstrap, idle)
            with WireSocket(f"{proxy_host}:{interim_port}") as held:
                held.send(_fetch(idle_id, epoch, HELD_MAX_WAIT_MS), FETCH_VERSION)
                time.sleep(1.0)
                elected_s = time.monotonic()
                _elect_preferred(cluster, [topic, idle])
                fetched = _ending(held)
                fetched_s = time.monotonic() - elected_s
            for name in (topic, idle):
                wait_for(lambda name=name: partition_state(cluster.bootstrap(), name).leader
                         == leader, 30, f"the preferred leader back on {name}")  # fmt: skip
            produced = _produce_answer(f"{proxy_host}:{interim_port}", topic)
            want = (leader, proxy_host, ports[leader])
            _check_hints(out, "held Fetch v16", fetched, fetched_s, FENCED_LEADER_EPOCH, want)
            _check_hints(out, "Produce v12", produced, 0.0, NOT_LEADER_OR_FOLLOWER, want)

            # 4. partition 0 reassigned off its leader while traffic runs
            moved_to = [n for n in (1, 2, 3) if n != leader]
            reassigned_s = time.monotonic()
            _reassign(cluster, topic, moved_to)
            wait_for(lambda: partition_state(cluster.bootstrap(), topic).replicas
                     == tuple(moved_to), 60, "the reassignment")  # fmt: skip
            reassigned = time.monotonic() - reassigned_s
            after_move = time.monotonic()
            time.sleep(RUN_AFTER_S)
            moved_again = recovery(producer, consumer, after_move, partitions={0})
            producer.stop.set()
            ledger = settle(cluster.bootstrap(), topic, PARTITIONS, group, producer, consumer)
        healthy = proxy.alive() and http.healthy()
    out.threads(producer, consumer)
    for side, seconds in failover.items():
        back = seconds is not None and seconds <= FAILOVER_BOUND_S
        out.check(back, f"{side} back on the killed leader's partitions after {fmt(seconds)}")
    for side, seconds in moved_again.items():
        out.check(seconds is not None, f"the {side} stopped on partition 0 after the move")
    out.check(healthy, "proxy not alive or /healthz not ok")
    out.ledger(ledger, producer, consumer)
    out.row("killed leader / its partitions", f"{leader} / {sorted(led)}")
    out.row("fetch held on the killed leader's port", f"{held_end} after {held_end_s:.2f} s")
    out.row("producer / consumer back on those partitions after the kill -9",
            f"{fmt(failover['producer'])} / {fmt(failover['consumer'])}")  # fmt: skip
    out.row("restarted leader back in the ISR after", rejoined_s)
    out.row("fetch held on the interim leader's port at the election",
            f"{_describe(fetched)} after {fetched_s:.2f} s")  # fmt: skip
    out.row("Produce v12 to the interim leader's port after it", _describe(produced))
    out.row("partition 0 reassigned off the leader in", reassigned)
    out.report(
        f"leader {leader} killed: clients back after {fmt(failover['producer'])} / "
        f"{fmt(failover['consumer'])}; restarted, elected back, hints name the proxy: "
        f"{not any('hint' in p for p in out.problems)}; reassigned in {reassigned:.1f} s; "
        f"{ledger.acked:,} acked, lost {ledger.lost}, not consumed {ledger.not_consumed}",
        "Three Apache Kafka nodes (RF 3, min ISR 2) behind the proxy; an idempotent "
        "confluent-kafka producer (acks=all, ~500 records/s, 3 partitions) and a consumer "
        "group (commit after processing) through the proxy, and a raw Fetch held in the proxy "
        "on an idle topic. The leader of partition 0 is killed with SIGKILL, started again, "
        "given its partitions back by a preferred-leader election (the old leader's "
        "NOT_LEADER_OR_FOLLOWER hints, KIP-951, must name the proxy's port for the new "
        "leader), then partition 0 is reassigned off it. " + _LEDGER
        + " Run by `tests/reliability/test_leader_failover.py`.",
    )  # fmt: skip
    assert not out.problems, out.problems


_LEDGER = (
    "The topic is read back from the cluster and held against the acknowledgements exactly, "
    "with the group's committed offsets."
)


def _partitions_led_by(cluster: KafkaCluster, topic: str, leader: int) -> set[int]:
    return {
        p
        for p in range(PARTITIONS)
        if partition_state(cluster.bootstrap(), topic, p).leader == leader
    }


def _topic_id_and_epoch(bootstrap: str, topic: str) -> tuple[UUID, int]:
    """The topic's id and partition 0's leader epoch, as clients learn them (Metadata)."""
    (found,) = metadata(bootstrap, topic).topics
    return found.topic_id, found.partitions[0].leader_epoch


def _fetch(topic_id: UUID, epoch: int, max_wait_ms: int) -> FetchRequest:
    """A sessionless Fetch of partition 0 at its (empty) end, naming the leader ``epoch`` as
    clients do: held until news, a leader change or its max wait."""
    wanted = FetchPartition(
        partition=0, current_leader_epoch=epoch, fetch_offset=0, partition_max_bytes=1 << 20
    )
    return FetchRequest(
        max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
        topics=[FetchTopic(topic_id=topic_id, partitions=[wanted])],
    )  # fmt: skip


def _ending(conn: WireSocket) -> FetchResponse | str:
    """How a held fetch ended: its answer, "closed", or "no answer" within its max wait."""
    try:
        answer = conn.receive(timeout_s=HELD_MAX_WAIT_MS / 1000 + 5)
    except Closed:
        return "closed"
    except TimeoutError:
        return "no answer"
    assert isinstance(answer, FetchResponse)
    return answer


def _moved(producer: PacedProducer, consumer: GroupConsumer, since: float, led: set[int]) -> bool:
    return all(s is not None for s in recovery(producer, consumer, since, partitions=led).values())


def _elect_preferred(cluster: KafkaCluster, topics: list[str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30_000)
    try:
        admin.elect_leaders(0, topics, timeout_ms=30_000, raise_errors=False)
    finally:
        admin.close()


def _reassign(cluster: KafkaCluster, topic: str, replicas: list[int]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30_000)
    try:
        errors = admin.alter_partition_reassignments({TopicPartition(topic, 0): replicas})
        assert not any(errors.values()), errors
    finally:
        admin.close()


def _produce_answer(address: str, topic: str) -> ProduceResponse | str:
    """A Produce v12 of one record to partition 0, sent to ``address``."""
    data = PartitionProduceData(index=0, records=record_batch(10))
    request = ProduceRequest(
        acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(name=topic, partition_data=[data])]
    )
    with WireSocket(address) as conn:
        try:
            answer, _ = conn.call(request, PRODUCE_VERSION)
        except Closed:
            return "closed"
    assert isinstance(answer, ProduceResponse)
    return answer


def _check_hints(
    out: Outcome, what: str, answer: FetchResponse | ProduceResponse | str, took_s: float,
    error_wanted: int, want: tuple[int, str, int],
) -> None:  # fmt: skip
    """The answer says ``error_wanted`` for partition 0, names ``want``'s node as the current
    leader and gives its endpoint as the proxy's host and port for it (KIP-951)."""
    if isinstance(answer, str):
        out.problems.append(f"{what}: {answer}, not error {error_wanted} with hints")
        return
    if isinstance(answer, FetchResponse):
        parts = [p for t in answer.responses for p in t.partitions]
        error, leader = parts[0].error_code, parts[0].current_leader.leader_id
    else:
        parts = [p for t in answer.responses for p in t.partition_responses]
        error, leader = parts[0].error_code, parts[0].current_leader.leader_id
    endpoints = {(e.node_id, e.host, e.port) for e in answer.node_endpoints}
    out.check(error == error_wanted and leader == want[0],
              f"{what}: error {error}, current leader {leader}; want {error_wanted}, "
              f"{want[0]}")  # fmt: skip
    out.check(want in endpoints, f"{what}: hint endpoints {sorted(endpoints)}, want {want}")
    out.check(took_s <= ELECTION_ANSWER_BOUND_S,
              f"{what}: answered {took_s:.1f} s after the election, not at once")  # fmt: skip


def _describe(answer: FetchResponse | ProduceResponse | str) -> str:
    if isinstance(answer, str):
        return answer
    if isinstance(answer, FetchResponse):
        part = answer.responses[0].partitions[0]
    else:
        part = answer.responses[0].partition_responses[0]
    endpoints = [(e.node_id, f"{e.host}:{e.port}") for e in answer.node_endpoints]
    return f"error {part.error_code}, current leader {part.current_leader.leader_id}, {endpoints}"
