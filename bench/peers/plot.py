# Strategy: one PNG per family, each forwarder in the same colour in every plot. Where direct
# is the yardstick (throughput, latency, fan-in, TLS) the bars are the per-round ratio to
# direct (bench/peers/stats.ratio), with a line at 1; where direct has nothing to weigh (a
# forwarder's CPU and memory) the bars are the forwarders' own values. A route without a value
# leaves a gap, so a missing peer is visible as such.
"""The plots of bench.peers's section (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.peers.config import Config
from bench.peers.load import Row
from bench.peers.routes import FORWARDERS
from bench.peers.stats import median, ratio

__all__ = ["COLOURS", "plot_all"]

#: One colour per forwarder, the same in every plot.
COLOURS = {
    "purgatory-proxy": "tab:blue",
    "baseline": "tab:cyan",
    "kroxylicious": "tab:orange",
    "kafka-proxy": "tab:green",
}

#: One group of bars: its x label, the row key it shows, and the rows' match.
Group = tuple[str, str, dict[str, Any]]


def _size(record_bytes: int) -> str:
    return f"{record_bytes // 1024} KiB" if record_bytes >= 1024 else f"{record_bytes} B"


def _bars(ax: Any, rows: Sequence[Row], groups: Sequence[Group], *, to_direct: bool) -> None:
    """One bar per forwarder the run measured in each group: its ratio to direct, or its
    median value."""
    measured = {row.get("route") for row in rows}
    forwarders = [route for route in FORWARDERS if route in measured] or list(FORWARDERS)
    width = 0.8 / len(forwarders)
    for i, route in enumerate(forwarders):
        xs, ys = [], []
        for j, (_, key, match) in enumerate(groups):
            if to_direct:
                value = ratio(rows, key, route, **match)
            else:
                value = median(rows, key, route=route, **match)
            if value is not None:
                xs.append(j + (i - (len(forwarders) - 1) / 2) * width)
                ys.append(value)
        ax.bar(xs, ys, width, label=route, color=COLOURS[route])
    ax.set_xticks(range(len(groups)), [label for label, _, _ in groups], fontsize=8)
    if to_direct:
        ax.axhline(1.0, color="black", linewidth=0.8)
    ax.legend(fontsize=7)


def _keyed(cells: Sequence[tuple[str, dict[str, Any]]], key: str) -> list[Group]:
    """The same (label, match) cells showing ``key``."""
    return [(label, key, match) for label, match in cells]


def _figure(panels: int) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.2), squeeze=False)
    return fig, list(axes[0])


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _throughput(config: Config, rows: Sequence[Row], path: Path) -> Path:
    rows = [row for row in rows if row["family"] == "throughput"]
    fig, (left, right) = _figure(2)
    cells = [
        (f"{phase}\n{_size(size)}", {"phase": phase, "record_bytes": size})
        for phase in ("produce", "consume")
        for size, _ in config.sizes
    ]
    cells.append(("1 record/\nrequest", {"phase": "per-request"}))
    _bars(left, rows, _keyed(cells, "records_per_s"), to_direct=True)
    left.set_title("throughput, ratio to direct (higher is better)")
    _bars(right, rows, _keyed(cells, "cpu_us_per_record"), to_direct=False)
    right.set_title("forwarder CPU µs per record (lower is better)")
    right.set_yscale("log")
    return _save(fig, path)


def _latency(config: Config, rows: Sequence[Row], path: Path) -> Path:
    rows = [row for row in rows if row["family"] == "latency"]
    fig, axes = _figure(len(config.load_fractions))
    for ax, fraction in zip(axes, config.load_fractions, strict=True):
        groups: list[Group] = [
            (label, f"ack_{key}_ms", {"load_fraction": fraction})
            for label, key in (("p50", "p50"), ("p99", "p99"), ("p99.9", "p999"))
        ]
        _bars(ax, rows, groups, to_direct=True)
        ax.set_title(f"ack latency at {fraction:.0%} load, ratio to direct (lower is better)")
    return _save(fig, path)


def _memory(config: Config, rows: Sequence[Row], path: Path) -> Path:
    rows = [row for row in rows if row["family"] == "memory"]
    fig, (left, right) = _figure(2)
    _bars(left, rows, [("idle", "rss_idle_mb", {})], to_direct=False)
    left.set_title("forwarder RSS idle, MB")
    per_1000: list[Group] = [("per 1,000 idle connections", "rss_per_1000_mb", {})]
    _bars(right, rows, per_1000, to_direct=False)
    right.set_title("forwarder RSS per 1,000 idle connections, MB")
    return _save(fig, path)


def _fanin(config: Config, rows: Sequence[Row], path: Path) -> Path:
    rows = [row for row in rows if row["family"] == "fanin"]
    cells = [
        (f"N={n:,}\nwait {wait:,} ms", {"n": n, "max_wait_ms": wait})
        for wait in config.fanin_waits_ms
        for n in config.fanin_ns
    ]
    fig, (fetches, broker, delivery) = _figure(3)
    _bars(fetches, rows, _keyed(cells, "upstream_fetch_per_s"), to_direct=True)
    fetches.set_title("upstream Fetch/s, ratio to direct")
    fetches.set_yscale("log")
    _bars(broker, rows, _keyed(cells, "broker_cpu_pct"), to_direct=True)
    broker.set_title("broker CPU, ratio to direct")
    _bars(delivery, rows, _keyed(cells, "delivery_p99_ms"), to_direct=True)
    delivery.set_title("delivery p99, ratio to direct")
    return _save(fig, path)


def _tls(config: Config, rows: Sequence[Row], path: Path) -> Path:
    rows = [row for row in rows if row["family"] == "tls"]
    cells = [
        (f"{phase}\n{mode}", {"phase": phase, "mode": mode})
        for phase in ("produce", "consume")
        for mode in ("plaintext", "tls")
    ]
    fig, (rates, cpu) = _figure(2)
    _bars(rates, rows, _keyed(cells, "mb_per_s"), to_direct=True)
    rates.set_title("1 KiB MB/s, ratio to direct in the same mode")
    _bars(cpu, rows, _keyed(cells, "cpu_s_per_gib"), to_direct=False)
    cpu.set_title("forwarder CPU s per GiB")
    return _save(fig, path)


def plot_all(config: Config, rows: Sequence[Row], img_dir: Path) -> dict[str, Path]:
    """Write a plot per family the run measured into ``img_dir``; name -> file."""
    measured = {row["family"] for row in rows}
    plots = {
        "throughput": _throughput,
        "latency": _latency,
        "memory": _memory,
        "fanin": _fanin,
        "tls": _tls,
    }
    return {
        name: plot(config, rows, img_dir / f"peers-{name}.png")
        for name, plot in plots.items()
        if name in measured
    }
