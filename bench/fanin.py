# Strategy: issue 6's fan-in benchmark. For each N, a fresh broker, relays and proxy
# (bench/_fanin_stack.py), then two measurements in the same run (bench/_fanin_measure.py):
#
#   direct  N consumers -> relay -> broker
#   proxy   N consumers -> proxy -> relay -> broker
#
# The relay counts the Fetch requests the broker is asked in both cases, so "upstream fetches
# per second via the proxy / direct" is the fan-in ratio. N idle consumers with
# fetch.max.wait.ms=500 cost the broker about 2N fetches/s directly; a proxy that holds long
# polls in its own purgatory should cost it a handful (its per-broker watcher).
#
# Everything runs on one shared 2-core machine: the consumers' process, the relays, the
# broker and the proxy compete for it, so at large N the direct route is limited by CPU (its
# fetch rate falls short of 2N/s). The table says so by showing the consumers' own answer
# rate beside the upstream rate.
#
# Goals (issue 6), reported, never asserted: upstream fetch rate via the proxy <= 1 % of direct
# at N = 1,000; delivery p99 <= direct + 20 ms; >= 10,000 held long-polls in <= 1 GiB RSS.
"""Fan-in: N idle long-polling consumers, direct vs through purgatory-proxy.

Run ``python -m bench.fanin`` (N = 100, 1,000, 10,000; 60 s windows; about 13 minutes) or
``--quick`` (N = 100, 1,000; 5 s windows; about 1 minute), in front of a one-node Apache Kafka
(``--broker tansu``: Tansu, whose results go to their own section). ``--n``, ``--seconds`` and
``--probes`` override; ``--proxy-env KEY=VALUE`` passes settings to the proxy (for example
``PURGATORY_PROXY_FETCH__HOLD=false`` to measure plain forwarding); ``--max-wait-ms``
sets the consumers' fetch.max.wait.ms (default 500, the Java client's). Results go to the
"fanin" section of docs/benchmarks.md (another max wait: its own section) unless
``--no-write``. Every run first checks the
consumers' fetch-session and probe logic (bench/_fanin_selfcheck.py); ``--self-check`` does
only that.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import trio

from bench._fanin_consumer import DEFAULT_MAX_WAIT_MS, FetchSettings
from bench._fanin_measure import CONNECT_CONCURRENCY, Measurement, Plan, measure
from bench._fanin_selfcheck import SelfCheckFailed, run_checks
from bench._fanin_stack import (
    BROKERS,
    DESCRIPTOR_MARGIN,
    DESCRIPTORS_PER_CONSUMER,
    ROOT,
    DescriptorLimits,
    Stack,
    raise_descriptor_limit,
    running_stack,
)
from proxy.config import ConnectionsSection
from testbed.report import command_line, machine_line, publish

__all__ = ["FULL", "QUICK", "QUIET_MARGIN_S", "Config", "Run", "main", "proxy_settings", "run"]

MIB = 1 << 20
GIB = 1 << 30
ROUTES = ("direct", "proxy")
#: Goals from issue 6.
GOAL_RATIO = 0.01
GOAL_P99_SLACK_MS = 20.0
GOAL_HELD = 10_000
GOAL_RSS_BYTES = GIB
#: Issue 17: descriptors per idle consumer in the proxy (the proxy's identity).
GOAL_FDS_PER_CONSUMER = 1.2
_UPSTREAM_IDLE_KEY = "PURGATORY_PROXY_CONNECTIONS__UPSTREAM_IDLE_TIMEOUT_MS"
#: The proxy's connections.upstream_idle_timeout_ms in the benchmark unless --proxy-env says.
BENCH_UPSTREAM_IDLE_MS = 2_000
#: Past the proxy's upstream idle timeout, before the window: its closing is not instant.
QUIET_MARGIN_S = 3.0


@dataclass(frozen=True)
class Config:
    """What one run measures."""

    ns: tuple[int, ...]
    seconds: float
    probes: int
    settle_s: float
    proxy_env: tuple[tuple[str, str], ...] = ()
    routes: tuple[str, ...] = ROUTES
    #: The consumers' fetch.max.wait.ms: each idle consumer polls 1000 / max_wait_ms times a
    #: second, so N consumers ask the proxy for N * 1000 / max_wait_ms answers per second.
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    #: The broker behind the relays (a key of bench._fanin_stack.BROKERS).
    broker: str = "kafka"

    @property
    def section(self) -> str:
        """The docs/benchmarks.md section this run writes (one per max wait and broker)."""
        name = (
            "fanin" if self.max_wait_ms == DEFAULT_MAX_WAIT_MS else f"fanin-wait-{self.max_wait_ms}"
        )
        return name if self.broker == "kafka" else f"{name}-{self.broker}"


FULL = Config(ns=(100, 1_000, 10_000), seconds=60.0, probes=5, settle_s=2.0)
QUICK = Config(ns=(100, 1_000), seconds=5.0, probes=2, settle_s=1.0)


@dataclass
class Run:
    """Every measurement of a run, and what limited it."""

    config: Config
    limits: DescriptorLimits
    measurements: list[Measurement] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: os.getloadavg() when the run started and ended (the machine is shared).
    load: list[tuple[float, float, float]] = field(default_factory=list)

    def get(self, route: str, n: int) -> Measurement | None:
        for m in self.measurements:
            if m.route == route and m.n == n:
                return m
        return None


def proxy_settings(n: int, upstream_idle_ms: int = BENCH_UPSTREAM_IDLE_MS) -> dict[str, str]:
    """The proxy's settings (PURGATORY_PROXY_*) for ``n`` idle consumers."""
    # Kafka's default session cache (1,000 slots) would leave consumers beyond the first
    # thousand without a session (sessionless full fetches, still held). An operator sizing a
    # proxy for N consumers sizes the cache too, so the benchmark does.
    # A consumer's warm-up ApiVersions is forwarded on its connection's own upstream
    # connection, which stays open connections.upstream_idle_timeout_ms unused: with the
    # default 30 s, N consumers connecting within 30 s cost the proxy 2N descriptors (and
    # the relays 2N more), past a 20,000 hard limit at N = 10,000. The benchmark shortens it.
    return {
        "PURGATORY_PROXY_FETCH__SESSION_CACHE_SIZE": str(max(1000, n)),
        _UPSTREAM_IDLE_KEY: str(upstream_idle_ms),
    }


