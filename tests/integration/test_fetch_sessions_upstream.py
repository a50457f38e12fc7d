# Strategy: the proxy terminates KIP-227 fetch sessions itself and reads the broker only with
# sessionless fetches of its own (DESIGN "The purgatory"): first looks and re-fetches with
# min_bytes 0, which Kafka answers at once, and one watcher long-poll per broker. So idle
# consumers held in the proxy must cost the broker no long-poll of their own, however many
# there are. Kafka's own request log (testbed/kafka_cluster.py, `request_log=True`: the
# session's three-node cluster) says exactly which fetches reached the partition's leader,
# whose client id they carried, whether they were in a session, and how long the broker kept
# them (remoteTimeMs: the time in its DelayedFetch purgatory).
#
# K idle consumers (raw sockets, kafka-python's Fetch v11, each with its own incremental session
# whose repeats list nothing) poll an empty partition with max_wait 500 ms for a few seconds,
# through a private proxy and, for comparison in the same test, straight to the leader, where
# the log shows what they cost without the proxy: K long-polls in sessions per max wait.
"""Idle consumers held in the proxy cost the broker no long-poll of their own (request log)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kafka import KafkaAdminClient

from testbed.kafka_cluster import KafkaCluster
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.integration._kafka_raw import RawConnection, leader_address

CONSUMERS = 10
WINDOW_S = 4.0
MAX_WAIT_MS = 500
FETCH_VERSION = 11
PROXY_CLIENT_ID = "purgatory-proxy"  # proxy/upstream/broker_channel.CLIENT_ID
CONSUMER_CLIENT_ID = "long-poll-test"  # tests/integration/_kafka_raw.RawConnection's
#: The proxy's [fetch] watcher_max_wait_ms (its default).
WATCHER_MAX_WAIT_MS = 500


@pytest.fixture(scope="module")
def proxy(kafka_cluster: KafkaCluster) -> Iterator[ProxyProcess]:
    """A private proxy: every fetch of the test's topic that reaches the broker is its own."""
    with running_proxy(kafka_cluster.bootstrap()) as running:
        yield running


@dataclass(frozen=True)
class BrokerFetch:
    """One Fetch of the topic as the leader's request log records it."""

    client_id: str
    session_id: int
    session_epoch: int
    min_bytes: int
    max_wait_ms: int
    max_bytes: int
    remote_ms: float  # how long the broker held it

    @property
    def long_poll(self) -> bool:
        """A fetch the broker may keep waiting for data (min_bytes 0 is answered at once)."""
        return self.min_bytes > 0 and self.max_wait_ms > 0


def _fetches_of(entries: list[dict[str, Any]], topic: str, topic_id: str) -> list[BrokerFetch]:
    """The fetches that name the topic, and every fetch of the consumers' client id (their
    incremental fetches name no topic)."""
    found = []
    for entry in entries:
        if entry["requestHeader"]["requestApiKeyName"] != "FETCH":
            continue
        request = entry["request"]
        named = {t.get("topic") for t in request["topics"]} | {
            t.get("topicId") for t in request["topics"]
        }
        ours = entry["requestHeader"]["clientId"] == CONSUMER_CLIENT_ID
        if topic not in named and topic_id not in named and not ours:
            continue
        found.append(
            BrokerFetch(
                entry["requestHeader"]["clientId"],
                request["sessionId"],
                request["sessionEpoch"],
                request["minBytes"],
                request["maxWaitMs"],
                request["maxBytes"],
                float(entry.get("remoteTimeMs", 0.0)),
            )
        )
    return found


