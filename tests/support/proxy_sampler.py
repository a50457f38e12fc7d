# Strategy: a long run's question is "does anything the proxy holds grow?", so a thread scrapes
# the proxy's /metrics every few seconds for the figures that would show a leak: its resident
# memory and open descriptors (prometheus_client's process collector), the memory pool's used
# bytes, the operations held in its purgatories (fetches and produces waiting), and its client
# and upstream connections. Each sample is kept with its time; `quarters` summarises a run by
# quarter, the first against the last being the flatness check, and `plot` draws the run with
# its faults marked (matplotlib, Agg).
"""Sample the proxy's memory, descriptors, pool and held operations over a long run."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker_faults import ProxyHttp

__all__ = ["FIGURES", "Sample", "Sampler", "plot", "quarters"]

#: What is sampled: label -> (metric name prefix, scale, unit).
FIGURES: dict[str, tuple[str, float, str]] = {
    "RSS": ("process_resident_memory_bytes", 1 / 2**20, "MiB"),
    "open descriptors": ("process_open_fds", 1.0, ""),
    "memory pool used": ("purgatory_proxy_memory_pool_used_bytes", 1 / 2**20, "MiB"),
    "held operations": ("purgatory_proxy_purgatory_pending", 1.0, ""),
    "client connections": ("purgatory_proxy_connections_open", 1.0, ""),
    "upstream connections": ("purgatory_proxy_upstream_connections_open", 1.0, ""),
}


@dataclass(frozen=True)
class Sample:
    at_s: float
    values: dict[str, float]


def _figures(scraped: dict[str, float]) -> dict[str, float]:
    """Each figure: the sum of every sample whose name (labels aside) is its metric."""
    found = {}
    for label, (metric, scale, _) in FIGURES.items():
        total = [value for key, value in scraped.items() if key.split("{")[0] == metric]
        if total:
            found[label] = sum(total) * scale
    return found


class Sampler(threading.Thread):
    """Scrape ``http`` every ``interval_s`` into ``samples`` until ``stop`` is set; a scrape
    that is not answered is counted in ``misses``."""

    def __init__(self, http: ProxyHttp, interval_s: float = 5.0) -> None:
        super().__init__(name="proxy-sampler", daemon=True)
        self.http, self.interval_s = http, interval_s
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.misses = 0

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            try:
                self.samples.append(Sample(time.time(), _figures(self.http.scrape())))
            except AssertionError:  # /metrics did not answer 200 this once
                self.misses += 1


def quarters(samples: Sequence[Sample], label: str) -> list[tuple[float, float]]:
    """(median, max) of ``label`` in each quarter of the run."""
    found = []
    for i in range(4):
        part = samples[len(samples) * i // 4 : len(samples) * (i + 1) // 4]
        values = [s.values[label] for s in part if label in s.values]
        found.append((statistics.median(values), max(values)) if values else (0.0, 0.0))
    return found


def plot(samples: Sequence[Sample], faults_s: Sequence[float], path: Path, title: str) -> None:
    """One panel per figure against minutes into the run, a dotted line at each fault."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = samples[0].at_s
    labels = [label for label in FIGURES if any(label in s.values for s in samples)]
    fig, axes = plt.subplots(len(labels), 1, figsize=(10, 1.9 * len(labels)), sharex=True)
    for axis, label in zip(axes, labels, strict=True):
        unit = FIGURES[label][2]
        points = [((s.at_s - start) / 60, s.values[label]) for s in samples if label in s.values]
        axis.plot([p[0] for p in points], [p[1] for p in points], lw=1)
        for fault_s in faults_s:
            axis.axvline((fault_s - start) / 60, color="grey", ls=":", lw=0.6)
        axis.set_ylabel(f"{label} ({unit})" if unit else label, fontsize=8)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes (dotted: a broker bounced)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