def _proxy_env(config: Config, n: int) -> dict[str, str]:
    # --proxy-env overrides any of the benchmark's settings, the default included.
    return proxy_settings(n) | dict(config.proxy_env)


def upstream_idle_s(config: Config) -> float:
    """The proxy's connections.upstream_idle_timeout_ms in this run, in seconds (0: never)."""
    value = dict(config.proxy_env).get(_UPSTREAM_IDLE_KEY)
    return (BENCH_UPSTREAM_IDLE_MS if value is None else int(value)) / 1000


def _quiet_s(config: Config, route: str) -> float:
    """The proxy route's least settle: its warm-up's upstream connections have closed."""
    idle_s = upstream_idle_s(config)
    return idle_s + QUIET_MARGIN_S if route == "proxy" and idle_s > 0 else 0.0


def _one_n(run: Run, n: int, log: bool) -> None:
    limits = run.limits
    if not limits.consumers_fit(n):
        run.skipped.append(
            f"N = {n:,}: this process may open {limits.soft:,} descriptors (hard limit "
            f"{limits.hard:,}), too few for {n:,} consumer connections"
        )
        return
    needed = n * 2 * 1024 * 1024  # a generous 2 MiB per consumer across all processes
    if psutil.virtual_memory().available < needed:
        run.skipped.append(f"N = {n:,}: less than {needed // GIB} GiB of memory available")
        return
    relays = limits.relay_processes(n)
    if relays > 1:
        run.notes.append(
            f"N = {n:,}: {relays} relay processes share the relay port (a relay holds two "
            f"descriptors per connection; soft limit {limits.soft:,})"
        )
    with running_stack(relays, _proxy_env(run.config, n), run.config.broker) as stack:
        offset = 0
        for route in run.config.routes:
            plan = Plan(
                route=route,
                n=n,
                seconds=run.config.seconds,
                probes=run.config.probes,
                settle_s=run.config.settle_s,
                start_offset=offset,
                settings=FetchSettings(max_wait_ms=run.config.max_wait_ms),
                quiet_s=_quiet_s(run.config, route),
            )
            if log:
                print(f"fanin: N={n:,} {route}: measuring ...", file=sys.stderr, flush=True)
            try:
                result = trio.run(measure, stack, plan)
            except Exception as exc:  # keep the other measurements of the run
                run.notes.append(f"N = {n:,}, {route}: the measurement failed: {exc!r}")
                if log:
                    traceback.print_exc()
                break
            offset += result.records_produced
            run.measurements.append(result)
            if log:
                print(_progress(result), file=sys.stderr, flush=True)
            run.notes += [f"N = {n:,}, {route}: {note}" for note in result.notes]
            _note_proxy_descriptors(run, result)
            if not stack.proxy.alive():
                run.notes.append(
                    f"N = {n:,}: the proxy exited during the {route} route: "
                    f"{_crash_site(_proxy_log(stack))}"
                )
                break
        _note_proxy_log(run, n, stack)


