# Strategy: issue 29's bounds before authentication, against Apache Kafka's own SASL listener
# (SASL_PLAINTEXT, PLAIN accounts of testbed.kafka_cluster.USERS) with the proxy in passthrough:
# each client authenticates to the cluster itself, and the proxy's own connections log in as
# admin. Two attacks, each beside a real client (kafka-python, logged in as alice) that must keep
# producing through the same proxy:
#
#   large frame    a connection announces a 600 KiB frame before it has authenticated. Kafka
#                  reads no frame above sasl.server.max.receive.size (512 KiB) before
#                  authentication; main's proxy reserved and waited for it until the frame
#                  timeout (30 s). Asserted: closed at its size prefix within CLOSED_WITHIN_S,
#                  one log line saying why.
#   idle unauthenticated   IDLERS connections send ApiVersions (in passthrough each opens its
#                  own upstream connection for it) and nothing else. Main kept both sockets
#                  of each until the idle timeout (10 minutes). Asserted: the proxy's
#                  descriptors grow by two per idler, and once connections.
#                  authentication_timeout_ms has passed they are all closed (descriptors back
#                  to where they were, give or take the proxy's own), one line each.
"""Attack: clients that do not authenticate, in passthrough before Apache Kafka (issue 29)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import trio
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from testbed.kafka_cluster import USERS, KafkaCluster, running_kafka
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.support.load_proc import open_fds
from tests.support.load_wire import KafkaWire
from wire.messages import ApiVersionsRequest

AUTH_TIMEOUT_S = 5
IDLERS = 50
CLOSED_WITHIN_S = 2.0
#: The proxy's own connections (metadata, watchers) may come and go meanwhile.
FD_TOLERANCE = 4
LISTENER = "SASL_PLAINTEXT"


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[KafkaCluster, ProxyProcess]]:
    env = {
        "PURGATORY_PROXY_PROXY__CLIENT_AUTH": "passthrough",
        "PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM": "PLAIN",
        "PURGATORY_PROXY_UPSTREAM__SASL__USERNAME": "admin",
        "PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD": USERS["admin"],
        "PURGATORY_PROXY_CONNECTIONS__AUTHENTICATION_TIMEOUT_MS": str(AUTH_TIMEOUT_S * 1000),
    }
    with (
        running_kafka(listeners=(LISTENER,)) as kafka,
        running_proxy(kafka.bootstrap(LISTENER), env=env) as proxy,
    ):
        yield kafka, proxy


def _sasl(user: str) -> dict[str, object]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def _topic(kafka: KafkaCluster) -> str:
    topic = f"unauthenticated-{time.monotonic_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap(LISTENER), **_sasl("admin"))
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    return topic


def _alice_produces(proxy: ProxyProcess, topic: str, records: int) -> None:
    """alice, logged in through the proxy, gets ``records`` records acknowledged."""
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all", **_sasl("alice"))
    try:
        for index in range(records):
            producer.send(topic, f"record {index}".encode()).get(timeout=30)
    finally:
        producer.close()


def _lines(proxy: ProxyProcess, pattern: str) -> int:
    return len(re.findall(pattern, proxy.log_text()))


async def test_a_large_frame_before_authentication_is_refused_at_its_size(
    gateway: tuple[KafkaCluster, ProxyProcess],
) -> None:
    kafka, proxy = gateway
    topic = _topic(kafka)
    pattern = r"frame of 614400 bytes before the client authenticated; at most 524288"
    attacker = await trio.open_tcp_stream(proxy.host, proxy.port)
    await attacker.send_all((600 * 1024).to_bytes(4, "big"))
    started = trio.current_time()
    with trio.move_on_after(CLOSED_WITHIN_S * 10):
        closed = not await attacker.receive_some(1)
    waited_s = trio.current_time() - started
    await attacker.aclose()
    await trio.to_thread.run_sync(_alice_produces, proxy, topic, 10)
    print(f"large frame before authentication: closed in {waited_s:.2f} s")
    assert closed and waited_s <= CLOSED_WITHIN_S, f"not closed in {waited_s:.1f} s"
    assert _lines(proxy, pattern) == 1, proxy.log_text()[-3000:]
    assert proxy.alive()


async def test_unauthenticated_clients_and_their_upstream_sockets_end_at_the_timeout(
    gateway: tuple[KafkaCluster, ProxyProcess],
) -> None:
    kafka, proxy = gateway
    topic = _topic(kafka)
    await trio.to_thread.run_sync(_alice_produces, proxy, topic, 1)  # the proxy's own, open
    pattern = r"had not accepted the client within 5 s"
    before_lines = _lines(proxy, pattern)
    before_fds = open_fds(proxy.pid)
    idlers = []
    for index in range(IDLERS):
        wire = await KafkaWire.connect(proxy.host, proxy.port, f"idler-{index}")
        await wire.send(ApiVersionsRequest(), 3)
        await wire.receive()
        idlers.append(wire)
    opened_fds = open_fds(proxy.pid) - before_fds
    await trio.to_thread.run_sync(_alice_produces, proxy, topic, 10)
    with trio.move_on_after(AUTH_TIMEOUT_S * 4):
        while _lines(proxy, pattern) - before_lines < IDLERS:
            await trio.sleep(0.1)
    closed = _lines(proxy, pattern) - before_lines
    await trio.sleep(0.5)
    left_fds = open_fds(proxy.pid) - before_fds
    for wire in idlers:
        await wire.aclose()
    print(
        f"idle unauthenticated clients: {IDLERS} opened {opened_fds} descriptors; {closed} "
        f"closed at the authentication timeout; descriptors after: {left_fds:+d}"
    )
    assert opened_fds >= 2 * IDLERS - FD_TOLERANCE  # each: its own socket and its upstream's
    assert closed == IDLERS, proxy.log_text()[-3000:]
    assert abs(left_fds) <= FD_TOLERANCE
    assert proxy.alive()
