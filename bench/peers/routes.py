# Strategy: a "route" is how a client reaches the Apache Kafka cluster of bench.peers:
#
#   direct           straight to the brokers' listener
#   purgatory-proxy  this tree's proxy (`python -m proxy run`, testbed/proxy_process.py)
#   kroxylicious     bench/peers/kroxylicious.py: passthrough virtual cluster, port per broker
#                    (0.12.0 from Maven Central, or a distribution built from a later release)
#   kafka-proxy      bench/peers/kafka_proxy.py: one mapped listener per broker
#
# Every forwarder is started fresh around an already running cluster, with TLS on both of its
# sides or on neither (the cluster's SSL listener, testbed/certs.py's CA), and exposes the PID
# that forwards so the benchmark reads its CPU time, RSS and descriptors with psutil. A route
# that cannot be had on this machine (no kafka-proxy binary; a given Kroxylicious distribution
# that is broken or needs a newer Java) is not started: `Availability` says why, and the
# benchmark writes that reason in its rows instead of a number.
"""Start one route (direct or a forwarder) in front of a running Kafka cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers.kafka_proxy import KafkaProxyBinary, running_kafka_proxy
from bench.peers.kroxylicious import Kroxylicious, running_kroxylicious
from testbed.kafka_cluster import KafkaCluster
from testbed.proxy_process import running_proxy

__all__ = [
    "DEFAULT_ROUTES",
    "FORWARDERS",
    "ROUTES",
    "Availability",
    "Route",
    "running_route",
    "running_routes",
]

#: Display order; each round of a family runs them in turn (the start turning by one).
ROUTES = ("direct", "purgatory-proxy", "baseline", "kroxylicious", "kafka-proxy")
FORWARDERS = ROUTES[1:]
#: The routes a run measures unless told: every one but the baseline, which needs a checkout.
DEFAULT_ROUTES = tuple(route for route in ROUTES if route != "baseline")


@dataclass(frozen=True)
class Route:
    """Where a client connects, how (librdkafka TLS settings), and which PID forwards."""

    name: str
    bootstrap: str
    forwarder_pid: int | None
    client_config: Mapping[str, str] = field(default_factory=dict)
    #: The forwarder's /metrics (purgatory-proxy only), for the fan-in's held-fetch samples.
    metrics_url: str | None = None


@dataclass(frozen=True)
class Availability:
    """Which routes this run has: the kafka-proxy binary found (or why none) and the
    Kroxylicious to start (or why it cannot start)."""

    kafka_proxy: KafkaProxyBinary
    kroxylicious: Kroxylicious
    #: Another checkout of purgatory-proxy, run as the route "baseline" (before and after).
    baseline: Path | None = None

    def missing(self, route: str) -> str | None:
        """Why ``route`` cannot run here, or None when it can."""
        if route == "baseline" and self.baseline is None:
            return "no --baseline checkout given"
        if route == "kafka-proxy" and self.kafka_proxy.path is None:
            return self.kafka_proxy.origin
        if route == "kroxylicious":
            return self.kroxylicious.missing
        return None


def _proxy_tls_env(cluster: KafkaCluster) -> dict[str, str]:
    pki = cluster.pki
    assert pki is not None
    return {
        "PURGATORY_PROXY_PROXY__TLS__CERT_FILE": str(pki.server.cert),
        "PURGATORY_PROXY_PROXY__TLS__KEY_FILE": str(pki.server.key),
        "PURGATORY_PROXY_UPSTREAM__TLS__ENABLED": "true",
        "PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(pki.ca),
    }


@contextlib.contextmanager
def running_route(
    name: str,
    cluster: KafkaCluster,
    availability: Availability,
    *,
    tls: bool = False,
    proxy_env: Mapping[str, str] | None = None,
    metrics_port: int | None = None,
) -> Iterator[Route]:
    """``name``'s route into ``cluster`` for the block: TLS from the client to the forwarder
    and from the forwarder to the cluster's SSL listener with ``tls``, plaintext without.

    ``proxy_env``: settings for purgatory-proxy (PURGATORY_PROXY_*); ``metrics_port``: where
    it serves /metrics.

    Raises:
        RuntimeError: the route is missing here (``availability``) or did not start.
    """
    listener = "SSL" if tls else "PLAINTEXT"
    pki = cluster.pki if tls else None
    client: dict[str, str] = {}
    if pki is not None:
        client = {"security.protocol": "ssl", "ssl.ca.location": str(pki.ca)}
    upstream = cluster.bootstrap(listener)
    reason = availability.missing(name)
    if reason is not None:
        raise RuntimeError(f"{name} is not available: {reason}")
    if name == "direct":
        yield Route(name, upstream, None, client)
    elif name in ("purgatory-proxy", "baseline"):
        env = {**(_proxy_tls_env(cluster) if tls else {}), **(proxy_env or {})}
        args = ["--metrics", f"127.0.0.1:{metrics_port}"] if metrics_port else []
        root = availability.baseline if name == "baseline" else None
        with running_proxy(upstream, *args, env=env, root=root) as proxy:
            url = f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else None
            yield Route(name, proxy.bootstrap, proxy.pid, client, url)
    elif name == "kroxylicious":
        node_ids = [node.node_id for node in cluster.nodes]
        build = availability.kroxylicious
        with running_kroxylicious(upstream, node_ids, pki, build) as (port, pid):
            yield Route(name, f"127.0.0.1:{port}", pid, client)
    elif name == "kafka-proxy":
        binary = availability.kafka_proxy.path
        assert binary is not None
        upstreams = [node.address(listener) for node in cluster.nodes]
        with running_kafka_proxy(binary, upstreams, pki) as (port, pid):
            yield Route(name, f"127.0.0.1:{port}", pid, client)
    else:
        raise ValueError(f"unknown route {name!r}; expected one of {ROUTES}")


@contextlib.contextmanager
def running_routes(
    names: Sequence[str], cluster: KafkaCluster, availability: Availability, *, tls: bool = False
) -> Iterator[dict[str, Route | str]]:
    """Every route of ``names`` at once for the block: its Route, or why it is not running
    ("not measured: ..." when it is missing here, "failed to start: ..." when it broke).

    The forwarders start side by side (a JVM's start-up is seconds), each in a thread of its
    own; every one that started is stopped when the block ends, however it ends.
    """
    started: dict[str, Route | str] = {}
    managers = {}
    for name in names:
        missing = availability.missing(name)
        if missing is None:
            managers[name] = running_route(name, cluster, availability, tls=tls)
        else:
            started[name] = f"not measured: {missing}"
    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(max_workers=max(1, len(managers))) as pool:
            entering = {name: pool.submit(manager.__enter__) for name, manager in managers.items()}
        # The pool has waited for every start: push each exit before anything can raise.
        for name, future in entering.items():
            error = future.exception()
            if error is None:
                stack.push(managers[name].__exit__)
                started[name] = future.result()
            else:
                started[name] = f"failed to start: {_first_line(error)}"
        yield {name: started[name] for name in names}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
