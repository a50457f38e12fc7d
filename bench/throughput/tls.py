# Strategy: the cost of TLS on both sides of the proxy, and nothing else. Two routes to a fresh
# Tansu, interleaved A B A B so drift of the shared 2-core machine lands on both:
#
#   plaintext  client --TCP--> purgatory-proxy --TCP--> front --TCP--> Tansu
#   tls        client --TLS--> purgatory-proxy --TLS--> front --TCP--> Tansu
#
# Tansu cannot serve TLS, so upstream TLS ends at testbed/sasl_front.SecureFront (a
# Python relay in this process). It is on both routes, TLS off on the first, so the routes
# differ only in the two TLS legs; the front's own costs (relaying, its half of the upstream
# TLS) fall on this process, not on the proxy. The proxy's CPU seconds are read with psutil
# for its PID, so "CPU s/GiB" is the proxy's own price of the bytes, TLS included; the MB/s
# ratio is end to end and includes the front's TLS work (a real broker would pay that too).
#
# librdkafka (confluent-kafka) produces N 1 KiB records (acks=all, linger 5 ms) as fast as it
# can, then reads them back from offset 0, as bench.throughput does.
"""TLS cost: 1 KiB produce and consume through the proxy, TLS on both sides vs plaintext.

Run ``python -m bench.throughput.tls`` (about 2 minutes; ``--quick`` about 40 s). The result
goes to its own section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.throughput.load import (
    ProcessWatch,
    consume_throughput,
    create_topic,
    produce_throughput,
)
from testbed.certs import Pki, make_pki
from testbed.processes import running_tansu
from testbed.proxy_process import running_proxy
from testbed.report import machine_line, write_section
from testbed.sasl_front import SecureFront

GIB = 1 << 30
MB = 1_000_000
RECORD_BYTES = 1024
ROUTES = ("plaintext", "tls")


@dataclass(frozen=True)
class Cell:
    """One route, one round: seconds and proxy CPU seconds for each half."""

    route: str
    produce_s: float
    produce_cpu_s: float
    consume_s: float
    consume_cpu_s: float


@dataclass(frozen=True)
class Running:
    bootstrap: str
    proxy_pid: int
    client_config: dict[str, str]


@contextlib.contextmanager
def _route(name: str, pki: Pki) -> Iterator[Running]:
    """Fresh Tansu, the front, the proxy; TLS on both proxy legs when ``name`` is "tls"."""
    with running_tansu() as broker:
        tls = name == "tls"
        front = SecureFront(
            (broker.host, broker.port),
            tls=pki.server_context(require_client_cert=True) if tls else None,
        )
        front.start()
        try:
            env: dict[str, str] = {}
            client: dict[str, str] = {}
            if tls:
                env = {
                    "PURGATORY_PROXY_PROXY__TLS__CERT_FILE": str(pki.server.cert),
                    "PURGATORY_PROXY_PROXY__TLS__KEY_FILE": str(pki.server.key),
                    "PURGATORY_PROXY_UPSTREAM__TLS__ENABLED": "true",
                    "PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(pki.ca),
                    "PURGATORY_PROXY_UPSTREAM__TLS__CERT_FILE": str(pki.client.cert),
                    "PURGATORY_PROXY_UPSTREAM__TLS__KEY_FILE": str(pki.client.key),
                }
                client = {"security.protocol": "ssl", "ssl.ca.location": str(pki.ca)}
            with running_proxy(front.bootstrap, env=env) as proxy:
                yield Running(proxy.bootstrap, proxy.pid, client)
        finally:
            front.stop()


def _measure(name: str, pki: Pki, count: int) -> Cell:
    with _route(name, pki) as route:
        topic = create_topic(route.bootstrap, client_config=route.client_config)
        watch = ProcessWatch(route.proxy_pid)
        watch.start()
        produce_s = produce_throughput(
            route.bootstrap, topic, RECORD_BYTES, count, client_config=route.client_config
        )
        produce_cpu = watch.stop()
        watch = ProcessWatch(route.proxy_pid)
        watch.start()
        consume_s = consume_throughput(
            route.bootstrap, topic, count, client_config=route.client_config
        )
        consume_cpu = watch.stop()
    return Cell(name, produce_s, produce_cpu, consume_s, consume_cpu)


def _report(cells: list[Cell], count: int, rounds: int) -> str:
    gib = count * RECORD_BYTES / GIB
    mb = count * RECORD_BYTES / MB
    rows = {}
    for route in ROUTES:
        mine = [c for c in cells if c.route == route]
        rows[route] = {
            "produce MB/s": statistics.median(mb / c.produce_s for c in mine),
            "consume MB/s": statistics.median(mb / c.consume_s for c in mine),
            "produce CPU s/GiB": statistics.median(c.produce_cpu_s / gib for c in mine),
            "consume CPU s/GiB": statistics.median(c.consume_cpu_s / gib for c in mine),
        }
    lines = [
        "## TLS cost (bench.throughput.tls)",
        "",
        f"{machine_line()} {count:,} records of 1 KiB per cell, {rounds} round(s) interleaved "
        "plaintext / TLS, medians. Both routes: librdkafka -> purgatory-proxy -> "
        "testbed/sasl_front.SecureFront -> Tansu (the front terminates upstream TLS, "
        "which Tansu cannot serve); the TLS route has client TLS and upstream TLS (mutual), "
        "the plaintext route neither. CPU s/GiB is the proxy process's own CPU time "
        "(psutil) per GiB of records; MB/s is end to end and includes the front's TLS "
        "work, in Python, on the same two cores.",
        "",
        "| route | produce MB/s | consume MB/s | proxy CPU s/GiB produce | proxy CPU s/GiB "
        "consume |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for route in ROUTES:
        r = rows[route]
        lines.append(
            f"| {route} | {r['produce MB/s']:.1f} | {r['consume MB/s']:.1f} | "
            f"{r['produce CPU s/GiB']:.1f} | {r['consume CPU s/GiB']:.1f} |"
        )
    plain, tls = rows["plaintext"], rows["tls"]
    lines.append(
        f"| **TLS / plaintext** | {tls['produce MB/s'] / plain['produce MB/s']:.2f} | "
        f"{tls['consume MB/s'] / plain['consume MB/s']:.2f} | "
        f"{tls['produce CPU s/GiB'] / plain['produce CPU s/GiB']:.2f} | "
        f"{tls['consume CPU s/GiB'] / plain['consume CPU s/GiB']:.2f} |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    count, rounds = (20_000, 1) if args.quick else (100_000, 3)
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as scratch:
        pki = make_pki(Path(scratch))
        cells = []
        for round_ in range(rounds):
            for route in ROUTES:
                cell = _measure(route, pki, count)
                print(
                    f"round {round_ + 1} {route}: produce {cell.produce_s:.2f} s "
                    f"(proxy CPU {cell.produce_cpu_s:.2f} s), consume {cell.consume_s:.2f} s "
                    f"(proxy CPU {cell.consume_cpu_s:.2f} s)",
                    flush=True,
                )
                cells.append(cell)
    markdown = _report(cells, count, rounds)
    print(markdown)
    if not args.no_write:
        write_section("throughput-tls", markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
