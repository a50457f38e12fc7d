# Strategy: the proxy in SNI mode (one TLS port, a host name per broker) in front of its own
# Apache Kafka of four nodes: three controllers that are brokers too, and broker 4, stopped
# before the proxy starts so the proxy first meets node id 4 while it runs. Every client of the
# matrix resolves the SNI names through a hosts file of the test's only (tests/compat/_hosts.py)
# and round-trips through the one port three times: on the three brokers; with one of them
# killed, its partitions led by the others; and, the killed one back, after broker 4 joins, on
# a topic with a partition for each broker, so each of the four leads one. Kafka's request log
# shows each node's Produce requests, the way the tests see which brokers a client reached.
"""SNI mode through every client of the matrix, a leader change and a broker added."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from testbed.certs import SNI_BOOTSTRAP, SNI_BROKERS, Pki, make_pki
from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat import CLIENTS, roundtrip_and_check
from tests.compat._hosts import write_hosts
from tests.compat._tls import ClientTls

#: Node ids of the cluster; NEW_BROKER is stopped until the proxy runs.
NODES = (1, 2, 3)
NEW_BROKER = 4
#: Records per round trip (fewer than the matrix's 1,000: three rounds of eight clients).
RECORDS = 300


@dataclass(frozen=True)
class Gateway:
    cluster: KafkaCluster
    proxy: ProxyProcess
    pki: Pki
    hosts_file: str

    @property
    def direct(self) -> str:
        """The trusted reader's way in: the three first nodes (node 4 may be stopped)."""
        return _controllers(self.cluster)

    @property
    def bootstrap(self) -> str:
        return f"{SNI_BOOTSTRAP}:{self.proxy.port}"

    def produces(self) -> dict[int, int]:
        return {
            n.node_id: self.cluster.request_counts(n.node_id).get("Produce", 0)
            for n in self.cluster.nodes
        }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("sni")
    pki = make_pki(root / "pki")
    with running_kafka(len(NODES) + 1, controllers=len(NODES), request_log=True) as cluster:
        cluster.kill(NEW_BROKER)
        _wait(lambda: NEW_BROKER not in (_live_brokers(cluster) or {NEW_BROKER}), "4 to leave")
        config = root / "proxy.toml"
        config.write_text(
            f'[proxy.tls]\ncert_file = "{pki.wildcard.cert}"\nkey_file = "{pki.wildcard.key}"\n'
            f'[proxy.sni]\nbootstrap_host = "{SNI_BOOTSTRAP}"\nbroker_host = "{SNI_BROKERS}"\n'
        )
        with running_proxy(_controllers(cluster), "--config", str(config)) as proxy:
            names = [SNI_BOOTSTRAP, *(SNI_BROKERS.format(node_id=n) for n in range(1, 9))]
            hosts = write_hosts(root / "hosts", names)
            yield Gateway(cluster, proxy, pki, hosts)


def _controllers(cluster: KafkaCluster) -> str:
    """The addresses of nodes 1-3, never broker 4's (it is stopped at first)."""
    return ",".join(cluster.node(n).address() for n in NODES)


def _live_brokers(cluster: KafkaCluster) -> set[int] | None:
    """The brokers the cluster lists unfenced (a stopped one is fenced); None when the
    admin's request failed (it may pick a node that has just been killed)."""
    admin = KafkaAdminClient(bootstrap_servers=_controllers(cluster), client_id="sni-test")
    try:
        brokers = admin.describe_cluster()["brokers"]  # fenced ones too, marked
        return {b["broker_id"] for b in brokers if not b.get("is_fenced", False)}
    except KafkaError:
        return None
    finally:
        admin.close()


def _wait(done: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.5)


def _round_trips(gateway: Gateway, partitions: int) -> dict[str, list[str]]:
    """Every client's round trip through the one port at once; each one's problems."""

    def one(client: str) -> list[str]:
        result, problems = roundtrip_and_check(
            client,
            gateway.bootstrap,
            gateway.direct,
            n=RECORDS,
            partitions=partitions,
            tls=ClientTls(str(gateway.pki.ca)),
            hosts_file=gateway.hosts_file,
        )
        return problems if len(result.report.consumed) == RECORDS else [*problems, "short"]

    with ThreadPoolExecutor(max_workers=len(CLIENTS)) as pool:
        return dict(zip(CLIENTS, pool.map(one, CLIENTS), strict=True))


def test_every_client_reaches_each_broker_through_one_port(gateway: Gateway) -> None:
    before = gateway.produces()
    assert _round_trips(gateway, partitions=len(NODES)) == {c: [] for c in CLIENTS}
    after = gateway.produces()
    assert all(after[n] > before[n] for n in NODES), (before, after)
    log = gateway.proxy.log_text()
    assert "is served at" not in log  # no listener per broker in SNI mode
    assert gateway.proxy.alive()


def test_every_client_follows_a_leader_change(gateway: Gateway) -> None:
    """A leader killed: its partitions get new leaders, which clients reach by their names
    on the same port; the proxy is not restarted. (Killed between round trips, not during
    one: a client whose admin request is on the killed node's connection fails its create
    step whether it goes through the proxy or not.)"""
    cluster = gateway.cluster
    victim = NODES[1]
    cluster.kill(victim)
    try:
        _wait(lambda: victim not in (_live_brokers(cluster) or {victim}), "the leader's fencing")
        before = gateway.produces()
        assert _round_trips(gateway, partitions=len(NODES)) == {c: [] for c in CLIENTS}
        after = gateway.produces()
        assert all(after[n] > before[n] for n in NODES if n != victim), (before, after)
    finally:
        cluster.start(victim)
    assert gateway.proxy.alive()


def test_a_broker_added_with_a_new_node_id_is_reached_without_a_restart(
    gateway: Gateway,
) -> None:
    cluster = gateway.cluster
    cluster.start(NEW_BROKER)
    _wait(lambda: NEW_BROKER in (_live_brokers(cluster) or ()), "broker 4 to join")
    _wait(lambda: set(NODES) <= (_live_brokers(cluster) or set()), "the killed leader's return")
    before = gateway.produces()
    # A partition per broker: Kafka's assignment gives each broker one partition to lead.
    assert _round_trips(gateway, partitions=len(NODES) + 1) == {c: [] for c in CLIENTS}
    after = gateway.produces()
    assert all(after[n] > before[n] for n in (*NODES, NEW_BROKER)), (before, after)
    assert gateway.proxy.alive()


def test_a_name_the_proxy_does_not_serve_is_refused_with_one_log_line(gateway: Gateway) -> None:
    context = ssl.create_default_context(cafile=str(gateway.pki.ca))
    context.check_hostname = False
    with (
        socket.create_connection(("127.0.0.1", gateway.proxy.port), timeout=10) as raw,
        pytest.raises((ssl.SSLError, ConnectionError)),
        context.wrap_socket(raw, server_hostname="nobody.kafka.test") as tls,
    ):
        tls.recv(1)
    line = gateway.proxy.wait_for_log(r"closed client connection from \S+: TLS handshake refused.*")
    assert "'nobody.kafka.test'" in line[0]
    assert gateway.proxy.log_text().count("nobody.kafka.test") == 1
