# Strategy: issue 29's connection attacks against the real proxy process in front of Apache
# Kafka (the session's one KRaft node, tests/conftest.py). Attackers are raw sockets that send
# one ApiVersions and then idle, from chosen loopback source addresses (127.0.0.1, .2, ...: all
# loopback on Linux), because a client library would retry, pool or back off on its own. A
# connection's fate is read from the socket: an answer (served) or end of stream / reset with
# none (refused at accept). Real clients (kafka-python) check that others are still served.
#
#   descriptors  a proxy started with RLIMIT_NOFILE 256 (soft and hard, as a host would set
#                it) and 400 attackers: the proxy stays up, /healthz and /metrics answer
#                throughout, the connections past its cap are refused cleanly and counted, one
#                log line says why, and a real client is served once the flood has gone
#                (issue 29: on main /healthz stopped answering and the proxy exited 1)
#   per IP       max_connections_per_ip with an override: each address gets its own count,
#                the excess of each is refused, the slot comes back when one closes, and a
#                client from a third address is served all along
#   rates        max_connection_creation_rate (all addresses) and _per_ip: a burst is served
#                up to one second's worth, the rest refused; bounds come from the elapsed time
#                the test measured around the whole burst, never from the proxy's speed
"""Connection limits under attack: descriptors, per-IP caps and creation rates (issue 29)."""

from __future__ import annotations

import itertools
import re
import socket
import time
import urllib.request
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer

from proxy.primitives.descriptors import PER_BROKER
from testbed.processes import Broker, free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.integration._kafka_raw import metric_value

#: ApiVersions v0, correlation id 7, client id "attacker": the cheapest request a client sends.
_API_VERSIONS = b"\x00\x00\x00\x12" + b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x08attacker"
#: The refusal log line (rate-limited: one per reason per 10 s).
_REFUSED = re.compile(r"refused a client connection from (\S+): .*\((connections\.\w+)")


def _attack(proxy: ProxyProcess, source: str = "127.0.0.1") -> socket.socket:
    """A connection from ``source`` that sends one ApiVersions and then idles."""
    sock = socket.create_connection(
        (proxy.host, proxy.port), timeout=10, source_address=(source, 0)
    )
    sock.sendall(_API_VERSIONS)
    return sock


def _served(sock: socket.socket) -> bool:
    """Whether the proxy answered (True) or closed the connection with no answer (False)."""
    try:
        return len(sock.recv(4)) > 0
    except ConnectionResetError:
        return False


def _served_ones(socks: list[socket.socket]) -> list[socket.socket]:
    """The connections of ``socks`` the proxy answered (each is read once)."""
    return [sock for sock in socks if _served(sock)]


def _close(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def _get(metrics: str, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://{metrics}{path}", timeout=10) as reply:
        return reply.status, reply.read()


def _refusal_lines(proxy: ProxyProcess) -> list[tuple[str, str]]:
    return _REFUSED.findall(proxy.log_text())


def _round_trip(bootstrap: str) -> None:
    """A real client creates a topic, produces a record and reads it back."""
    topic = create_topic(bootstrap, "limits")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    assert producer.send(topic, b"served").get(timeout=30).offset == 0
    producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=30_000,
    )  # fmt: skip
    # The first record, not the iterator to its end (that waits out consumer_timeout_ms).
    assert [record.value for record in itertools.islice(consumer, 1)] == [b"served"]
    consumer.close()


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return str(path)


NOFILE = 256
FLOOD = 400


def test_out_of_descriptors_the_proxy_refuses_the_excess_and_its_probes_answer(
    kafka_broker: Broker,
) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics, nofile=NOFILE) as proxy:
        line = proxy.wait_for_log(rf"descriptor limit {NOFILE}: (\d+) for client connections")
        capacity = int(line[1])
        assert 0 < capacity < FLOOD
        started = time.monotonic()
        flood: list[socket.socket] = []
        try:
            for _ in range(FLOOD):
                flood.append(_attack(proxy))
            served = len(_served_ones(flood))
            # Probes and scrapes are answered while every client descriptor is taken.
            assert _get(metrics, "/healthz") == (200, b"ok\n")
            assert _get(metrics, "/readyz")[0] == 200
            assert proxy.alive()
            own_upstreams = metric_value(metrics, "purgatory_proxy_upstream_connections_open")
        finally:
            _close(flood)
        elapsed_s = time.monotonic() - started
        # One descriptor per client socket, and one per client's own upstream connection (the
        # ApiVersions asked before the proxy had the cluster's answer were forwarded); each
        # broker's listener and channels take PER_BROKER (7) of the budget.
        brokers = len(re.findall(r"broker \d+ is served at", proxy.log_text()))
        assert served + own_upstreams == capacity - PER_BROKER * brokers
        refused = metric_value(metrics, "purgatory_proxy_connections_refused_total",
                               reason="descriptors")  # fmt: skip
        assert refused == FLOOD - served
        lines = _refusal_lines(proxy)
        assert {reason for _, reason in lines} == {"connections.reserved_descriptors"}
        assert 1 <= len(lines) <= 1 + elapsed_s / 10  # one line per reason per 10 s
        _round_trip(proxy.bootstrap)
        assert proxy.alive()


#: Metadata v1 for no topics, correlation id 9: a request the proxy forwards on the client's own
#: upstream connection (ApiVersions may be answered from the cluster's last answer).
_METADATA = b"\x00\x00\x00\x16\x00\x03\x00\x01\x00\x00\x00\x09\x00\x08attacker\x00\x00\x00\x00"


