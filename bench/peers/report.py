# Strategy: every table of bench.peers's section is computed from the run's rows alone (so
# `--render` of a saved run gives the same text), one table per family, one line per route:
#
#   value   the median over rounds of what the route measured in each round;
#   ratio   the median over rounds of (the route's value / direct's value in the same round),
#           written "0.93x" beside a forwarder's value: the machine's drift between rounds
#           cancels, as each ratio compares two measurements minutes apart;
#   added   for latencies, the median over rounds of (route - direct) in the same round.
#
# A route whose every row of a family is an error ("not measured: ...", "failed to start: ...")
# shows that reason in its line instead of numbers.
"""Tables of bench.peers's results, from its rows."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.peers.config import Config
from bench.peers.goals import goals_table
from bench.peers.load import Row
from bench.peers.plot import plot_all
from bench.peers.routes import FORWARDERS, ROUTES
from bench.peers.stats import added, by_round, matching, median, ratio, why_not
from testbed.report import machine_line

__all__ = ["markdown", "summary", "tables"]


def _size(record_bytes: int) -> str:
    return f"{record_bytes // 1024} KiB" if record_bytes >= 1024 else f"{record_bytes} B"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _with_ratio(value: float | None, share: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return _fmt(value, digits) + ("" if share is None else f" ({share:.2f}x)")


def _routes_in(rows: Sequence[Row], family: str, candidates: Sequence[str] = ROUTES) -> list[str]:
    present = {row["route"] for row in rows if row["family"] == family}
    return [route for route in candidates if route in present]


def _line(route: str, cells: Sequence[str], reason: str | None) -> str:
    if reason is not None:
        cells = [reason, *["-"] * (len(cells) - 1)]
    return f"| {route} | " + " | ".join(cells) + " |"


def _header(first: str, columns: Sequence[str]) -> list[str]:
    """A table's header and alignment lines; ``first`` may name several label columns
    ("load | route"), which are left-aligned."""
    labels = first.count("|") + 1
    return [
        f"| {first} | " + " | ".join(columns) + " |",
        "|" + "---|" * labels + "---:|" * len(columns),
    ]


def throughput_table(config: Config, rows: Sequence[Row]) -> list[str]:
    """MB/s per phase and record size, requests/s one record per request; ratios to direct."""
    rows = matching(rows, family="throughput")
    columns = [(phase, size) for phase in ("produce", "consume") for size, _ in config.sizes]
    headers = [f"{phase} {_size(size)} MB/s" for phase, size in columns]
    headers.append(f"{_size(config.per_request[0])}, 1 record/request: requests/s")
    lines = _header("route", headers)
    for route in _routes_in(rows, "throughput"):
        cells = [
            _with_ratio(
                median(rows, "mb_per_s", route=route, phase=phase, record_bytes=size),
                None
                if route == "direct"
                else ratio(rows, "mb_per_s", route, phase=phase, record_bytes=size),
            )
            for phase, size in columns
        ]
        cells.append(
            _with_ratio(
                median(rows, "records_per_s", route=route, phase="per-request"),
                None
                if route == "direct"
                else ratio(rows, "records_per_s", route, phase="per-request"),
                0,
            )
        )
        lines.append(_line(route, cells, why_not(rows, route)))
    return lines


def cost_table(config: Config, rows: Sequence[Row]) -> list[str]:
    """Forwarder CPU seconds per GiB forwarded, CPU µs per request, peak RSS."""
    rows = matching(rows, family="throughput")
    columns = [(phase, size) for phase in ("produce", "consume") for size, _ in config.sizes]
    headers = [f"CPU s/GiB {phase} {_size(size)}" for phase, size in columns]
    headers += ["CPU µs per request (1 record/request)", "peak RSS MB"]
    lines = _header("forwarder", headers)
    for route in _routes_in(rows, "throughput", FORWARDERS):
        cells = [
            _fmt(median(rows, "cpu_s_per_gib", route=route, phase=phase, record_bytes=size))
            for phase, size in columns
        ]
        cells.append(_fmt(median(rows, "cpu_us_per_record", route=route, phase="per-request"), 0))
        peaks = [
            row["peak_rss_mb"] for row in matching(rows, route=route) if row.get("peak_rss_mb")
        ]
        cells.append(_fmt(max(peaks) if peaks else None, 0))
        lines.append(_line(route, cells, why_not(rows, route)))
    return lines


def latency_table(config: Config, rows: Sequence[Row]) -> list[str]:
    """Per offered load: ack p50 / p99 / p99.9, and what each forwarder adds to direct."""
    rows = matching(rows, family="latency")
    headers = [
        "offered records/s",
        "achieved records/s",
        "ack p50 ms",
        "ack p99 ms",
        "ack p99.9 ms",
        "added p50 ms",
        "added p99 ms",
        "added p99.9 ms",
    ]
    lines = _header("load | route", headers)
    for fraction in config.load_fractions:
        match = {"load_fraction": fraction}
        for route in _routes_in(rows, "latency"):
            cells = [
                _fmt(median(rows, "target_rate", route=route, **match), 0),
                _fmt(median(rows, "achieved_rate", route=route, **match), 0),
            ]
            cells += [
                _fmt(median(rows, f"ack_{p}_ms", route=route, **match), 2)
                for p in ("p50", "p99", "p999")
            ]
            cells += [
                "-" if route == "direct" else _signed(added(rows, f"ack_{p}_ms", route, **match))
                for p in ("p50", "p99", "p999")
            ]
            lines.append(_line(f"{fraction:.0%} | {route}", cells, why_not(rows, route, **match)))
    return lines


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def memory_table(config: Config, rows: Sequence[Row]) -> list[str]:
    rows = matching(rows, family="memory")
    n = f"{config.idle_connections:,}"
    headers = [
        "RSS idle MB",
        f"RSS holding {n} idle connections MB",
        "RSS per 1,000 idle connections MB",
        "descriptors per connection",
        "connections up",
    ]
    lines = _header("forwarder", headers)
    for route in _routes_in(rows, "memory", FORWARDERS):
        cells = [
            _fmt(median(rows, "rss_idle_mb", route=route)),
            _fmt(median(rows, "rss_held_mb", route=route)),
            _fmt(median(rows, "rss_per_1000_mb", route=route)),
            _fmt(median(rows, "fds_per_connection", route=route), 2),
            _fmt(median(rows, "connections_up", route=route), 0) + f" / {n}",
        ]
        lines.append(_line(route, cells, why_not(rows, route)))
    return lines


def fanin_table(config: Config, rows: Sequence[Row]) -> list[str]:
    rows = matching(rows, family="fanin")
    headers = [
        "consumers up",
        "upstream Fetch/s",
        "/ direct",
        "broker CPU %",
        "forwarder CPU %",
        "delivery p50 / p99 ms",
        "descriptors per consumer",
        "forwarder RSS held MB",
        "missed deliveries",
    ]
    lines = _header("fetch.max.wait.ms | N | route", headers)
    for wait_ms in config.fanin_waits_ms:
        for n in config.fanin_ns:
            match = {"n": n, "max_wait_ms": wait_ms}
            for route in _routes_in(rows, "fanin"):
                share = (
                    None
                    if route == "direct"
                    else ratio(rows, "upstream_fetch_per_s", route, **match)
                )
                cells = [
                    _fmt(median(rows, "up", route=route, **match), 0) + f" / {n:,}",
                    _fmt(median(rows, "upstream_fetch_per_s", route=route, **match)),
                    "-" if share is None else f"{100 * share:.1f} %",
                    _fmt(median(rows, "broker_cpu_pct", route=route, **match), 0),
                    _fmt(median(rows, "proxy_cpu_pct", route=route, **match), 0),
                    _fmt(median(rows, "delivery_p50_ms", route=route, **match))
                    + " / "
                    + _fmt(median(rows, "delivery_p99_ms", route=route, **match)),
                    _fmt(median(rows, "fds_per_consumer", route=route, **match), 2),
                    _fmt(median(rows, "rss_held_mb", route=route, **match), 0),
                    _fmt(median(rows, "missed", route=route, **match), 0),
                ]
                label = f"{wait_ms:,} | {n:,} | {route}"
                lines.append(_line(label, cells, why_not(rows, route, **match)))
    return lines


def tls_table(config: Config, rows: Sequence[Row]) -> list[str]:
    """Per route: plaintext and TLS MB/s, their ratio (per round), forwarder CPU s/GiB."""
    rows = matching(rows, family="tls")
    headers = []
    for phase in ("produce", "consume"):
        headers += [
            f"{phase} MB/s plaintext",
            f"{phase} MB/s TLS",
            "TLS / plaintext",
            f"{phase} CPU s/GiB plaintext → TLS",
        ]
    lines = _header("route", headers)
    for route in _routes_in(rows, "tls"):
        cells = []
        for phase in ("produce", "consume"):
            plain = by_round(rows, "mb_per_s", route=route, phase=phase, mode="plaintext")
            tls = by_round(rows, "mb_per_s", route=route, phase=phase, mode="tls")
            shares = [tls[r] / plain[r] for r in tls if plain.get(r)]
            cpu = [
                _fmt(median(rows, "cpu_s_per_gib", route=route, phase=phase, mode=mode))
                for mode in ("plaintext", "tls")
            ]
            cells += [
                _fmt(median(rows, "mb_per_s", route=route, phase=phase, mode="plaintext")),
                _fmt(median(rows, "mb_per_s", route=route, phase=phase, mode="tls")),
                f"{statistics.median(shares):.2f}" if shares else "-",
                "-" if route == "direct" else " → ".join(cpu),
            ]
        lines.append(_line(route, cells, why_not(rows, route)))
    return lines


_TABLES: dict[str, tuple[str, Callable[[Config, Sequence[Row]], list[str]]]] = {
    "throughput": ("Throughput (one broker)", throughput_table),
    "cost": ("Forwarder cost (from the throughput cells)", cost_table),
    "latency": ("Acknowledgement latency, open loop (three brokers)", latency_table),
    "memory": ("Memory", memory_table),
    "fanin": ("Idle fan-in", fanin_table),
    "tls": ("TLS on both sides against plaintext", tls_table),
    "goals": (
        "Goals against this run (each row states one: ahead of both peers, or no more CPU than "
        "either)",
        goals_table,
    ),
}


def tables(config: Config, rows: Sequence[Row]) -> list[tuple[str, list[str]]]:
    """(title, table lines) for every family the run measured, in the report's order."""
    measured = {row["family"] for row in rows}
    out = []
    for name, (title, table) in _TABLES.items():
        family = "throughput" if name == "cost" else name
        # The goals span families: shown when any goal was measured.
        lines = table(config, rows) if name == "goals" or family in measured else []
        if lines:
            out.append((title, lines))
    return out


