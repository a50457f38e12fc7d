# Strategy: how each family of bench.peers walks its rounds, cells and routes, recording one
# row per measurement (or its error) with the family, round, route and cell it belongs to.
#
#   throughput, tls   every route of a round runs at once (bench/peers/routes.running_routes)
#                     and each cell measures them back to back (bench/peers/load.py); the TLS
#                     family does so once per mode, plaintext then TLS, in each round
#   latency           the same, on the three-node cluster it is given, at fractions of the
#                     rate direct reaches there
#   memory, fanin     each measurement gets a fresh forwarder of its own, so what it weighs is
#                     that measurement's alone (bench/peers/memory.py, bench/peers/fanin.py)
#
# Within a round the routes run in turn, the first turning by one each round
# (bench/peers/load.ordered). A route missing here is a row saying so in every cell; a cell
# that fails is a row with its error, and the run goes on.
"""The rounds of each bench.peers family, recorded as rows."""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from bench.fanin.config import QUIET_MARGIN_S, proxy_settings
from bench.peers.config import Config
from bench.peers.fanin import KafkaTarget, fanin_row
from bench.peers.load import (
    Cell,
    Row,
    calibrate,
    error_text,
    fresh_topic,
    latency_cells,
    ordered,
    throughput_cells,
    tls_cells,
    warm_up,
)
from bench.peers.memory import memory_row
from bench.peers.routes import FORWARDERS, Availability, Route, running_route, running_routes
from testbed.kafka_cluster import KafkaCluster
from testbed.kafka_jmx import request_meters
from testbed.processes import free_port

#: The peers open one upstream connection per client: two descriptors per idle consumer, plus
#: what the process holds for itself (a JVM's jars and sockets: about 150 measured).
PEER_DESCRIPTORS_PER_CONSUMER = 2
PEER_DESCRIPTOR_MARGIN = 300
PEERS = ("kroxylicious", "kafka-proxy")