_FRAME = re.compile(r'File "(?P<path>[^"]*/proxy/[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')


def _crash_site(log: str) -> str:
    """The last proxy/ frame and the last error line of a traceback in ``log``."""
    frames = list(_FRAME.finditer(log))
    errors = [
        line.strip(" |+-")
        for line in log.splitlines()
        if re.match(r"^[\s|+]*[A-Za-z_.]*(Error|Exception)\b", line)
    ]
    where = ""
    if frames:
        last = frames[-1]
        root = str(ROOT) + "/"
        where = f"{last['path'].removeprefix(root)}:{last['line']} in {last['fn']}: "
    return where + (errors[-1] if errors else "(no traceback in its log)")


def _note_proxy_descriptors(run: Run, m: Measurement) -> None:
    """Say so when the proxy's descriptors per consumer, times N, exceed its limit."""
    if m.route != "proxy" or not m.up or not m.proxy_descriptors:
        return
    per_consumer = m.proxy_descriptors / m.up
    if per_consumer * m.n + DESCRIPTOR_MARGIN > run.limits.soft:
        run.notes.append(
            f"N = {m.n:,}: the proxy held {m.proxy_descriptors:,} descriptors for {m.up:,} "
            f"consumers ({per_consumer:.1f} per consumer), "
            f"so {m.n:,} consumers do not fit its limit of {run.limits.soft:,} (the hard limit)"
        )


def _proxy_log(stack: Stack) -> str:
    """The proxy's log so far ('' if its file is gone: /tmp is shared with other runs)."""
    try:
        return stack.proxy.log_text()
    except OSError:
        return ""


def _note_proxy_log(run: Run, n: int, stack: Stack) -> None:
    text = _proxy_log(stack)
    proxy = run.get("proxy", n)
    if (proxy is not None and (proxy.failures or proxy.notes)) or not stack.proxy.alive():
        # The proxy's log is removed with the proxy: keep it when its consumers had trouble.
        kept = Path(tempfile.gettempdir()) / f"fanin-proxy-n{n}-{os.getpid()}.log"
        kept.write_text(text)
        run.notes.append(
            f"N = {n:,}: the proxy route had trouble; the proxy's log is kept at {kept}"
        )
    emfile = text.count("Too many open files")
    if emfile:
        run.notes.append(
            f"N = {n:,}: the proxy logged 'Too many open files' {emfile:,} times "
            f"(soft limit {run.limits.soft:,})"
        )
    relay_errors = stack.relays.errors()
    if relay_errors:
        run.notes.append(f"N = {n:,}: relay dropped connections, e.g. {relay_errors[0]}")


def _per_consumer(m: Measurement) -> float | None:
    """The proxy's descriptors mid-window per consumer up (all of them, listeners included)."""
    return m.proxy_descriptors / m.up if m.route == "proxy" and m.up else None


def _fds(m: Measurement) -> str:
    if m.route != "proxy":
        return "-"
    per = _per_consumer(m)
    return (
        f"{m.proxy_descriptors_idle:,} → {m.proxy_descriptors:,} "
        f"({'-' if per is None else f'{per:.2f}'})"
    )


