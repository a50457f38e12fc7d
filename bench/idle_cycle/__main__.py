# Strategy: the goal is an idle held-fetch cycle at <= 100 µs of proxy CPU, and, if
# Python on trio cannot get there, the profile that says where the floor is. This bench
# puts the two side by side in one run, rounds interleaved:
#
#   proxy     bench.fanin's proxy route: N idle long-polling consumers (incremental fetch
#             sessions, max_wait 500 ms, nothing produced but a probe) against the proxy in
#             front of a one-node Apache Kafka (`--broker tansu`: Tansu, its own section); proxy
#             CPU seconds / answers in the window
#   two-pump  bench.idle_cycle.floor: a trio server with the proxy's shape and none of its logic
#             (a reader and a writer task per connection, holds in one shared clock task), the
#             same N connections sending a small frame and the next when answered
#   bare      the same with one task per connection and trio.sleep per hold
#
# The difference proxy - two-pump is what the proxy's own work costs per cycle (framing, the
# pool, the fetch session, the purgatory and its watcher, building and encoding the answer,
# the request record); two-pump is what any proxy on trio pays for the I/O and wake-ups.
"""Idle long-poll cycle: the proxy's CPU per answer against the floor of a trio server."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.fanin.stack import BROKERS
from bench.idle_cycle.ab import compare
from bench.idle_cycle.floor import measure_floor
from bench.idle_cycle.proxy_route import proxy_us
from testbed.report import command_line, machine_line, publish

__all__ = ["main"]

_ROUTES = ("proxy", "two-pump", "bare")
#: Connections by default; another N writes its own section.
_DEFAULT_N = 1000


def render(n: int, seconds: float, rounds: int, values: dict[str, list[tuple[float, float]]],
           command: str, broker: str) -> str:  # fmt: skip
    medians = {route: statistics.median(us for us, _ in values[route]) for route in _ROUTES}
    lines = [
        "## Idle long-poll cycle: the proxy against the floor of trio (`bench.idle_cycle`)",
        "",
        f"{machine_line()} `{command}`",
        "",
        f"{n:,} connections each keep one poll held for 500 ms and send the next as soon as "
        f"it is answered; {seconds:g} s windows, {rounds} rounds, the three routes in turn in "
        "each. CPU µs per answer = the server process's CPU time in the window / answers; "
        "medians (range). See the module docstring of bench.idle_cycle for the routes. "
        f"The proxy route's broker: {BROKERS[broker]}.",
        "",
        "| route | CPU µs per answer | answers/s |",
        "|---|---:|---:|",
    ]
    for route in _ROUTES:
        us = [u for u, _ in values[route]]
        rate = statistics.median(r for _, r in values[route])
        lines.append(
            f"| {route} | {medians[route]:.0f} ({min(us):.0f}-{max(us):.0f}) | {rate:,.0f} |"
        )
    own = medians["proxy"] - medians["two-pump"]
    lines += [
        "",
        f"The proxy's own work per idle cycle: {medians['proxy']:.0f} - "
        f"{medians['two-pump']:.0f} = {own:.0f} µs (median against median). The target of at "
        f"most 100 µs of proxy CPU per idle cycle leaves {100 - medians['two-pump']:.0f} µs "
        "for it on this machine.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_cycle", description=__doc__)
    parser.add_argument("--n", type=int, default=_DEFAULT_N, help="connections")
    parser.add_argument("--seconds", type=float, default=30.0, help="window per route")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--broker", choices=sorted(BROKERS), default="kafka", help="the proxy route's broker"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="instead: the proxy route only, this tree against the checkout in DIR, alternated",
    )
    parser.add_argument("--label", default="baseline", help="the baseline's name in the table")
    parser.add_argument("--pairs", type=int, default=4, help="ABBA blocks of --baseline")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.baseline:
        command = command_line("bench.idle_cycle", argv)
        markdown, _ = compare(args.baseline, args.label, args.n, args.seconds, args.pairs,
                              args.broker, command)  # fmt: skip
        publish("idle-cycle-ab", markdown, started, write=not args.no_write)
        return
    values: dict[str, list[tuple[float, float]]] = {route: [] for route in _ROUTES}
    for round_number in range(args.rounds):
        for route in _ROUTES:
            if route == "proxy":
                us, rate = proxy_us(args.n, args.seconds, args.broker)
            else:
                us, rate = measure_floor(route, args.n, 500, args.seconds)
            values[route].append((us, rate))
            print(f"idle_cycle: round {round_number + 1} {route}: {us:.1f} µs per answer, "
                  f"{rate:,.0f} answers/s", file=sys.stderr)  # fmt: skip
    command = command_line("bench.idle_cycle", argv)
    markdown = render(args.n, args.seconds, args.rounds, values, command, args.broker)
    # One section per N (the cost per answer falls as more connections share each wake-up),
    # and per broker.
    section = "idle-cycle" if args.n == _DEFAULT_N else f"idle-cycle-n{args.n}"
    if args.broker != "kafka":
        section += f"-{args.broker}"
    publish(section, markdown, started, write=not args.no_write)


if __name__ == "__main__":
    main()
