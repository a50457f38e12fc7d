# Strategy: the goals against the peers, judged on one run's rows, one line per row of the section
# it compares. Each goal sets purgatory-proxy's median against every peer's median in the same run
# (throughput as ratios to the same round's direct, costs as the forwarders' own values):
#
#   throughput         ahead of both peers on every produce / consume / per-request row
#   CPU                no more CPU per GiB (each row) or per request than either peer
#   latency            added ack latency at p50 and p99 no worse than the best peer's
#   fan-in             upstream fetches at most 1 % of the lowest peer's
#   memory             RSS per idle consumer (fan-in) no more than the lowest peer's
#
# A peer that was not measured is named in the line; the verdict is then over the peers that
# were, and says so.
"""The goals against the peers, on a bench.peers run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from bench.peers.config import Config
from bench.peers.load import Row
from bench.peers.stats import added, matching, median, ratio

__all__ = ["goals_table"]

OURS = "purgatory-proxy"
PEERS = ("kroxylicious", "kafka-proxy")
#: Fan-in: upstream fetches through the proxy at most this share of the lowest peer's.
FANIN_SHARE = 0.01

Measure = Callable[[str], float | None]


def _size(record_bytes: int) -> str:
    return f"{record_bytes // 1024} KiB" if record_bytes >= 1024 else f"{record_bytes} B"


@dataclass(frozen=True)
class Goal:
    """One goal: its label, how to read a route's value, which way is better, and its unit
    (``factor`` scales the peers' side: 0.01 = ours at most 1 % of theirs)."""

    label: str
    measure: Measure
    higher: bool
    unit: str
    factor: float = 1.0

    def line(self) -> str:
        """Ours against each peer; met when ours beats (or ties) every measured peer."""
        ours = self.measure(OURS)
        peers = {peer: self.measure(peer) for peer in PEERS}
        values = {OURS: ours, **peers}
        shown = "; ".join(f"{route} {_fmt(value, self.unit)}" for route, value in values.items())
        measured = {peer: v for peer, v in peers.items() if v is not None}
        if ours is None or not measured:
            return f"| {self.label} | {shown} | not judged |"
        if self.higher:
            met = all(ours >= self.factor * v for v in measured.values())
        else:
            met = all(ours <= self.factor * v for v in measured.values())
        verdict = "yes" if met else "**no**"
        missing = [peer for peer in PEERS if peer not in measured]
        if missing:
            verdict += f" (over {', '.join(measured)}; {', '.join(missing)} not measured)"
        return f"| {self.label} | {shown} | {verdict} |"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.2f} {unit}" if abs(value) < 10 else f"{value:,.0f} {unit}"


def _throughput(config: Config, rows: Sequence[Row]) -> Iterator[Goal]:
    if not rows:
        return
    cells = [
        (f"{phase} {_size(size)}", {"phase": phase, "record_bytes": size})
        for phase in ("produce", "consume")
        for size, _ in config.sizes
    ]
    cells.append(("1 record/request", {"phase": "per-request"}))
    for label, match in cells:
        per_request = match["phase"] == "per-request"
        key, metric = ("records_per_s", "requests/s") if per_request else ("mb_per_s", "MB/s")
        yield Goal(
            f"{label}: {metric} ahead of both peers (ratio to direct)",
            partial(_ratio_of, rows, key, match),
            higher=True,
            unit="x",
        )
    for label, match in cells:
        per_request = match["phase"] == "per-request"
        yield Goal(
            f"{label}: CPU per {'request' if per_request else 'GiB'} no more than either peer",
            partial(
                _median_of, rows, "cpu_us_per_record" if per_request else "cpu_s_per_gib", match
            ),
            higher=False,
            unit="µs" if per_request else "s/GiB",
        )


def _latency(config: Config, rows: Sequence[Row]) -> Iterator[Goal]:
    for fraction in config.load_fractions if rows else ():
        for key, name in (("ack_p50_ms", "p50"), ("ack_p99_ms", "p99")):
            yield Goal(
                f"{fraction:.0%} load: added ack {name} no worse than the best peer's",
                partial(_added_of, rows, key, {"load_fraction": fraction}),
                higher=False,
                unit="ms",
            )


def _fanin(config: Config, rows: Sequence[Row]) -> Iterator[Goal]:
    for wait_ms in config.fanin_waits_ms if rows else ():
        for n in config.fanin_ns:
            match = {"n": n, "max_wait_ms": wait_ms}
            where = f"N = {n:,}, fetch.max.wait.ms {wait_ms:,}"
            yield Goal(
                f"{where}: upstream Fetch/s at most 1 % of the lowest peer's",
                partial(_median_of, rows, "upstream_fetch_per_s", match),
                higher=False,
                unit="/s",
                factor=FANIN_SHARE,
            )
            yield Goal(
                f"{where}: RSS per idle consumer no more than the lowest peer's",
                partial(_median_of, rows, "rss_per_consumer_kib", match),
                higher=False,
                unit="KiB",
            )


def _ratio_of(rows: Sequence[Row], key: str, match: Row, route: str) -> float | None:
    return ratio(rows, key, route, **match)


def _median_of(rows: Sequence[Row], key: str, match: Row, route: str) -> float | None:
    return median(rows, key, route=route, **match)


def _added_of(rows: Sequence[Row], key: str, match: Row, route: str) -> float | None:
    return added(rows, key, route, **match)


def goals_table(config: Config, rows: Sequence[Row]) -> list[str]:
    """The goals this run measured, met or not (none: no table)."""
    goals = [
        *_throughput(config, matching(rows, family="throughput")),
        *_latency(config, matching(rows, family="latency")),
        *_fanin(config, matching(rows, family="fanin")),
    ]
    if not goals:
        return []
    return ["| goal | measured (medians) | met |", "|---|---|---|", *(g.line() for g in goals)]