def _held(m: Measurement) -> str:
    """Held fetches across the window's samples: median / max (of one per second)."""
    if not m.held_samples:
        return "-"
    ordered = sorted(m.held_samples)
    return f"{ordered[len(ordered) // 2]:,.0f} / {ordered[-1]:,.0f}"


def _all_held(m: Measurement) -> bool:
    """Every consumer started was up and, at some sample of the window, held at once."""
    return m.up == m.n and bool(m.held_samples) and max(m.held_samples) >= m.n


def _progress(m: Measurement) -> str:
    p50, p99 = m.latency_percentile_ms(0.5), m.latency_percentile_ms(0.99)
    proxy = ""
    if m.route == "proxy":
        upstream = m.metrics.get("purgatory_proxy_upstream_connections_open")
        proxy = (
            f"held median / max {_held(m)}, proxy fds idle → mid {_fds(m)} per consumer, "
            f"upstream connections open {'-' if upstream is None else f'{upstream:,.0f}'}, "
        )
    return (
        f"fanin: N={m.n:,} {m.route}: up {m.up:,}, {proxy}"
        f"settle {m.settle_s:g} s, "
        f"upstream Fetch {m.upstream_fetch_per_s:,.1f}/s, "
        f"answers {m.answers_per_s:,.1f}/s, proxy CPU {m.cpu_percent.get('proxy', 0):.0f} %, "
        f"delivery p50 {_ms(p50)} p99 {_ms(p99)} ms, missed {m.missed}, failures {m.failures}"
    )