def test_a_connection_whose_own_upstream_has_no_descriptor_left_is_closed_alone(
    kafka_broker: Broker,
) -> None:
    """Idle clients cost one descriptor each, so the budget admits them all; a client that
    then needs an upstream connection of its own when none is left is closed with one line,
    and the others and the probes carry on."""
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics, nofile=NOFILE) as proxy:
        proxy.wait_for_log(r"broker \d+ is served at")
        idle: list[socket.socket] = []
        try:
            for _ in range(FLOOD):  # until the budget refuses one: every descriptor is taken
                sock = _attack(proxy)
                if not _served(sock):
                    sock.close()
                    break
                idle.append(sock)
            idle.pop().close()  # one descriptor comes back: for a client socket only
            deadline = time.monotonic() + 10  # a hang guard: the proxy sees the close at once
            while True:
                needy = socket.create_connection((proxy.host, proxy.port), timeout=10)
                needy.sendall(_METADATA)
                if proxy.log_text().count("no descriptor to spare for its own upstream") or (
                    time.monotonic() > deadline
                ):
                    break
                needy.close()
                time.sleep(0.1)
            assert not _served(needy)  # closed with no answer
            proxy.wait_for_log(r"closed client connection .*no descriptor to spare for its own")
            assert _get(metrics, "/healthz") == (200, b"ok\n")
            assert all(sock.fileno() >= 0 for sock in idle) and proxy.alive()
            closed = metric_value(metrics, "purgatory_proxy_connections_closed_total",
                                  reason="descriptors")  # fmt: skip
            assert closed >= 1
        finally:
            _close(idle)
        _round_trip(proxy.bootstrap)


def test_each_address_is_held_to_its_own_cap_and_others_are_served(
    kafka_broker: Broker, tmp_path: Path
) -> None:
    config = _config(
        tmp_path,
        "[connections]\nmax_connections_per_ip = 5\n"
        '[connections.max_connections_per_ip_overrides]\n"127.0.0.3" = 8\n',
    )
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(kafka_broker.bootstrap, "--config", config, "--metrics", metrics) as proxy:
        started = time.monotonic()
        second = [_attack(proxy, "127.0.0.2") for _ in range(8)]
        third = [_attack(proxy, "127.0.0.3") for _ in range(10)]
        try:
            served_second = _served_ones(second)
            assert len(served_second) == 5
            assert len(_served_ones(third)) == 8
            # A real client from 127.0.0.1 (at most 3 connections at once) is served while
            # both attackers are at their caps.
            _round_trip(proxy.bootstrap)
            # A slot given back is a slot to take: one of 127.0.0.2's served ones goes.
            served_second[0].close()
            deadline = time.monotonic() + 10  # a hang guard: the proxy sees the close at once
            while not _served(again := _attack(proxy, "127.0.0.2")):
                again.close()
                assert time.monotonic() < deadline, "no slot came back"
            again.close()
        finally:
            _close(second + third)
        refused = metric_value(metrics, "purgatory_proxy_connections_refused_total",
                               reason="max_connections_per_ip")  # fmt: skip
        assert refused >= 5
        # One line per reason per 10 s, however many were refused; the first names .2.
        lines = _refusal_lines(proxy)
        assert lines[0] == ("127.0.0.2", "connections.max_connections_per_ip")
        assert len(lines) <= 1 + (time.monotonic() - started) / 10
        assert proxy.alive()


def _burst(proxy: ProxyProcess, count: int, source: str) -> tuple[int, float]:
    """``count`` connections from ``source`` as fast as possible: how many were served, and
    the seconds from the first connect to the last fate known."""
    started = time.monotonic()
    socks = [_attack(proxy, source) for _ in range(count)]
    try:
        served = len(_served_ones(socks))
    finally:
        _close(socks)
    return served, time.monotonic() - started


def test_a_burst_past_the_creation_rate_is_refused_past_one_seconds_worth(
    kafka_broker: Broker, tmp_path: Path
) -> None:
    rate = 5
    config = _config(tmp_path, f"[connections]\nmax_connection_creation_rate = {rate}\n")
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(kafka_broker.bootstrap, "--config", config, "--metrics", metrics) as proxy:
        time.sleep(1.1)  # the bucket is full
        served, elapsed_s = _burst(proxy, 100, "127.0.0.1")
        assert rate <= served <= rate + rate * elapsed_s + 1
        refused = metric_value(metrics, "purgatory_proxy_connections_refused_total",
                               reason="creation_rate")  # fmt: skip
        assert refused == 100 - served > 0
        assert [reason for _, reason in _refusal_lines(proxy)] == [
            "connections.max_connection_creation_rate"
        ]
        time.sleep(1.1)  # a quiet second later, the next ones are served
        _round_trip(proxy.bootstrap)
        assert proxy.alive()


def test_one_address_past_its_creation_rate_takes_nothing_from_the_others(
    kafka_broker: Broker, tmp_path: Path
) -> None:
    per_ip = 5
    config = _config(
        tmp_path,
        "[connections]\nmax_connection_creation_rate = 20\n"
        f"max_connection_creation_rate_per_ip = {per_ip}\n",
    )
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(kafka_broker.bootstrap, "--config", config, "--metrics", metrics) as proxy:
        time.sleep(1.1)
        served, elapsed_s = _burst(proxy, 100, "127.0.0.2")
        assert per_ip <= served <= per_ip + per_ip * elapsed_s + 1
        # Its 95-odd refusals took none of the shared 20 a second: another address gets its
        # whole second's worth now.
        assert _burst(proxy, per_ip, "127.0.0.3")[0] == per_ip
        refused = metric_value(metrics, "purgatory_proxy_connections_refused_total",
                               reason="creation_rate_per_ip")  # fmt: skip
        assert refused == 100 - served
        assert _refusal_lines(proxy) == [
            ("127.0.0.2", "connections.max_connection_creation_rate_per_ip")
        ]
        assert proxy.alive()
