# Strategy: the side-by-side benchmark. Four routes into the same Apache Kafka -- direct,
# purgatory-proxy, Kroxylicious and kafka-proxy (bench/peers/routes.py) -- measured in one run,
# family by family:
#
#   throughput, per-request, tls   one-node cluster; every route of a round runs at once and
#                                  each cell measures them back to back (bench/peers/load.py)
#   latency                        three-node cluster (RF 3, min ISR 2), open loop at fractions
#                                  of direct's rate on that cluster
#   memory                         one-node cluster; each forwarder fresh, idle then holding
#                                  idle client connections (bench/peers/memory.py)
#   fanin                          one-node cluster with JMX; per max wait and N, each route
#                                  fresh (bench/peers/fanin.py)
#
# Rounds repeat every family (bench/peers/families.py walks them); within a round the routes
# run in turn, the first turning by one each round. The report (bench/peers/report.py) gives
# medians over rounds and, for each forwarder, the median of its per-round ratio to the same
# round's direct. Kafka's broker, the forwarder and the clients share this machine's cores:
# compare ratios from one run.
#
# A route that cannot be had here (no kafka-proxy binary: the Go module proxy refuses it; a
# given Kroxylicious distribution that needs a newer Java than the one given) is not started;
# its rows say "not measured: <why>". A cell that fails is a row with its error.
"""Side by side with Kroxylicious and kafka-proxy, in front of Apache Kafka.

Run ``python -m bench.peers`` (every family at full size, rounds interleaved; about an hour on
two quiet cores, most of it the fan-in) or ``--smoke`` (every family and route on tiny sizes,
one to two minutes: checks the harness only). ``--families throughput,latency,...``,
``--routes`` and ``--rounds N`` narrow a run; ``--kafka-proxy-bin PATH`` (or $KAFKA_PROXY_BIN)
supplies kafka-proxy when ``go install`` of it fails. Kroxylicious is 0.12.0 from Maven Central
unless ``--kroxylicious-dist DIR`` (or $KROXYLICIOUS_DIST) gives the unpacked binary
distribution of a later release built from its source, run on the JDK of
``--kroxylicious-java-home DIR`` (or $KROXYLICIOUS_JAVA_HOME; default: java on PATH); the
Versions line names the release measured. ``--json FILE`` saves the run,
``--render FILE`` reports a saved run without measuring. Results go to the "peers" section of
docs/benchmarks.md and docs/img/peers-*.png (``--out DIR``: under DIR instead;
``--no-write``: print only).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.fanin.stack import raise_descriptor_limit
from bench.peers.config import FAMILIES, FULL, SMOKE, Config
from bench.peers.families import Families, Run
from bench.peers.kafka_proxy import KAFKA_PROXY_VERSION, find_kafka_proxy
from bench.peers.kroxylicious import find_kroxylicious
from bench.peers.report import markdown, summary
from bench.peers.routes import DEFAULT_ROUTES, ROUTES, Availability
from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.kafka_install import KAFKA_VERSION
from testbed.report import BENCHMARKS_MD, command_line, write_section

__all__ = ["main", "run", "versions"]

ROOT = Path(__file__).resolve().parents[2]
SECTION = "peers"


@contextlib.contextmanager
def _one_node(config: Config) -> Iterator[KafkaCluster]:
    """The one-node cluster of every family but latency: PLAINTEXT, SSL for the TLS family,
    JMX for the fan-in's counts, and a fetch-session cache sized for its largest N (as an
    operator running that many consumers would size it)."""
    listeners = ("PLAINTEXT", "SSL") if "tls" in config.families else ("PLAINTEXT",)
    slots = max((*config.fanin_ns, 1000)) if "fanin" in config.families else 1000
    extra = {"max.incremental.fetch.session.cache.slots": str(slots)}
    jmx = "fanin" in config.families
    with running_kafka(1, listeners=listeners, jmx=jmx, extra=extra) as cluster:
        yield cluster


def run(config: Config, available: Availability, routes: Sequence[str] = ROUTES) -> Run:
    """Measure every family of ``config`` over ``routes``."""
    result = Run(config, versions(available))
    families = Families(result, available, routes)
    if "fanin" in config.families:
        limits = raise_descriptor_limit(max(config.fanin_ns))
        result.notes.append(
            f"RLIMIT_NOFILE soft {limits.soft:,} / hard {limits.hard:,} for every process of the "
            f"run (the broker, the forwarders and the consumers inherit it)"
        )
    one_node: dict[str, Callable[[KafkaCluster], None]] = {
        "throughput": families.throughput,
        "tls": families.tls,
        "memory": families.memory,
        "fanin": families.fanin,
    }
    if set(one_node) & set(config.families):
        with _one_node(config) as cluster:
            for family in config.families:
                if family in one_node:
                    with _timed(result, family, families.log):
                        one_node[family](cluster)
    if "latency" in config.families:
        with _timed(result, "latency", families.log), running_kafka(3) as cluster:
            families.latency(cluster)
    return result


@contextlib.contextmanager
def _timed(result: Run, family: str, log: Callable[[str], None]) -> Iterator[None]:
    """Log the family's start; note how long it took (a guide for planning full runs)."""
    log(f"peers: {family} ...")
    started = time.monotonic()
    yield
    result.notes.append(f"{family}: {(time.monotonic() - started) / 60:.1f} min")


