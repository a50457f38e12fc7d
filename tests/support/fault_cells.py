# Strategy: the faults of Kafka's replication test (apache/kafka:tests/kafkatest/tests/core/
# replication_test.py) and of the transactions test, each applied to a three-node Apache Kafka
# (RF 3, min ISR 2) while every route's clients run, one cell after another:
#
#   clean shutdown   SIGTERM to the target node (a controlled shutdown: it hands its
#                    leaderships over first); it stays down until the clients resumed
#   hard shutdown    SIGKILL; stays down until the clients resumed
#   clean bounce     SIGTERM, then started again at once on its ports and data
#   hard bounce      SIGKILL, then started again after the broker session timeout and a grace
#                    second (Kafka's test waits its session timeout, 18 s, + 5 s; the testbed's
#                    is 6 s), so the controller has fenced it and elected new leaders
#   paused           SIGSTOP (every thread stopped) for the session timeout + 4 s, then
#                    SIGCONT: a broker that hangs with its sockets open, fenced meanwhile
#
# Targets: "leader" is the leader of one partition of the routes' topics (partition r mod 3 in
# repetition r, so repetitions chase every node, as Kafka's bounces chase the leader);
# "controller" the active KRaft controller. Before each cell the cluster is healed (every node
# running, no partition under-replicated, preferred leaders on the routes' topics, which share
# one replica assignment, so a fault hits every route's partition at once and identically).
# After the fault the cell waits until every route resumed on the partitions the fault hit (the
# producer acknowledged, each consumer received), bounded, then restores what it left down.
"""Kafka's broker faults, one cell at a time, against every route at the same moment."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from testbed.kafka_cluster import KafkaCluster
from tests.support.broker_faults import all_threads_stopped, freeze
from tests.support.cluster_roles import (
    active_controller,
    elect_preferred,
    leaders,
    under_replicated,
    wait_until,
)
from tests.support.verifiable_judge import (
    FLOWING_S,
    Ack,
    Read,
    acks_of,
    flowing,
    reads_of,
    resumed_after,
)
from tests.support.verifiable_routes import Route

__all__ = [
    "BROKER_FAULTS",
    "PARTITIONS",
    "Cell",
    "Fault",
    "flowing_again",
    "heal",
    "observe",
    "run_cell",
]

PARTITIONS = 3
#: broker.session.timeout.ms of the testbed's clusters (testbed/kafka_cluster.py).
SESSION_TIMEOUT_S = 6.0
HARD_BOUNCE_DOWN_S = SESSION_TIMEOUT_S + 1.0
PAUSE_S = SESSION_TIMEOUT_S + 4.0
#: Hang guards, not targets: how long clients may take to resume, a cluster to heal.
RESUME_BOUND_S = 120.0
HEAL_BOUND_S = 180.0
#: Traffic before each fault (so each window starts with steady traffic).
STEADY_S = 1.0
#: Events a cell looks at before its fault: about 10 s of a stream at THROUGHPUT (200/s), far
#: more than the last event before the fault that a pause is measured from.
LOOKBACK_EVENTS = 2_000


@dataclass(frozen=True)
class Fault:
    """A fault: its name, what it targets and what it does to the target node."""

    name: str
    target: str  # "leader" or "controller"
    act: Callable[[KafkaCluster, int], None]


def _clean_shutdown(cluster: KafkaCluster, node: int) -> None:
    cluster.kill(node, signal.SIGTERM)


def _hard_shutdown(cluster: KafkaCluster, node: int) -> None:
    cluster.kill(node, signal.SIGKILL)


def _clean_bounce(cluster: KafkaCluster, node: int) -> None:
    cluster.kill(node, signal.SIGTERM)
    cluster.start(node)


def _hard_bounce(cluster: KafkaCluster, node: int) -> None:
    cluster.kill(node, signal.SIGKILL)
    time.sleep(HARD_BOUNCE_DOWN_S)
    cluster.start(node)


def _paused(cluster: KafkaCluster, node: int) -> None:
    freeze(cluster, node)
    try:
        time.sleep(PAUSE_S)
    finally:
        cluster.resume(node)


#: The matrix's broker faults, by key (the short form runs each once).
BROKER_FAULTS = {
    "leader-clean-shutdown": Fault("leader: clean shutdown", "leader", _clean_shutdown),
    "leader-hard-shutdown": Fault("leader: hard shutdown", "leader", _hard_shutdown),
    "leader-clean-bounce": Fault("leader: clean bounce", "leader", _clean_bounce),
    "leader-hard-bounce": Fault("leader: hard bounce", "leader", _hard_bounce),
    "controller-clean-bounce": Fault("controller: clean bounce", "controller", _clean_bounce),
    "controller-hard-bounce": Fault("controller: hard bounce", "controller", _hard_bounce),
    "leader-paused": Fault(
        f"leader: SIGSTOP {PAUSE_S:g} s (session timeout {SESSION_TIMEOUT_S:g} s)",
        "leader",
        _paused,
    ),
}


@dataclass
class Cell:
    """One fault applied once: when, to whom, which partitions of each route it hit."""

    name: str
    repetition: int
    victim: int
    fault_s: float
    hit: dict[str, frozenset[int]]
    #: When every route was seen flowing again (the end of the cell's search for pauses).
    until_s: float = float("inf")
    #: Seconds from the fault until the last route resumed (inf: one never did).
    all_resumed_s: float | None = None
    notes: list[str] = field(default_factory=list)


def heal(cluster: KafkaCluster, topics: Sequence[str]) -> None:
    """Every node running (a frozen one thawed), nothing under-replicated, ``topics`` led by
    their preferred replicas."""
    for node in cluster.nodes:
        if not node.running():
            cluster.start(node.node_id)
        elif node.pid is not None and all_threads_stopped(node.pid):
            cluster.resume(node.node_id)
    bootstrap = cluster.bootstrap()
    wait_until(lambda: not under_replicated(bootstrap), HEAL_BOUND_S, "every ISR complete")

    def preferred() -> bool:
        return all(
            state.leader == state.replicas[0]
            for topic in topics
            for state in leaders(bootstrap, topic).values()
        )

    if not preferred():
        for topic in topics:
            elect_preferred(bootstrap, topic, PARTITIONS)
        wait_until(preferred, HEAL_BOUND_S, "preferred leaders")


def _streams(route: Route, since: Sequence[int] | None = None) -> list[Sequence[Ack | Read]]:
    """The route's producer's acknowledgements and each consumer's records; with ``since``
    (each stream's length at a fault), only from LOOKBACK_EVENTS before it: what a cell judges
    is around its fault, and a poll over every event of a long run cost seconds."""
    streams = [acks_of(route.producer), *(reads_of(c) for c in route.consumers.values())]
    if since is None:
        return streams
    return [s[max(0, start - LOOKBACK_EVENTS) :] for s, start in zip(streams, since, strict=True)]


def flowing_again(
    routes: Sequence[Route],
    fault_s: float,
    hit: dict[str, frozenset[int]],
    since: dict[str, list[int]] | None = None,
) -> float | None:
    """Once every route's producer and consumers are flowing again on their hit partitions
    (and at least twice FLOWING_S after the fault, past answers already in flight): the
    seconds from the fault until the last of them resumed; else None. ``since``: per route,
    each stream's length at the fault (see ``_streams``)."""
    now_s = time.time()
    if now_s < fault_s + 2 * FLOWING_S:
        return None
    latest = 0.0
    for route in routes:
        partitions = hit[route.name]
        for events in _streams(route, None if since is None else since[route.name]):
            resumed = resumed_after(events, fault_s, now_s, partitions)
            if resumed is None or not flowing(events, partitions, now_s):
                return None
            latest = max(latest, resumed)
    return latest


def observe(
    routes: Sequence[Route],
    name: str,
    repetition: int,
    hit: dict[str, frozenset[int]],
    act: Callable[[], object],
    victim: int = -1,
) -> Cell:
    """After STEADY_S of traffic, stamp the fault, ``act`` (the fault itself), then wait
    (bounded) until every route flows again on its ``hit`` partitions. The cell, with what
    ``act`` returned in its notes."""
    time.sleep(STEADY_S)
    since = {route.name: [len(events) for events in _streams(route)] for route in routes}
    fault_s = time.time()
    done = act()
    cell = Cell(name, repetition, victim, fault_s, hit)
    if done is not None:
        cell.notes.append(str(done))
    try:
        wait_until(
            lambda: flowing_again(routes, fault_s, hit, since) is not None,
            RESUME_BOUND_S,
            "resumed",
        )
    except AssertionError:
        cell.notes.append(f"not every route resumed within {RESUME_BOUND_S:g} s")
    cell.until_s = time.time()
    resumed = {
        route.name: [resumed_after(events, fault_s, cell.until_s, hit[route.name])
                     for events in _streams(route, since[route.name])]
        for route in routes
    }  # fmt: skip
    cell.all_resumed_s = max(v if v is not None else float("inf")
                             for found in resumed.values() for v in found)  # fmt: skip
    stamp = time.strftime("%H:%M:%S", time.localtime(fault_s))
    each = "; ".join(
        f"{route} " + " / ".join("never" if v is None else f"{v:.1f}" for v in found)
        for route, found in resumed.items()
    )
    print(f"{stamp} {name} #{repetition + 1}: node {victim}, partitions "
          f"{sorted(hit[routes[0].name])}; resumed (s, producer / consumers): {each}")  # fmt: skip
    return cell


def run_cell(cluster: KafkaCluster, routes: Sequence[Route], key: str, repetition: int) -> Cell:
    """Heal, aim ``key``'s fault at its target, apply it, wait for the routes to resume, and
    restore a node the fault left down."""
    fault = BROKER_FAULTS[key]
    bootstrap = cluster.bootstrap()
    heal(cluster, [route.topic for route in routes])
    if fault.target == "controller":
        victim = active_controller(bootstrap)
    else:
        victim = leaders(bootstrap, routes[0].topic)[repetition % PARTITIONS].leader
    hit = {
        route.name: frozenset(
            p for p, state in leaders(bootstrap, route.topic).items() if state.leader == victim
        )
        for route in routes
    }
    notes = []
    if len(set(hit.values())) > 1:
        notes.append(f"routes' partitions led by node {victim} differ: {hit}")
    if not any(hit.values()):  # a controller that leads none of the topics' partitions
        hit = {route.name: frozenset(range(PARTITIONS)) for route in routes}
        notes.append(f"node {victim} led no partition of the routes' topics: judged on all")
    cell = observe(routes, fault.name, repetition, hit,
                   lambda: fault.act(cluster, victim), victim)  # fmt: skip
    cell.notes[:0] = notes
    if not cluster.node(victim).running():
        cluster.start(victim)
    return cell
