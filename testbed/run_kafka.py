"""`make run-kafka`: the proxy in front of a local Apache Kafka, for trying the real thing.

The broker (4.4.0 unless ``--kafka-version``; only that version is resolved from Maven Central,
once, into ~/.cache/purgatory-proxy) runs on free loopback ports with its data and logs in a
temporary folder, removed when it stops, also after a failure. The proxy runs in the
foreground with every other argument (``make run-kafka ARGS="--listen 127.0.0.1:9092"``).
SIGTERM or Ctrl-C goes to the proxy, once: it drains and exits 0, then the broker stops and
its folder goes. ``--nodes 3`` starts three brokers (replication factor 3, min ISR 2).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

from testbed.kafka_cluster import running_kafka
from testbed.kafka_install import KAFKA_LINES, KAFKA_VERSION, ensure_kafka, is_installed
from testbed.processes import die_with_parent

__all__ = ["main"]


class _Stop:
    """SIGTERM and SIGINT: before the proxy runs, abort the start (the context managers stop
    the broker and remove its folder); once it runs, pass the first signal on to it and wait
    for its drain. A second signal would cut the drain short (trio's default handlers are
    back by then), so it is not passed on."""

    def __init__(self) -> None:
        self.proxy: subprocess.Popen[bytes] | None = None
        self.forwarded = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.proxy is None:
            raise KeyboardInterrupt
        if self.forwarded:
            _say(f"{name} again: still waiting for the proxy's drain, then Kafka stops")
            return
        self.forwarded = True
        self.proxy.send_signal(signum)


_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def _proxy_child() -> None:
    """Runs in the proxy's process before exec: it dies with us, even by SIGKILL, and takes
    SIGTERM and SIGINT again (the mask it was forked with blocks them)."""
    die_with_parent()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def _say(text: str) -> None:
    print(f"run-kafka: {text}", flush=True)


def _kafka_logs(folder: Path) -> str:
    """The end of each node's server log, shown before the folder is removed."""
    tails = [
        f"--- {log.relative_to(folder)} (last lines) ---\n"
        + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        for log in sorted(folder.glob("node-*/server.log"))
    ]
    return "\n".join(tails)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.run_kafka", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1, help="Kafka nodes (default 1)")
    parser.add_argument("--kafka-version", default=KAFKA_VERSION, choices=KAFKA_LINES)
    args, proxy_args = parser.parse_known_args(argv)
    version = args.kafka_version
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        if not is_installed(version):
            _say(f"resolving Apache Kafka {version} from Maven Central (once, into the cache)")
        ensure_kafka(version)
        return _run(version, args.nodes, proxy_args, stop)
    except KeyboardInterrupt:
        _say("stopped before the proxy started; Kafka stopped and its folder removed")
        return 0
    except RuntimeError as error:  # Maven, or a broker that did not start
        print(f"run-kafka: {error}", file=sys.stderr, flush=True)
        return 1


def _run(version: str, nodes: int, proxy_args: list[str], stop: _Stop) -> int:
    _say(f"starting Apache Kafka {version} ({nodes} node(s))")
    with tempfile.TemporaryDirectory(prefix=f"run-kafka-{version}-") as name:
        folder = Path(name)
        try:
            with running_kafka(nodes, version=version, directory=folder) as cluster:
                _say(f"Kafka is serving at {cluster.bootstrap()} (data and logs in {folder})")
                command = [sys.executable, "-m", "proxy", "run", "--upstream", cluster.bootstrap()]
                # Its own process group: a Ctrl-C reaches the proxy once, from here, and the
                # broker (in a group of its own too) keeps serving while the proxy drains.
                # Signals wait until `stop` knows the proxy, so none falls between the two.
                signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
                try:
                    proxy = subprocess.Popen(
                        [*command, *proxy_args], process_group=0, preexec_fn=_proxy_child
                    )
                    stop.proxy = proxy
                finally:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
                code = proxy.wait()
                _say(f"the proxy exited with status {code}; stopping Kafka")
        except RuntimeError:
            print(_kafka_logs(folder), file=sys.stderr, flush=True)
            raise
    _say(f"Kafka stopped; removed {folder}")
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's convention


if __name__ == "__main__":
    raise SystemExit(main())
