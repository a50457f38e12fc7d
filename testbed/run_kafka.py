"""`make run-kafka`: the proxy in front of a local one-node Apache Kafka, for trying the real thing.

The broker (the suite's pinned 4.x, from Maven Central) runs on a free loopback port with its
data in a temporary folder; the proxy runs in the foreground with every argument given here
(``make run-kafka ARGS="--listen 127.0.0.1:9092"``). Ctrl-C stops the proxy, then the broker.
``--nodes 3`` starts three brokers (replication factor 3, min ISR 2).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from types import FrameType

from testbed.kafka_cluster import running_kafka
from testbed.kafka_install import KAFKA_LINES, KAFKA_VERSION


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops it as Ctrl-C does: the proxy, then the broker and its data folder."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.run_kafka", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1, help="Kafka nodes (default 1)")
    parser.add_argument("--kafka-version", default=KAFKA_VERSION, choices=KAFKA_LINES)
    args, proxy_args = parser.parse_known_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    print(f"run-kafka: starting Apache Kafka {args.kafka_version} ({args.nodes} node(s))")
    with running_kafka(args.nodes, version=args.kafka_version) as cluster:
        print(f"run-kafka: Kafka is serving at {cluster.bootstrap()} (logs in {cluster.directory})")
        command = [sys.executable, "-m", "proxy", "run", "--upstream", cluster.bootstrap()]
        try:
            return subprocess.call([*command, *proxy_args])
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