def _first_line(command: Sequence[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except OSError as exc:
        return f"unknown ({exc})"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def _describe(checkout: Path) -> str:
    return _first_line(["git", "-C", str(checkout), "describe", "--always", "--dirty"])


def versions(available: Availability) -> dict[str, str]:
    """Which broker, peers and proxy this run measures."""
    binary = available.kafka_proxy
    baseline = {}
    if available.baseline is not None:
        described = _describe(available.baseline)
        baseline = {"baseline": f"{described} ({available.baseline})"}
    return {
        "apache-kafka": KAFKA_VERSION,
        "kroxylicious": available.kroxylicious.describe(),
        "kafka-proxy": (
            f"{binary.version or KAFKA_PROXY_VERSION} ({binary.origin})"
            if binary.path is not None
            else f"not measured: {binary.origin}"
        ),
        "purgatory-proxy": _describe(ROOT),
        **baseline,
        "java": _first_line(["java", "-version"]),
    }


def _parse_list(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(part for part in text.split(",") if part)
        unknown = set(items) - set(allowed)
        if unknown or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}; got {text!r}")
        return items

    return parse


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness only")
    parser.add_argument("--families", type=_parse_list(FAMILIES), help="comma-separated families")
    parser.add_argument(
        "--routes", type=_parse_list(ROUTES), help="comma-separated routes (default: all)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another checkout of purgatory-proxy, measured as the route 'baseline' beside this "
        "tree's in every round (before and after)",
    )
    parser.add_argument("--rounds", type=int, help="rounds of every family but fan-in")
    parser.add_argument(
        "--kafka-proxy-bin", metavar="PATH", help="kafka-proxy binary when go install fails"
    )
    parser.add_argument(
        "--kroxylicious-dist",
        metavar="DIR",
        help="an unpacked Kroxylicious binary distribution to run instead of 0.12.0",
    )
    parser.add_argument(
        "--kroxylicious-java-home", metavar="DIR", help="the JDK that runs --kroxylicious-dist"
    )
    parser.add_argument("--json", type=Path, help="write the run (its rows) to this file")
    parser.add_argument(
        "--render", type=Path, help="do not measure: report the run saved by --json in this file"
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write the section to DIR/benchmarks.md and the plots to DIR/img/",
    )
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        result = Run(
            Config.from_json(saved["config"]), saved["versions"], saved["rows"], saved["notes"]
        )
        command, wall_s = saved["command"], saved["wall_s"]
    else:
        config = SMOKE if args.smoke else FULL
        if args.families:
            config = dataclasses.replace(config, families=args.families)
        if args.rounds:
            config = dataclasses.replace(config, rounds=args.rounds)
        available = Availability(
            find_kafka_proxy(args.kafka_proxy_bin),
            find_kroxylicious(args.kroxylicious_dist, args.kroxylicious_java_home),
            args.baseline.resolve() if args.baseline else None,
        )
        if args.routes is None:
            args.routes = ROUTES if args.baseline else DEFAULT_ROUTES
        command = command_line("bench.peers", argv)
        started = time.monotonic()
        result = run(config, available, args.routes)
        wall_s = time.monotonic() - started
        if args.json:
            args.json.write_text(json.dumps(result.to_json(command, wall_s), indent=1))
    print(summary(result.config, result.rows))
    if not args.no_write:
        docs = BENCHMARKS_MD.parent if args.out is None else args.out
        text = markdown(
            result.config, result.rows, result.versions, result.notes, command, wall_s, docs / "img"
        )
        write_section(SECTION, text, docs / BENCHMARKS_MD.name)


if __name__ == "__main__":
    main()
