# Strategy: bench.peers found the peers ahead on added acknowledgement latency (open loop, three
# brokers) while purgatory-proxy spends the least CPU per request. This tool looks at each
# forwarder while it carries that load, with tools that read every language the same way:
#
#   scheduling  `perf sched record` of the whole machine for the window, then `perf sched
#               timehist`: every time one of the forwarder's threads was woken, how long it
#               waited for a core (sch delay) before it ran. A one-thread proxy makes every
#               request in flight wait through each such delay; a pool of threads does not.
#   on-CPU      where the forwarder's own CPU goes: py-spy (Python frames) for purgatory-proxy,
#               JFR execution samples for Kroxylicious, `perf record` (Go has symbols) for
#               kafka-proxy; the top self frames of each.
#
# It is a diagnosis tool (`python -m bench.peers.profiling`, about 4 minutes on the project's
# machine), not a benchmark: its numbers go into the hand-written notes of docs/benchmarks.md.
"""Profile each forwarder of bench.peers under the latency family's 50 % open-loop load."""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.peers.kafka_proxy import find_kafka_proxy
from bench.peers.kroxylicious import find_kroxylicious
from bench.peers.load import calibrate, latency
from bench.peers.routes import Availability, Route, running_route
from bench.throughput.profiling import fold, parse_raw
from testbed.kafka_cluster import KafkaCluster, running_kafka

__all__ = ["main", "parse_timehist"]


@dataclass
class Window:
    """One forwarder's numbers over one open-loop window."""

    route: str
    ack_ms: dict[str, float | None]
    cpu_s: float | None
    threads_ran: int
    wakeups: int
    delay_ms: list[float]
    top: list[tuple[str, float]]


