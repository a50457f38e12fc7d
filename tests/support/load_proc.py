# Strategy: what a reliability scenario asserts about the proxy process is read from the
# outside, the way an operator would: the kernel's view of its memory and descriptors in
# /proc/PID, and its own sensors on /metrics. Nothing here talks to the proxy's internals.
#
# * Peak memory is VmHWM ("high water mark" of the resident set), which the kernel keeps
#   exactly, so a spike between two samples cannot be missed. Writing "5" to
#   /proc/PID/clear_refs resets it to the current RSS (Linux >= 4.0, own processes), so a
#   scenario measures the peak of its own load phase, not of start-up.
# * The /metrics gauges (pool used, muted connections, open connections) are sampled by a
#   trio task; their maxima tell how hard the pool was pushed.
"""The proxy seen from outside: /proc/PID (RSS, peak RSS, fds) and its /metrics."""

from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass, field

import psutil
import trio
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "MetricsSampler",
    "open_fds",
    "peak_rss_bytes",
    "reset_peak_rss",
    "rss_bytes",
    "scrape",
    "sockets_to",
]

MIB = 1024 * 1024


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(f"{key} not in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    """Resident set size now (VmRSS)."""
    return _status_kib(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int) -> int:
    """Largest resident set since start or the last :func:`reset_peak_rss` (VmHWM)."""
    return _status_kib(pid, "VmHWM") * 1024


def reset_peak_rss(pid: int) -> None:
    """Make VmHWM start again from the current RSS."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def open_fds(pid: int) -> int:
    """File descriptors the process holds now."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def sockets_to(pid: int, ports: frozenset[int]) -> int:
    """TCP sockets of the process connected to one of ``ports`` on the far side."""
    return sum(
        1
        for connection in psutil.Process(pid).net_connections(kind="tcp")
        if connection.raddr and connection.raddr.port in ports
    )


def scrape(metrics_address: str) -> dict[str, float]:
    """One /metrics scrape as ``{'name{label="v",...}': value}`` (labels sorted)."""
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


@dataclass
class MetricsSampler:
    """Samples some /metrics series every ``interval_s`` and keeps each one's maximum.

    Run :meth:`run` in a nursery and cancel it; scrapes happen in a worker thread so a slow
    answer never stalls the load generators' trio loop.
    """

    address: str
    series: tuple[str, ...]
    interval_s: float = 0.1
    maxima: dict[str, float] = field(default_factory=dict)
    samples: int = 0

    async def run(self) -> None:
        while True:
            values = await trio.to_thread.run_sync(scrape, self.address)
            self.samples += 1
            for name in self.series:
                if name in values:
                    self.maxima[name] = max(self.maxima.get(name, values[name]), values[name])
            await trio.sleep(self.interval_s)