def peer_descriptors_short(n: int) -> str | None:
    """Why a peer cannot hold ``n`` idle consumers under this process's RLIMIT_NOFILE (which
    it inherits), or None. At the limit its consumers never all connect and the run stalls."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    need = PEER_DESCRIPTORS_PER_CONSUMER * n + PEER_DESCRIPTOR_MARGIN
    if need <= soft:
        return None
    return (
        f"not measured: {n:,} consumers need about {need:,} descriptors in a forwarder that "
        f"opens one upstream connection per client, and RLIMIT_NOFILE here is {soft:,} "
        f"(raising the hard limit was refused)"
    )


__all__ = ["Families", "Run"]


@dataclass
class Run:
    """What a run measured: its rows, the versions it ran and what limited it."""

    config: Config
    versions: dict[str, str]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self, command: str, wall_s: float) -> dict[str, Any]:
        return {
            "command": command,
            "wall_s": wall_s,
            "config": self.config.to_json(),
            "versions": self.versions,
            "notes": self.notes,
            "rows": self.rows,
        }


#: Row keys that say a measurement had trouble (failed consumers or connections, its notes).
_TROUBLE = ("failures", "errors", "notes", "first_failure")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _progress(row: Row) -> str:
    values = ", ".join(
        f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in row.items()
        if key not in ("family", "round", "route", "cell") and value is not None
    )
    return f"peers: {row['family']} round {row['round']} {row['route']:>15} {row['cell']}: {values}"


@dataclass
class Families:
    """One run's families over ``routes``; each method measures one family into ``run``."""

    run: Run
    available: Availability
    routes: Sequence[str]
    log: Callable[[str], None] = _log

    @property
    def config(self) -> Config:
        return self.run.config

    def _add(self, family: str, round_no: int, route: str, cell: str, measured: Row) -> None:
        row = {"family": family, "round": round_no, "route": route, "cell": cell, **measured}
        self.run.rows.append(row)
        self.log(_progress(row))
        # What went wrong inside a measurement that still gave numbers goes to the notes.
        trouble = [str(row[key]) for key in _TROUBLE if row.get(key)]
        if trouble:
            where = f"{family}, {cell}, round {round_no}, {route}"
            self.run.notes.append(f"{where}: {'; '.join(trouble)}")

    def _attempt(
        self,
        family: str,
        round_no: int,
        route: str,
        cell: str,
        keys: Row,
        action: Callable[[], list[Row]],
    ) -> None:
        """Record ``action``'s rows, or one row with its error; every row gets ``keys``."""
        try:
            rows = action()
        except Exception as exc:  # one failed cell must not end the run
            rows = [{"error": error_text(exc)}]
        for measured in rows:
            self._add(family, round_no, route, cell, {**keys, **measured})

    def _each_route(
        self,
        family: str,
        round_no: int,
        names: Sequence[str],
        cell: str,
        keys: Row,
        measure: Callable[[str], list[Row]],
    ) -> None:
        """``measure`` each route of ``names`` in turn (a fresh forwarder each time)."""
        for name in ordered(names, round_no):
            missing = self.available.missing(name)
            if missing is not None:
                self._add(
                    family, round_no, name, cell, {**keys, "error": f"not measured: {missing}"}
                )
            else:
                self._attempt(family, round_no, name, cell, keys, partial(measure, name))

    def _cells_round(
        self,
        family: str,
        round_no: int,
        cluster: KafkaCluster,
        cells: Sequence[Cell],
        *,
        tls: bool = False,
        keys: Row | None = None,
    ) -> None:
        """Every cell on every route of the round, the routes running at once."""
        with running_routes(self.routes, cluster, self.available, tls=tls) as started:
            names = ordered(list(started), round_no)
            for name in names:
                route = started[name]
                if isinstance(route, Route):
                    try:
                        warm_up(cluster, route, self.config.warmup_records)
                    except Exception as exc:
                        started[name] = f"warm-up failed: {error_text(exc)}"
            for cell in cells:
                cell_keys = {**(keys or {}), **cell.keys}
                for name in names:
                    route = started[name]
                    if isinstance(route, str):
                        self._add(family, round_no, name, cell.label, {**cell_keys, "error": route})
                    else:
                        measure = partial(cell.measure, cluster, route)
                        self._attempt(family, round_no, name, cell.label, cell_keys, measure)

    def throughput(self, cluster: KafkaCluster) -> None:
        cells = throughput_cells(self.config.sizes, self.config.per_request)
        for round_no in range(1, self.config.rounds + 1):
            self._cells_round("throughput", round_no, cluster, cells)

    def tls(self, cluster: KafkaCluster) -> None:
        cells = tls_cells(self.config.tls_records)
        for round_no in range(1, self.config.rounds + 1):
            for mode in ("plaintext", "tls"):
                self._cells_round(
                    "tls", round_no, cluster, cells, tls=mode == "tls", keys={"mode": mode}
                )

    def latency(self, cluster: KafkaCluster) -> None:
        """Open loop on ``cluster`` (three nodes) at fractions of direct's rate there."""
        config = self.config
        with running_route("direct", cluster, self.available) as direct:
            rate = calibrate(cluster, direct, config.calibration_records)
        self.run.notes.append(
            f"latency: direct's closed-loop 1 KiB produce rate on the three-node cluster: "
            f"{rate:,.0f} records/s; the offered loads are fractions of it"
        )
        cells = latency_cells(
            config.load_fractions, rate, config.latency_duration_s, config.latency_warmup_s
        )
        for round_no in range(1, config.rounds + 1):
            self._cells_round("latency", round_no, cluster, cells)

    def memory(self, cluster: KafkaCluster) -> None:
        config = self.config

        def weigh(name: str) -> list[Row]:
            with (
                fresh_topic(cluster) as topic,
                running_route(name, cluster, self.available) as route,
            ):
                return [memory_row(route, topic, config.idle_connections, config.settle_s)]

        forwarders = [name for name in self.routes if name in FORWARDERS]
        label = f"{config.idle_connections:,} idle"
        for round_no in range(1, config.rounds + 1):
            self._each_route("memory", round_no, forwarders, label, {}, weigh)

    def fanin(self, cluster: KafkaCluster) -> None:
        """Idle consumers on the one-node ``cluster`` (it must serve JMX)."""
        config = self.config
        node = cluster.nodes[0]
        broker_pid = node.pid
        assert broker_pid is not None
        quiet_s = config.fanin_upstream_idle_ms / 1000 + QUIET_MARGIN_S

        def fan_in(name: str, n: int, wait_ms: int) -> list[Row]:
            short = peer_descriptors_short(n) if name in PEERS else None
            if short is not None:
                return [{"error": short}]
            env = proxy_settings(n, config.fanin_upstream_idle_ms)
            metrics = free_port()
            route = running_route(
                name, cluster, self.available, proxy_env=env, metrics_port=metrics
            )
            with fresh_topic(cluster) as topic, route as started, request_meters(node) as meters:
                row = fanin_row(
                    KafkaTarget(topic, started, broker_pid, meters),
                    n=n,
                    max_wait_ms=wait_ms,
                    window_s=config.fanin_window_s,
                    probes=config.fanin_probes,
                    settle_s=config.settle_s,
                    # purgatory-proxy's warm-up upstream connections close before the window.
                    quiet_s=quiet_s if name in ("purgatory-proxy", "baseline") else 0.0,
                )
            return [row]

        for round_no in range(1, config.fanin_rounds + 1):
            for wait_ms in config.fanin_waits_ms:
                for n in config.fanin_ns:
                    self._each_route(
                        "fanin",
                        round_no,
                        self.routes,
                        f"N={n:,} wait={wait_ms:,} ms",
                        {"n": n, "max_wait_ms": wait_ms},
                        partial(fan_in, n=n, wait_ms=wait_ms),
                    )
