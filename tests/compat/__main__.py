# Strategy: print the matrix as a Markdown table, for people (and the closing note).
#
# `python -m tests.compat` starts a one-node Apache Kafka of its own (`--kafka-version`, the
# newest 4.x by default; `--tansu` for the embedded broker instead) and runs every client's
# round trip, Debian's kcat included, directly against it. `--bootstrap` points the clients
# somewhere else (a proxy) while `--direct` names the broker the checker reads; a failing
# client is a row, not a crash, so one run reports every client. The exit status is 1 when a
# required client (CLIENTS) failed; Debian's kcat is reported but never fails the run.

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from testbed.kafka_install import KAFKA_LINES, KAFKA_VERSION
from tests.compat._matrix import CLIENTS, DRIVERS, roundtrip_and_check
from tests.compat._model import ClientFailed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.compat",
        description="Run the client compatibility matrix and print it as a table.",
    )
    parser.add_argument("--bootstrap", help="HOST:PORT the clients use (default: --direct)")
    parser.add_argument("--direct", help="HOST:PORT of the broker itself (default: a new one)")
    parser.add_argument(
        "--kafka-version", default=KAFKA_VERSION, choices=KAFKA_LINES, help="the new broker's"
    )
    parser.add_argument("--tansu", action="store_true", help="start Tansu, not Apache Kafka")
    parser.add_argument(
        "--clients",
        default=",".join((*CLIENTS, "kcat-debian")),
        help=f"comma-separated, from {', '.join(DRIVERS)}",
    )
    parser.add_argument("-n", type=int, default=1000, help="records per round trip")
    args = parser.parse_args(argv)
    failures = 0
    with _broker(args.direct, args.kafka_version, args.tansu) as direct:
        bootstrap = args.bootstrap or direct
        print(f"clients -> {bootstrap}, checked on {direct}\n")
        print("| client | result | seconds | needed |")
        print("| --- | --- | --- | --- |")
        for client in args.clients.split(","):
            try:
                result, problems = roundtrip_and_check(client, bootstrap, direct, n=args.n)
            except ClientFailed as failed:
                failures += client in CLIENTS
                detail = failed.detail.splitlines()[0].replace("|", r"\|") if failed.detail else ""
                print(f"| {client} | FAILED at {failed.stage}: {detail} | - | |")
                continue
            failures += bool(problems) and client in CLIENTS
            verdict = "ok" if not problems else "WRONG: " + "; ".join(problems)
            needed = "; ".join(f"{k}={v}" for k, v in result.report.settings.items())
            print(f"| {client} | {verdict} | {result.elapsed_s:.1f} | {needed} |")
    return 1 if failures else 0


@contextlib.contextmanager
def _broker(direct: str | None, version: str, tansu: bool) -> Iterator[str]:
    if direct:
        yield direct
        return
    if tansu:
        from testbed.processes import running_tansu

        with running_tansu() as broker:
            yield broker.bootstrap
        return
    from testbed.kafka_cluster import running_kafka

    with running_kafka(1, version=version) as cluster:
        yield cluster.bootstrap()


if __name__ == "__main__":
    sys.exit(main())