def summary(config: Config, rows: Sequence[Row]) -> str:
    """Every table, titled, as printed at the end of a run (and checked by the smoke test)."""
    return "\n\n".join(f"{title}:\n\n" + "\n".join(lines) for title, lines in tables(config, rows))


def _setup(config: Config) -> str:
    sizes = ", ".join(f"{_size(size)} x {count:,}" for size, count in config.sizes)
    loads = ", ".join(f"{fraction:.0%}" for fraction in config.load_fractions)
    ns = ", ".join(f"{n:,}" for n in config.fanin_ns)
    waits = ", ".join(f"{w:,}" for w in config.fanin_waits_ms)
    return (
        f"Setup: rounds: {config.rounds} of each family, {config.fanin_rounds} of the fan-in; "
        "within a round the routes run back to back, the first route turning by one each "
        "round; values are medians over rounds and a forwarder's `(0.93x)` is the median of its "
        "per-round ratio to direct. Throughput: librdkafka (confluent-kafka) produces N records "
        f"(acks=all, linger 5 ms; {sizes}) to a fresh one-partition topic, then reads them "
        f"back from offset 0; {config.per_request[1]:,} records of "
        f"{_size(config.per_request[0])} one per Produce request price the request path. Each "
        f"fresh forwarder first carries {config.warmup_records:,} records of 1 KiB, unmeasured. "
        "Forwarder CPU is its process's user + system time (psutil). Latency: three brokers, "
        f"topic RF 3 with min ISR 2, 1 KiB records offered open loop at {loads} of direct's "
        f"closed-loop rate for {config.latency_duration_s:g} s "
        f"({config.latency_warmup_s:g} s warm-up unrecorded), latency from each record's due "
        "time (no coordinated omission). Memory: a fresh forwarder after one metadata request, "
        f"then holding {config.idle_connections:,} idle client connections (TCP + ApiVersions). "
        f"Fan-in: N = {ns} protocol-level consumers (KIP-227 sessions, fetch.max.wait.ms "
        f"{waits}) poll an idle topic through a fresh forwarder for {config.fanin_window_s:g} s; "
        "upstream Fetch/s is Kafka's own FetchConsumer meter (JMX) over the window; "
        f"{config.fanin_probes} probe records time delivery to every consumer. TLS: "
        f"{config.tls_records:,} records of 1 KiB with TLS client → forwarder → Kafka's SSL "
        "listener (testbed/certs.py's CA), against the same with neither."
    )


def markdown(
    config: Config,
    rows: Sequence[Row],
    versions: dict[str, str],
    notes: Sequence[str],
    command: str,
    wall_s: float,
    img_dir: Path,
) -> str:
    """The docs/benchmarks.md section, with a plot per family written into ``img_dir``."""
    images = plot_all(config, rows, img_dir)
    parts = [
        "## Side by side with Kroxylicious and kafka-proxy, against Apache Kafka (`bench.peers`)",
        "",
        f"{machine_line()} `{command}`, {wall_s / 60:.1f} min wall. The broker, the forwarder "
        "and the clients share this machine's cores: compare the ratios of one run.",
        "",
        "Versions: " + "; ".join(f"{name} {value}" for name, value in versions.items()) + ".",
        "",
        _setup(config),
        "",
    ]
    for title, lines in tables(config, rows):
        parts += [f"**{title}**", "", *lines, ""]
    for name, path in images.items():
        parts += [f"![{name}](img/{path.name})", ""]
    if notes:
        parts += ["Notes:", "", *[f"- {note}." for note in notes], ""]
    return "\n".join(parts)
