# Strategy: a measurement of an idea, not a feature. Can SO_REUSEPORT worker processes raise
# the per-request ceiling of a Python proxy? K proxy processes bind the same bootstrap port and
# the same broker port with SO_REUSEPORT (the kernel spreads connections over them; this
# module's --serve mode patches the proxy's listener binding for that and changes nothing
# else), M producer processes send one record per Produce request at once, and the aggregate
# requests/s and the proxies' CPU are compared for K = 1 and K = 2 (and direct), rounds
# interleaved. Each worker has its own purgatory and pool, which a real design would size as
# a share of the memory limit; fetch sessions would need clients to stay on one worker.
"""Prototype measurement: one proxy process vs two behind one port with SO_REUSEPORT."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import socket
import sys
import time
from collections.abc import Iterator

__all__ = ["main"]


def _serve(argv: list[str]) -> None:
    """Run the proxy with every listener bound with SO_REUSEPORT (the prototype's only change)."""
    import trio

    import proxy.connection.listeners as listeners
    from proxy.cli import main as proxy_main

    def bind(host: str, port: int) -> trio.SocketListener:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
        return trio.SocketListener(trio.socket.from_stdlib_socket(sock))

    listeners.bind_socket_listener = bind  # type: ignore[assignment]
    sys.argv = ["purgatory-proxy", *argv]
    sys.exit(proxy_main())


@contextlib.contextmanager
def _proxies(workers: int, upstream: str) -> Iterator[tuple[str, list[int]]]:
    from testbed.processes import free_port, running_process

    port, broker_port = free_port(), free_port()
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "PURGATORY_PROXY_PROXY__FIRST_BROKER_PORT": str(broker_port)}  # fmt: skip
    command = [sys.executable, "-m", "bench.throughput.reuseport_prototype", "--serve", "run",
               "--listen", f"127.0.0.1:{port}", "--upstream", upstream]  # fmt: skip
    with contextlib.ExitStack() as stack:
        pids = [stack.enter_context(running_process(command, port, env=env))
                for _ in range(workers)]  # fmt: skip
        yield f"127.0.0.1:{port}", pids


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from bench.throughput.load import produce_throughput

    produce_throughput(bootstrap, topic, 100, count, 1)


def _cell(route: str, producers: int, count: int) -> tuple[float, float]:
    """Aggregate requests/s and proxy CPU µs per request for one fresh broker and route."""
    import psutil

    from bench.throughput.load import create_topic
    from testbed.processes import running_tansu

    with running_tansu() as broker, contextlib.ExitStack() as stack:
        bootstrap, pids = broker.bootstrap, []
        if route != "direct":
            bootstrap, pids = stack.enter_context(_proxies(int(route[0]), broker.bootstrap))
        topics = [create_topic(bootstrap) for _ in range(producers)]
        before = [sum(psutil.Process(p).cpu_times()[:2]) for p in pids]
        started = time.perf_counter()
        jobs = [multiprocessing.Process(target=_produce, args=(bootstrap, t, count))
                for t in topics]  # fmt: skip
        for job in jobs:
            job.start()
        for job in jobs:
            job.join()
        elapsed = time.perf_counter() - started
        spent = [
            sum(psutil.Process(p).cpu_times()[:2]) - b for p, b in zip(pids, before, strict=True)
        ]
        cpu = sum(spent)
        if len(pids) > 1:  # whether the kernel spread the connections over the workers
            print("  CPU s per worker:", [round(s, 2) for s in spent])
        total = producers * count
        return total / elapsed, 1e6 * cpu / total if pids else 0.0


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--serve"]:
        _serve(args[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--count", type=int, default=5000, help="records per producer")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(args)
    routes = ["direct", "1 proxy", "2 proxies"]
    results: dict[str, list[tuple[float, float]]] = {route: [] for route in routes}
    for round_no in range(options.rounds):
        turn = routes[round_no % 3 :] + routes[: round_no % 3]
        for route in turn:
            rate, cpu = _cell(route, options.producers, options.count)
            results[route].append((rate, cpu))
            print(f"round {round_no + 1} {route}: {rate:,.0f} requests/s, proxy CPU {cpu:.0f} µs")
    for route in routes:
        rates = sorted(r for r, _ in results[route])
        cpus = sorted(c for _, c in results[route])
        print(f"| {route} | {rates[len(rates) // 2]:,.0f} | {cpus[len(cpus) // 2]:.0f} |")


if __name__ == "__main__":
    main()
