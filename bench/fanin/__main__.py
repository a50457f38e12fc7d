# Strategy: the fan-in benchmark. For each N, a fresh broker, relays and proxy
# (bench/fanin/stack.py), then two measurements in the same run (bench/fanin/measure.py):
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
# Goals, reported, never asserted: upstream fetch rate via the proxy <= 1 % of direct
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
consumers' fetch-session and probe logic (bench/fanin/selfcheck.py); ``--self-check`` does
only that.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from bench.fanin.config import FULL, QUICK, ROUTES, Config
from bench.fanin.consumer import DEFAULT_MAX_WAIT_MS
from bench.fanin.report import render
from bench.fanin.runner import run
from bench.fanin.selfcheck import SelfCheckFailed, run_checks
from bench.fanin.stack import BROKERS
from testbed.report import command_line, publish

__all__ = ["main"]


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
    parser = argparse.ArgumentParser(prog="python -m bench.fanin", description=__doc__)
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