@contextlib.contextmanager
def _process(command: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A profiler running beside the load, stopped with SIGINT (which makes each write out)."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def _tids(pid: int) -> set[int]:
    return {thread.id for thread in psutil.Process(pid).threads()}


_TIMEHIST_ROW = re.compile(
    r"^\s*[\d.]+\s+\[\d+\]\s+(?P<task>.+?)\s+[\d.]+\s+(?P<sch>[\d.]+)\s+[\d.]+\s*$"
)


def parse_timehist(text: str, tids: set[int]) -> tuple[list[float], int]:
    """From `perf sched timehist` output: the scheduling delays (ms) of ``tids``' wake-ups,
    and how many of those threads ran (a row is one switch-out: task[tid/pid] wait, sch
    delay, run time)."""
    delays: list[float] = []
    ran: set[int] = set()
    for line in text.splitlines():
        match = _TIMEHIST_ROW.match(line)
        if match is None:
            continue
        ids = re.search(r"\[(\d+)(?:/(\d+))?\]$", match["task"])
        if ids is None or int(ids[1]) not in tids:
            continue
        ran.add(int(ids[1]))
        delays.append(float(match["sch"]))
    return delays, len(ran)


def _sched_delays(data: Path, tids: set[int]) -> tuple[list[float], int]:
    text = subprocess.run(
        ["perf", "sched", "timehist", "-i", str(data)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return parse_timehist(text, tids)


def _top_python(raw: Path, n: int) -> list[tuple[str, float]]:
    profile, _ = parse_raw(raw.read_text())
    self_frames, _ = fold(profile)
    total = profile.total or 1
    return [(frame, n_samples / total) for frame, n_samples in self_frames[:n]]


def _top_jfr(recording: Path, n: int) -> list[tuple[str, float]]:
    text = subprocess.run(
        [shutil.which("jfr") or "jfr", "print", "--events", "jdk.ExecutionSample",
         "--stack-depth", "1", str(recording)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    frames = collections.Counter(
        m.group(1).strip() for m in re.finditer(r"stackTrace = \[\s*\n\s*(.+?)\s+line:", text)
    )
    total = sum(frames.values()) or 1
    return [(frame, count / total) for frame, count in frames.most_common(n)]


def _top_perf(data: Path, n: int) -> list[tuple[str, float]]:
    text = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "symbol",
         "--percent-limit", "0.5"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = re.findall(r"^\s+([\d.]+)%\s+\[[.k]\]\s+(.+?)\s*$", text, re.MULTILINE)
    return [(symbol, float(percent) / 100) for percent, symbol in rows[:n]]


@contextlib.contextmanager
def _on_cpu(route: Route, work: Path) -> Iterator[Path]:
    """Sample ``route``'s forwarder on CPU for the block; yields where its samples land."""
    pid = route.forwarder_pid
    assert pid is not None
    if route.name in ("purgatory-proxy", "baseline"):
        out = work / "py-spy.txt"
        spy = str(Path(sys.executable).parent / "py-spy")
        command = [spy, "record", "--nonblocking", "--format", "raw", "--rate", "500",
                   "-o", str(out), "--pid", str(pid)]  # fmt: skip
        with _process(command):
            yield out
    elif route.name == "kroxylicious":
        out = work / "kroxylicious.jfr"
        jcmd = shutil.which("jcmd") or "jcmd"
        subprocess.run([jcmd, str(pid), "JFR.start", "name=peers", "settings=profile",
                        f"filename={out}"], check=True, capture_output=True)  # fmt: skip
        try:
            yield out
        finally:
            subprocess.run([jcmd, str(pid), "JFR.stop", "name=peers"], check=True,
                           capture_output=True)  # fmt: skip
    else:
        out = work / "kafka-proxy.perf"
        with _process(["perf", "record", "-F", "499", "-g", "-p", str(pid), "-o", str(out)]):
            yield out


def _top(route: str, samples: Path, n: int) -> list[tuple[str, float]]:
    if route in ("purgatory-proxy", "baseline"):
        return _top_python(samples, n)
    if route == "kroxylicious":
        return _top_jfr(samples, n)
    return _top_perf(samples, n)


def profile_window(
    cluster_route: Route,
    cluster: KafkaCluster,
    rate: float,
    seconds: float,
    work: Path,
    label: str,
    nice: int | None = None,
) -> Window:
    """One open-loop window at ``rate`` through ``cluster_route``, profiled, reported as
    ``label``; with ``nice``, the forwarder's threads run at that niceness (the scheduling
    experiment)."""
    work.mkdir(parents=True, exist_ok=True)
    sched = work / "sched.data"
    pid = cluster_route.forwarder_pid
    assert pid is not None
    tids = _tids(pid)
    if nice is not None:
        for tid in tids:  # every thread: a JVM's and Go's threads are scheduled one by one
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    # Two windows: the latency and the waits with only the kernel's scheduler events
    # recorded, then the on-CPU samples (a sampler attached costs the forwarder time).
    with _process(["perf", "sched", "record", "-o", str(sched)]):
        (row,) = latency(
            cluster, cluster_route, fraction=1.0, rate=rate, duration_s=seconds, warmup_s=2.0
        )
    with _on_cpu(cluster_route, work) as samples:
        latency(cluster, cluster_route, fraction=1.0, rate=rate, duration_s=seconds, warmup_s=2.0)
    tids |= _tids(pid)
    delays, ran = _sched_delays(sched, tids)
    return Window(
        label,
        {k: row[k] for k in ("ack_p50_ms", "ack_p99_ms", "ack_p999_ms")},
        row["cpu_s"],
        ran,
        len(delays),
        delays,
        _top(cluster_route.name, samples, 12),
    )


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def render(
    windows: list[Window], direct: dict[str, float | None], rate: float, seconds: float
) -> str:
    lines = [
        f"Open loop at {rate:,.0f} records/s (50 % of direct's closed-loop 1 KiB rate), "
        f"{seconds:g} s per forwarder, three brokers, acks=all.",
        "",
        "| route | ack p50 ms | p99 ms | p99.9 ms | CPU s | threads that ran | wake-ups "
        "| sched delay p50 / p99 / max ms | wake-ups delayed > 1 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
        f"| direct | {direct['ack_p50_ms']} | {direct['ack_p99_ms']} | {direct['ack_p999_ms']} "
        "| - | - | - | - | - |",
    ]
    for w in windows:
        late = sum(1 for d in w.delay_ms if d > 1.0)
        lines.append(
            f"| {w.route} | {w.ack_ms['ack_p50_ms']} | {w.ack_ms['ack_p99_ms']} "
            f"| {w.ack_ms['ack_p999_ms']} | {w.cpu_s:.2f} | {w.threads_ran} | {w.wakeups:,} "
            f"| {_quantile(w.delay_ms, 0.5):.3f} / {_quantile(w.delay_ms, 0.99):.3f} / "
            f"{max(w.delay_ms, default=float('nan')):.2f} | {late:,} |"
        )
    for w in windows:
        lines += ["", f"{w.route}: top self frames (share of its on-CPU samples)", ""]
        lines += [f"- {share:.1%} {frame}" for frame, share in w.top]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0, help="open-loop window per route")
    parser.add_argument("--kafka-proxy-bin", metavar="PATH", help="kafka-proxy binary")
    parser.add_argument("--kroxylicious-dist", metavar="DIR", help="Kroxylicious distribution")
    parser.add_argument("--kroxylicious-java-home", metavar="DIR", help="its JDK")
    parser.add_argument("--keep", type=Path, help="keep the raw profiles in this directory")
    parser.add_argument(
        "--nice",
        type=int,
        help="run each forwarder's threads at this niceness (negative: ahead of the brokers "
        "and the load generator), to test whether waiting for a core is what it adds",
    )
    parser.add_argument(
        "--routes",
        default="purgatory-proxy,kroxylicious,kafka-proxy",
        help="comma-separated forwarders to profile",
    )
    parser.add_argument(
        "--proxy-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a PURGATORY_PROXY_* setting: purgatory-proxy is profiled a second time with it",
    )
    args = parser.parse_args(argv)
    proxy_env = dict(item.split("=", 1) for item in args.proxy_env)
    available = Availability(
        find_kafka_proxy(args.kafka_proxy_bin),
        find_kroxylicious(args.kroxylicious_dist, args.kroxylicious_java_home),
    )
    work = args.keep or Path(tempfile.mkdtemp(prefix="peers-profile-"))
    work.mkdir(parents=True, exist_ok=True)
    windows = []
    with running_kafka(3) as cluster:
        with running_route("direct", cluster, available) as direct:
            rate = 0.5 * calibrate(cluster, direct, 100_000)
            (direct_row,) = latency(cluster, direct, fraction=1.0, rate=rate,
                                    duration_s=args.seconds, warmup_s=2.0)  # fmt: skip
        runs: list[tuple[str, dict[str, str] | None]] = []
        for name in args.routes.split(","):
            runs.append((name, None))
            if name == "purgatory-proxy" and proxy_env:
                runs.append((name, proxy_env))  # the variant, right after the plain proxy
        for name, env in runs:
            if available.missing(name):
                print(f"{name}: not measured: {available.missing(name)}", file=sys.stderr)
                continue
            label = name if env is None else f"{name} ({', '.join(args.proxy_env)})"
            with running_route(name, cluster, available, proxy_env=env) as route:
                where = work / (name if env is None else f"{name}-variant")
                windows.append(
                    profile_window(route, cluster, rate, args.seconds, where, label, args.nice)
                )
                print(f"{label}: done", file=sys.stderr)
    print(render(windows, direct_row, rate, args.seconds))
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
