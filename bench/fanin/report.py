# Strategy: the docs/benchmarks.md section of a run, made only from its Run: the main table
# (upstream Fetch rate direct vs via the proxy, CPU, RSS, delivery latency), the goals
# with whether each was met (reported, never asserted), the proxy's own
# purgatory metrics, and the details that say what limited the run.
"""The fan-in benchmark's report: tables, goals and notes of one run, in markdown."""

from __future__ import annotations

import os

from bench.fanin.config import Run
from bench.fanin.measure import CONNECT_CONCURRENCY, Measurement
from bench.fanin.stack import BROKERS
from testbed.report import machine_line

__all__ = ["progress", "render"]

MIB = 1 << 20
GIB = 1 << 30
#: Goals: upstream Fetch/s at most 1 % of direct's, delivery p99 within 20 ms of direct's,
#: 10,000 long-polls held in 1 GiB.
GOAL_RATIO = 0.01
GOAL_P99_SLACK_MS = 20.0
GOAL_HELD = 10_000
GOAL_RSS_BYTES = GIB
#: Goal: descriptors per idle consumer in the proxy (the proxy's identity).
GOAL_FDS_PER_CONSUMER = 1.2


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


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


def progress(m: Measurement) -> str:
    """One line on stderr per measurement while the run goes on."""
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
            "`purgatory_proxy_upstream_fetches_total` series in this run (they arrive with "
            "a proxy that does not hold fetches has none)."
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
        "Goals (each row states one):",
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