def _idle_consumers(address: str, topic: str) -> int:
    """CONSUMERS threads, each an idle consumer with its own session for WINDOW_S; the
    number of fetches they made."""
    counts: list[int] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            with RawConnection(address) as conn:
                answer = conn.fetch(topic, 0, max_wait_ms=MAX_WAIT_MS, version=FETCH_VERSION,
                                    session_id=0, session_epoch=0)  # fmt: skip
                assert answer.error_code == 0 and answer.session_id, answer
                made, epoch = 1, 1
                deadline = time.monotonic() + WINDOW_S
                while time.monotonic() < deadline:
                    repeat = conn.fetch(topic, 0, max_wait_ms=MAX_WAIT_MS, version=FETCH_VERSION,
                                        session_id=answer.session_id, session_epoch=epoch,
                                        include_partition=False)  # fmt: skip
                    assert repeat.error_code == 0 and not repeat.values, repeat
                    made, epoch = made + 1, epoch + 1
                counts.append(made)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=consume, daemon=True) for _ in range(CONSUMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WINDOW_S + 60)
    assert not errors, errors
    return sum(counts)


def _leader(cluster: KafkaCluster, topic: str) -> tuple[int, str]:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap())
    try:
        (described,) = admin.describe_topics([topic])
    finally:
        admin.close()
    return int(described["partitions"][0]["leader_id"]), str(described.get("topic_id", ""))


@pytest.mark.parametrize("route", ["proxy", "direct"])
def test_idle_consumers_cost_the_broker_no_long_poll_of_their_own(
    kafka_cluster: KafkaCluster, proxy: ProxyProcess, route: str
) -> None:
    topic = create_topic(kafka_cluster.bootstrap(), "idle-upstream")
    leader, topic_id = _leader(kafka_cluster, topic)
    address = (leader_address(proxy.bootstrap, topic) if route == "proxy"
               else kafka_cluster.node(leader).address())  # fmt: skip
    before = len(kafka_cluster.requests(leader))
    made = _idle_consumers(address, topic)
    time.sleep(1.0)  # the watcher's last poll completes and is logged
    fetches = _fetches_of(kafka_cluster.requests(leader)[before:], topic, topic_id)
    long_polls = [f for f in fetches if f.long_poll]
    own = [f for f in fetches if f.client_id == CONSUMER_CLIENT_ID]
    held_s = sum(f.remote_ms for f in fetches) / 1000
    report = (
        f"{route}: {CONSUMERS} idle consumers made {made} fetches in {WINDOW_S:g} s; the "
        f"leader (node {leader}) logged {len(fetches)} fetches of the topic or the "
        f"consumers, {len(own)} from the consumers, {len(long_polls)} long-polls, holding "
        f"them {held_s:.1f} s"
    )
    print(report)
    polls_each = WINDOW_S * 1000 / MAX_WAIT_MS
    assert made >= CONSUMERS * polls_each * 0.5, f"the consumers hardly polled: {report}"
    if route == "direct":  # what the consumers cost without the proxy: their own long-polls
        assert len(own) >= made * 0.9, report
        assert all(f.long_poll for f in own), report
        assert sum(f.session_id == 0 for f in own) == CONSUMERS, report  # the sessions' opening
        return
    assert not own, f"consumer fetches reached the broker: {own[:3]}; {report}"
    assert all(f.client_id == PROXY_CLIENT_ID for f in fetches), report
    assert all((f.session_id, f.session_epoch) == (0, -1) for f in fetches), (
        f"the proxy fetched upstream in a session: {fetches[:3]}; {report}"
    )
    # Its long-polls are the watcher's alone (max_bytes 1): one at a time, whatever K is.
    assert all(f.max_bytes == 1 and f.max_wait_ms == WATCHER_MAX_WAIT_MS for f in long_polls), (
        f"a long-poll that is not the watcher's: {long_polls[:3]}"
    )
    assert len(long_polls) <= WINDOW_S * 1000 / WATCHER_MAX_WAIT_MS + 4, report
    # Everything else is a first look or re-fetch that the broker answers at once.
    immediate = [f for f in fetches if not f.long_poll]
    assert all(f.min_bytes == 0 for f in immediate), immediate[:3]
    assert len(immediate) <= CONSUMERS + 4, report
