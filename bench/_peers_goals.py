# Strategy: issue 26's goals, judged on one run's rows, one line per row of the section it
# compares. Each goal sets purgatory-proxy's median against every peer's median in the same
# run (throughput as ratios to the same round's direct, costs as the forwarders' own values):
#
#   throughput         ahead of both peers on every produce / consume / per-request row
#   CPU                no more CPU per GiB (each row) or per request than either peer
#   latency            added ack latency at p50 and p99 no worse than the best peer's
#   fan-in             upstream fetches at most 1 % of the lowest peer's
#   memory             RSS per idle consumer (fan-in) no more than the lowest peer's
#
# A peer that was not measured is named in the line; the verdict is then over the peers that
# were, and says so.
"""Issue 26's goals against a bench/peers.py run."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bench._peers_config import Config
from bench._peers_load import Row
from bench._peers_stats import added, matching, median, ratio

__all__ = ["goals_table"]

OURS = "purgatory-proxy"
PEERS = ("kroxylicious", "kafka-proxy")
#: Fan-in: upstream fetches through the proxy at most this share of the lowest peer's.
FANIN_SHARE = 0.01

Measure = Callable[[str], float | None]


def _size(record_bytes: int) -> str:
    return f"{record_bytes // 1024} KiB" if record_bytes >= 1024 else f"{record_bytes} B"


def _goal(label: str, measure: Measure, *, higher: bool, unit: str, factor: float = 1.0) -> str:
    """One line: ours against each peer; met when ours beats (or ties) every measured peer
    (``factor`` scales the peers' side: 0.01 = ours at most 1 % of theirs)."""
    ours = measure(OURS)
    peers = {peer: measure(peer) for peer in PEERS}
    shown = [f"{route} {_fmt(value, unit)}" for route, value in {OURS: ours, **peers}.items()]
    measured = {peer: v for peer, v in peers.items() if v is not None}
    if ours is None or not measured:
        return f"| {label} | {'; '.join(shown)} | not judged |"
    if higher:
        met = all(ours >= factor * v for v in measured.values())
    else:
        met = all(ours <= factor * v for v in measured.values())
    verdict = "yes" if met else "**no**"
    missing = [peer for peer in PEERS if peer not in measured]
    if missing:
        verdict += f" (over {', '.join(measured)}; {', '.join(missing)} not measured)"
    return f"| {label} | {'; '.join(shown)} | {verdict} |"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.2f} {unit}" if abs(value) < 10 else f"{value:,.0f} {unit}"


def goals_table(config: Config, rows: Sequence[Row]) -> list[str]:
    """The goals of issue 26 that this run measured, met or not."""
    lines = ["| goal | measured (medians) | met |", "|---|---|---|"]
    through = matching(rows, family="throughput")
    # The throughput family's cells (none when the run did not measure it).
    cells = [(p, size) for p in ("produce", "consume") for size, _ in config.sizes if through]
    for phase, size in cells:
        match = {"phase": phase, "record_bytes": size}
        lines.append(
            _goal(
                f"{phase} {_size(size)}: MB/s ahead of both peers (ratio to direct)",
                lambda r, m=match: ratio(through, "mb_per_s", r, **m),
                higher=True,
                unit="x",
            )
        )
    if through:
        lines.append(
            _goal(
                "1 record/request: requests/s ahead of both peers (ratio to direct)",
                lambda r: ratio(through, "records_per_s", r, phase="per-request"),
                higher=True,
                unit="x",
            )
        )
    for phase, size in cells:
        match = {"phase": phase, "record_bytes": size}
        lines.append(
            _goal(
                f"{phase} {_size(size)}: CPU per GiB no more than either peer",
                lambda r, m=match: median(through, "cpu_s_per_gib", route=r, **m),
                higher=False,
                unit="s/GiB",
            )
        )
    if through:
        lines.append(
            _goal(
                "1 record/request: CPU per request no more than either peer",
                lambda r: median(through, "cpu_us_per_record", route=r, phase="per-request"),
                higher=False,
                unit="µs",
            )
        )
    latency = matching(rows, family="latency")
    for fraction in config.load_fractions if latency else ():
        for key, name in (("ack_p50_ms", "p50"), ("ack_p99_ms", "p99")):
            lines.append(
                _goal(
                    f"{fraction:.0%} load: added ack {name} no worse than the best peer's",
                    lambda r, k=key, f=fraction: added(latency, k, r, load_fraction=f),
                    higher=False,
                    unit="ms",
                )
            )
    fanin = matching(rows, family="fanin")
    for wait_ms in config.fanin_waits_ms if fanin else ():
        for n in config.fanin_ns:
            match = {"n": n, "max_wait_ms": wait_ms}
            where = f"N = {n:,}, fetch.max.wait.ms {wait_ms:,}"
            lines.append(
                _goal(
                    f"{where}: upstream Fetch/s at most 1 % of the lowest peer's",
                    lambda r, m=match: median(fanin, "upstream_fetch_per_s", route=r, **m),
                    higher=False,
                    unit="/s",
                    factor=FANIN_SHARE,
                )
            )
            lines.append(
                _goal(
                    f"{where}: RSS per idle consumer no more than the lowest peer's",
                    lambda r, m=match: median(fanin, "rss_per_consumer_kib", route=r, **m),
                    higher=False,
                    unit="KiB",
                )
            )
    return lines if len(lines) > 2 else []
