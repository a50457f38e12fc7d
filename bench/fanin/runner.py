# Strategy: for each N, a fresh broker, relays and proxy (bench/fanin/stack.py), then each
# route's measurement in the same stack (bench/fanin/measure.py), one trio.run each. A
# measurement that fails, or a proxy that dies, is a note and the run goes on with the next N;
# the proxy's log is kept when its consumers had trouble, since it is removed with the proxy.
# Before anything, the run raises its descriptor limit for the largest N and says how far it
# got (and, when the hard limit would not move, whether the process has CAP_SYS_RESOURCE).
"""Run the fan-in benchmark's measurements, N by N; never writes anything."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import traceback
from pathlib import Path

import psutil
import trio

from bench.fanin.config import QUIET_MARGIN_S, Config, Run, proxy_env, quiet_s, upstream_idle_s
from bench.fanin.consumer import FetchSettings
from bench.fanin.measure import Measurement, Plan, measure
from bench.fanin.report import progress
from bench.fanin.stack import (
    DESCRIPTOR_MARGIN,
    DESCRIPTORS_PER_CONSUMER,
    ROOT,
    Stack,
    raise_descriptor_limit,
    running_stack,
)
from proxy.config import ConnectionsSection

__all__ = ["run"]


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
        run.skipped.append(f"N = {n:,}: less than {needed >> 30} GiB of memory available")
        return
    relays = limits.relay_processes(n)
    if relays > 1:
        run.notes.append(
            f"N = {n:,}: {relays} relay processes share the relay port (a relay holds two "
            f"descriptors per connection; soft limit {limits.soft:,})"
        )
    with running_stack(relays, proxy_env(run.config, n), run.config.broker) as stack:
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
                quiet_s=quiet_s(run.config, route),
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
                print(progress(result), file=sys.stderr, flush=True)
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