def _has_sys_resource() -> bool:
    """Whether this process has CAP_SYS_RESOURCE (bit 24 of CapEff; root alone is not enough
    in a container that drops it)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    found = re.search(r"^CapEff:\s*([0-9a-f]+)", status, re.MULTILINE)
    return bool(found and int(found[1], 16) & (1 << 24))


def run(config: Config, log: bool = True) -> Run:
    """Measure every N of ``config``; never writes anything."""
    result = Run(config, raise_descriptor_limit(max(config.ns, default=0)))
    limits = result.limits
    raised = (
        f"raised from soft {limits.soft_before:,} / hard {limits.hard_before:,}"
        if (limits.soft_before, limits.hard_before) != (limits.soft, limits.hard)
        else "unchanged"
    )
    refused = ""
    if limits.hard < limits.wanted:
        refused = (
            f"; raising the hard limit to {limits.wanted:,} ({DESCRIPTORS_PER_CONSUMER} per "
            f"consumer of the largest N) was refused: setrlimit needs CAP_SYS_RESOURCE, which "
            f"this process {'has' if _has_sys_resource() else 'lacks'}"
        )
    result.notes.append(
        f"RLIMIT_NOFILE: soft {limits.soft:,} / hard {limits.hard:,} ({raised}{refused}); "
        f"the consumers' process, broker, relays and proxy all run with it"
    )
    idle_s = upstream_idle_s(config)
    default_ms = ConnectionsSection.model_fields["upstream_idle_timeout_ms"].default
    result.notes.append(
        f"proxy connections.upstream_idle_timeout_ms = {idle_s * 1000:,.0f} "
        f"(its default: {default_ms:,})"
        + (
            f"; its route settles {idle_s + QUIET_MARGIN_S:g} s before the window so the "
            f"consumers' warm-up (ApiVersions, forwarded) upstream connections have closed"
            if idle_s > 0
            else " (never closed)"
        )
    )
    result.load.append(os.getloadavg())
    for n in config.ns:
        _one_n(result, n, log)
    result.load.append(os.getloadavg())
    return result


# -- report ----------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _ratio(proxy: Measurement | None, direct: Measurement | None) -> float | None:
    if proxy is None or direct is None or direct.upstream_fetch_per_s <= 0:
        return None
    return proxy.upstream_fetch_per_s / direct.upstream_fetch_per_s


def _main_table(run: Run) -> list[str]:
    lines = [
        "| N | route | consumers up | upstream Fetch/s | via proxy / direct | answers/s "
        "| broker CPU % | proxy CPU % | proxy CPU µs/s per held | proxy RSS idle → held MiB "
        "| RSS KiB per held | delivery p50 / p99 ms | missed |",
        "|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for m in run.measurements:
        direct = run.get("direct", m.n)
        ratio = _ratio(m, direct) if m.route == "proxy" else None
        is_proxy = m.route == "proxy"
        proxy_cpu = m.cpu_percent.get("proxy", 0.0)
        per_held_us = 1e4 * proxy_cpu / m.up if is_proxy and m.up else None
        rss = (
            f"{m.proxy_rss_idle_bytes / MIB:,.0f} → {m.proxy_rss_held_bytes / MIB:,.0f}"
            if is_proxy
            else "-"
        )
        per_held_kib = f"{m.proxy_rss_per_held_bytes / 1024:,.1f}" if is_proxy else "-"
        lines.append(
            f"| {m.n:,} | {m.route} | {m.up:,} | {m.upstream_fetch_per_s:,.1f} "
            f"| {'-' if ratio is None else f'{100 * ratio:.1f} %'} | {m.answers_per_s:,.0f} "
            f"| {m.cpu_percent.get('broker', 0):.0f} | {f'{proxy_cpu:.0f}' if is_proxy else '-'} "
            f"| {'-' if per_held_us is None else f'{per_held_us:.1f}'} | {rss} | {per_held_kib} "
            f"| {_ms(m.latency_percentile_ms(0.5))} / {_ms(m.latency_percentile_ms(0.99))} "
            f"| {m.missed} |"
        )
    return lines


def _detail_table(run: Run) -> list[str]:
    lines = [
        "| N | route | connected / up / settle s | poll cycle ms | Fetch version | sessions opened "
        "| proxy fds idle → mid-window (per consumer) | proxy upstream connections mid-window "
        "| full / incremental requests | other upstream req/s | consumers' CPU % "
        "| relays' CPU % | produce ack ms (max) "
        "| errors / failures |",
        "|--:|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for m in run.measurements:
        relay_cpu = sum(v for k, v in m.cpu_percent.items() if k.startswith("relay"))
        versions = ", ".join(f"v{v}" for v in sorted(m.fetch_versions)) or "-"
        trouble = {
            **m.errors,
            **m.failures,
            **{f"produce answered error {code}": v for code, v in m.produce_errors.items()},
        }
        upstream = m.metrics.get("purgatory_proxy_upstream_connections_open")
        shown_up = "-" if upstream is None or m.route != "proxy" else f"{upstream:,.0f}"
        lines.append(
            f"| {m.n:,} | {m.route} | {m.connect_s:.1f} / {m.setup_s:.1f} / {m.settle_s:g} "
            f"| {_ms(m.poll_cycle_ms)} "
            f"| {versions} | {m.sessions:,} | {_fds(m)} | {shown_up} "
            f"| {m.full_requests:,} / {m.incremental_requests:,} | {m.upstream_other_per_s:.1f} "
            f"| {m.cpu_percent.get('consumers', 0):.0f} | {relay_cpu:.0f} "
            f"| {_ms(max(m.ack_ms) if m.ack_ms else None)} "
            f"| {', '.join(f'{k}: {v}' for k, v in trouble.items()) or 'none'} |"
        )
    return lines


def _metrics_lines(run: Run) -> list[str]:
    lines: list[str] = []
    for m in run.measurements:
        if m.route != "proxy":
            continue
        held = {k: v for k, v in m.metrics.items() if "purgatory_pending" in k}
        upstream = {k: v for k, v in m.metrics_delta.items() if "upstream_fetches_total" in k}
        if not held and not upstream:
            continue
        parts = [f"{k.split('{')[-1].rstrip('}') or k}: {v:,.0f}" for k, v in sorted(held.items())]
        ups = [
            f"{k.split('{')[-1].rstrip('}')}: {v / m.window_s:,.1f}/s"
            for k, v in sorted(upstream.items())
        ]
        lines.append(
            f"- N = {m.n:,}: held at the mid-window scrape ({'; '.join(parts) or 'n/a'}); "
            f"proxy upstream fetches by kind ({'; '.join(ups) or 'n/a'})"
        )
    if not lines:
        lines.append(
            "- The proxy served no `purgatory_proxy_purgatory_pending` / "
            "`purgatory_proxy_upstream_fetches_total` series in this run (a proxy that does "
            "not hold fetches has none)."
        )
    return lines


def _goal_lines(run: Run) -> list[str]:
    rows = ["| goal | measured | met |", "|---|---|---|"]
    ratio = _ratio(run.get("proxy", 1000), run.get("direct", 1000))
    rows.append(
        "| upstream Fetch rate via the proxy ≤ 1 % of direct at N = 1,000 | "
        + (
            "not measured | - |"
            if ratio is None
            else f"{100 * ratio:.1f} % | {'yes' if ratio <= GOAL_RATIO else 'no'} |"
        )
    )
    for n in run.config.ns:
        proxy, direct = run.get("proxy", n), run.get("direct", n)
        p99p = proxy.latency_percentile_ms(0.99) if proxy else None
        p99d = direct.latency_percentile_ms(0.99) if direct else None
        if p99p is None or p99d is None:
            continue
        met = p99p <= p99d + GOAL_P99_SLACK_MS
        rows.append(
            f"| delivery p99 ≤ direct + 20 ms at N = {n:,} | {p99p:,.1f} vs {p99d:,.1f} ms "
            f"| {'yes' if met else 'no'} |"
        )
    for m in run.measurements:
        per = _per_consumer(m)
        if per is None:
            continue
        rows.append(
            f"| ≤ {GOAL_FDS_PER_CONSUMER} proxy descriptors per idle consumer at N = {m.n:,} "
            f"| {m.proxy_descriptors:,} for {m.up:,} up: {per:.2f} "
            f"| {'yes' if per <= GOAL_FDS_PER_CONSUMER else 'no'} |"
        )
        rows.append(
            f"| every consumer held at once, none missed at N = {m.n:,} "
            f"| held median / max {_held(m)} (sampled each second) of {m.up:,} up "
            f"({m.n:,} started); {m.missed:,} missed "
            f"| {'yes' if _all_held(m) and not m.missed else 'no'} |"
        )
    big = [m for m in run.measurements if m.route == "proxy" and m.n >= GOAL_HELD]
    if big:
        m = big[0]
        met = m.up >= GOAL_HELD and m.proxy_rss_held_bytes <= GOAL_RSS_BYTES
        rows.append(
            f"| ≥ 10,000 held long-polls in ≤ 1 GiB RSS | {m.up:,} consumers up, RSS "
            f"{m.proxy_rss_held_bytes / MIB:,.0f} MiB | {'yes' if met else 'no'} |"
        )
    else:
        rows.append("| ≥ 10,000 held long-polls in ≤ 1 GiB RSS | not measured | - |")
    return rows


def _cycle_lines(run: Run) -> list[str]:
    """What holding every consumer at once asks of the proxy: N answers per max wait."""
    wait_ms = run.config.max_wait_ms
    lines = []
    for m in run.measurements:
        if m.route != "proxy" or not m.answers_per_s:
            continue
        needed = m.n * 1000 / wait_ms
        us = m.cpu_percent.get("proxy", 0.0) / 100 / m.answers_per_s * 1e6
        lines.append(
            f"- N = {m.n:,} at fetch.max.wait.ms = {wait_ms:,}: every consumer held at once takes "
            f"{m.n:,} x 1000 / {wait_ms:,} = {needed:,.0f} answers/s; the proxy answered "
            f"{m.answers_per_s:,.0f}/s at {us:.0f} µs of CPU each, so it would need "
            f"{needed * us / 1e6:.2f} cores for all of them (this machine has {os.cpu_count()}, "
            "shared with the broker and the consumers)."
        )
    return [*lines, ""] if lines else []


def _load_lines(run: Run) -> list[str]:
    if len(run.load) < 2:
        return []
    start, end = (" / ".join(f"{v:.1f}" for v in avg) for avg in run.load[:2])
    return [
        f"Load average (1 / 5 / 15 min) at the start: {start}; at the end: {end} "
        f"({os.cpu_count()} cores, shared with other work).",
        "",
    ]


def render(run: Run, command: str) -> str:
    """The markdown section for docs/benchmarks.md."""
    c = run.config
    out = [
        "## Fan-in: idle long-polling consumers, direct vs through the proxy"
        + ("" if c.section == "fanin" else f" (fetch.max.wait.ms = {c.max_wait_ms:,})"),
        "",
        machine_line(),
        "",
        *_load_lines(run),
        f"Command: `{command}`. Broker: {BROKERS[c.broker]}. Each N gets a fresh broker, topic, "
        "counting relay and proxy; "
        f"N consumers (one TCP connection each, written with `wire/`, Fetch at the highest "
        f"version both sides speak, KIP-227 sessions when offered, "
        f"fetch.max.wait.ms={c.max_wait_ms}, "
        f"fetch.min.bytes=1) long-poll the idle topic, first straight to the relay "
        f"(direct), then through the proxy. Window {c.seconds:g} s per route after a "
        f"{c.settle_s:g} s settle; {c.probes} delivery probes per route (one record produced "
        f"with acks=1 along the same route at a random point of the poll cycle; latency = "
        f"produce sent → consumer has it, every consumer of every probe). Upstream Fetch/s is "
        f"counted at the relay between the route and the broker; CPU % is of one core over the "
        f"window; proxy RSS is idle (before its consumers connect) and the window's median; "
        f"consumers connect (TCP + ApiVersions) {CONNECT_CONCURRENCY} at a time and start polling "
        f"once all have connected.",
        "",
        *_main_table(run),
        "",
        *_cycle_lines(run),
        "Goals (issues 6 and 17):",
        "",
        *_goal_lines(run),
        "",
        "Proxy purgatory metrics (from its `/metrics`):",
        "",
        *_metrics_lines(run),
        "",
        "Details:",
        "",
        *_detail_table(run),
    ]
    if run.skipped or run.notes:
        out += ["", "Limits and notes:", ""]
        out += [f"- Skipped {line}." for line in run.skipped]
        out += [f"- {line}." for line in run.notes]
    return "\n".join(out) + "\n"


def _parse_ns(text: str) -> tuple[int, ...]:
    return tuple(int(part.replace("_", "")) for part in text.split(",") if part)


def _parse_routes(text: str) -> tuple[str, ...]:
    routes = tuple(part for part in text.split(",") if part)
    unknown = set(routes) - set(ROUTES)
    if unknown or not routes:
        raise argparse.ArgumentTypeError(f"routes are {', '.join(ROUTES)}; got {text!r}")
    return routes


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise SystemExit(f"--proxy-env wants KEY=VALUE, got {text!r}")
    return key, value


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="N = 100, 1,000; 5 s windows")
    parser.add_argument("--n", type=_parse_ns, help="comma-separated consumer counts")
    parser.add_argument("--seconds", type=float, help="measurement window per route")
    parser.add_argument("--probes", type=int, help="delivery probes per route")
    parser.add_argument(
        "--proxy-env", action="append", default=[], metavar="KEY=VALUE", help="proxy setting"
    )
    parser.add_argument(
        "--routes", type=_parse_routes, default=ROUTES, help="comma-separated: direct,proxy"
    )
    parser.add_argument(
        "--max-wait-ms",
        type=int,
        default=DEFAULT_MAX_WAIT_MS,
        help="the consumers' fetch.max.wait.ms (a value other than 500 writes its own section)",
    )
    parser.add_argument(
        "--broker", choices=sorted(BROKERS), default="kafka", help="the broker behind the relays"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--self-check",
        action="store_true",
        help="only check the consumers' fetch-session and probe logic (every run does first)",
    )
    args = parser.parse_args(argv)
    try:
        checked = run_checks()
    except SelfCheckFailed as failed:
        raise SystemExit(f"fanin: self-check failed: {failed}") from None
    print(f"fanin: self-check: {len(checked)} checks passed", file=sys.stderr)
    if args.self_check:
        for name in checked:
            print(f"ok {name}")
        return
    config = QUICK if args.quick else FULL
    env = tuple(_setting(item) for item in args.proxy_env)
    config = Config(
        ns=args.n or config.ns,
        seconds=args.seconds if args.seconds is not None else config.seconds,
        probes=args.probes if args.probes is not None else config.probes,
        settle_s=config.settle_s,
        proxy_env=env,
        routes=args.routes,
        max_wait_ms=args.max_wait_ms,
        broker=args.broker,
    )
    started = time.monotonic()
    result = run(config)
    markdown = render(result, command_line("bench.fanin", argv))
    publish(config.section, markdown, started, write=not args.no_write)


if __name__ == "__main__":
    main()
