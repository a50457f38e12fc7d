# Strategy: acks=all against a partition of replication factor 3 with min.insync.replicas=2,
# through the proxy's held-produce path (a produce waits in the proxy's purgatory for the
# broker's answer, at most its timeout_ms), while the followers are stopped one, then two.
#
# The cluster is the test's own: node 1 is the only controller and leads the partition, nodes
# 2 and 3 are brokers only (testbed/kafka_cluster.py `controllers=1`), so the controller keeps
# its quorum and can shrink the ISR when both followers are gone (with three combined nodes,
# two stopped would take the quorum with them and the ISR could never shrink). A follower is
# stopped with kill -9; the controller fences it after its broker session timeout (6 s in the
# testbed) and removes it from the ISR.
#
#   one stopped   a produce sent at once waits (the dead follower is still in the ISR) and is
#                 acknowledged once the ISR shrinks to {1, 2}: 2 >= min ISR. The proxy holds it
#                 that long and passes the broker's success on.
#   two stopped   a produce sent at once is appended while the ISR is {1, 2}. Once the ISR
#                 shrinks to {1} it could complete NOT_ENOUGH_REPLICAS_AFTER_APPEND; measured on
#                 4.4 and 3.9.2, the broker keeps it to its timeout_ms and answers
#                 REQUEST_TIMED_OUT (either is taken: the point is that it is the broker's).
#                 After that, produces are refused before the append: NOT_ENOUGH_REPLICAS. Each
#                 must reach the client as the broker sent it (Kafka's own request log has
#                 every answer of the leader, in order), and librdkafka (acks=all, no retries)
#                 reports NOT_ENOUGH_REPLICAS through the proxy exactly as from the cluster.
"""acks=all on RF 3 / min ISR 2 with one follower stopped, then two, through the proxy."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import KafkaError, Producer

from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.proxy_process import running_proxy
from testbed.topics import create_topic
from tests.integration._kafka_raw import RawConnection, batch
from tests.support.broker_faults import wait_for_isr
from tests.support.wire_socket import metadata

NONE = 0
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
REQUEST_TIMED_OUT = 7
#: Longer than the fence of a dead follower (6 s session timeout, then the ISR change), so
#: the ISR shrinks while a produce sent at the stop waits.
TIMEOUT_MS = 15_000
LEADER = 1


def test_acks_all_with_followers_stopped_gets_the_brokers_answers() -> None:
    topic = f"min-isr-{uuid.uuid4().hex[:8]}"
    with (
        running_kafka(3, controllers=1, request_log=True) as cluster,
        running_proxy(cluster.bootstrap()) as proxy,
    ):
        create_topic(cluster.bootstrap(), name=topic, replicas=[LEADER, 2, 3])
        wait_for_isr(cluster.bootstrap(), topic, 0, {LEADER, 2, 3})
        brokers = {
            b.node_id: f"{b.host}:{b.port}" for b in metadata(proxy.bootstrap, topic).brokers
        }
        with RawConnection(brokers[LEADER]) as conn:
            assert conn.produce(topic, batch(b"all up"), timeout_ms=TIMEOUT_MS)[0] == NONE

            # One follower stopped: a produce sent now waits for the ISR to shrink, then succeeds.
            cluster.kill(3)
            error, took_s = _timed_produce(conn, topic, b"one stopped, at once")
            wait_for_isr(cluster.bootstrap(), topic, 0, {LEADER, 2})
            assert error == NONE, f"one follower stopped: error {error} after {took_s:.1f} s"
            assert conn.produce(topic, batch(b"one stopped"), timeout_ms=TIMEOUT_MS)[0] == NONE
            assert _client_produce(proxy.bootstrap, topic) is None

            # Two stopped: the broker's errors, as it sends them.
            cluster.kill(2)
            after_append, after_append_s = _timed_produce(conn, topic, b"two stopped, at once")
            wait_for_isr(cluster.bootstrap(), topic, 0, {LEADER})
            refused, _ = _timed_produce(conn, topic, b"two stopped")
        via_proxy = _client_produce(proxy.bootstrap, topic)
        direct = _client_produce(cluster.bootstrap(), topic)
        broker_said = _produce_errors(cluster, topic, at_least=8)
    report = (
        f"one stopped: {error} after {took_s:.1f} s; two stopped: {after_append} after "
        f"{after_append_s:.1f} s, then {refused}; librdkafka through the proxy {via_proxy}, "
        f"direct {direct}; the leader's produce answers on {topic}: {broker_said}"
    )
    print(report)
    assert after_append in (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT), report
    assert refused == NOT_ENOUGH_REPLICAS, report
    # What the client got is what the broker sent, in order (Kafka's own request log): all
    # up, one stopped (twice, and the client's), two stopped (twice, and the two clients').
    client_code = {None: NONE, KafkaError.NOT_ENOUGH_REPLICAS: NOT_ENOUGH_REPLICAS}
    got = [
        NONE,
        error,
        NONE,
        NONE,
        after_append,
        refused,
        *map(client_code.get, (via_proxy, direct)),
    ]
    assert broker_said == got, report
    assert via_proxy == direct == KafkaError.NOT_ENOUGH_REPLICAS, report


def _timed_produce(conn: RawConnection, topic: str, value: bytes) -> tuple[int, float]:
    started = time.monotonic()
    error, _ = conn.produce(topic, batch(value), timeout_ms=TIMEOUT_MS)
    return error, time.monotonic() - started


def _client_produce(bootstrap: str, topic: str) -> int | None:
    """One record from a librdkafka producer (acks=all, no retries): its delivery error code,
    None if delivered."""
    delivered = threading.Event()
    outcome: list[int | None] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        outcome.append(None if err is None else err.code())
        delivered.set()

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
        "retries": 0, "message.timeout.ms": TIMEOUT_MS,
    })  # fmt: skip
    producer.produce(topic, value=b"client", partition=0, on_delivery=report)
    producer.flush(TIMEOUT_MS / 1000 + 10)
    assert delivered.is_set(), "no delivery report"
    return outcome[0]


def _produce_errors(cluster: KafkaCluster, topic: str, at_least: int) -> list[int]:
    """The error code of every Produce of ``topic`` the leader answered, in order, once the
    request log has ``at_least`` of them (the broker logs a request after its answer is sent,
    so the last may come a moment after the client had it), or after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        errors = []
        for entry in cluster.requests(LEADER):
            if entry["requestHeader"]["requestApiKeyName"] != "PRODUCE":
                continue
            for answer in entry["response"]["responses"]:
                if answer.get("name") == topic:
                    errors += [p["errorCode"] for p in answer["partitionResponses"]]
        if len(errors) >= at_least or time.monotonic() > deadline:
            return errors
        time.sleep(0.1)
