# Strategy: argparse (stdlib) parses the command line; every flag becomes an override on top of
# the pydantic configuration, so flags, env vars and the TOML file share one validation path
# and one error format. The process's lifetime is one trio.run: signals end it cleanly.
"""The ``purgatory-proxy`` command line: ``run``, ``dev-broker`` and ``report``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import trio

from pipeline import command as pipeline_command
from proxy.config import Config, ConfigError, load_config, parse_host_port
from proxy.embedded_broker import run_embedded_broker
from proxy.routing import Address

__all__ = ["main"]

log = logging.getLogger("purgatory_proxy")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="purgatory-proxy",
        description="Kafka-compatible sidecar proxy with its own purgatory and one bytes limit.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the proxy")
    run.add_argument("--config", type=Path, help="TOML configuration file")
    run.add_argument("--listen", metavar="HOST:PORT", help="bootstrap listener")
    run.add_argument(
        "--upstream",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="upstream bootstrap servers; none configured = start the embedded Tansu broker",
    )
    run.add_argument("--advertised-host", metavar="HOST", help="host clients are told to use")
    run.add_argument("--memory-limit", metavar="BYTES", help="pool size, e.g. 64MiB; -1 = off")
    run.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument("--metrics", metavar="HOST:PORT", help="serve /metrics, /healthz, /readyz")
    run.add_argument("--request-log", metavar="PATH", help="JSON-lines log of every request")

    broker = commands.add_parser("dev-broker", help="run the embedded Tansu broker alone")
    broker.add_argument("--port", type=int, default=9092, help="loopback port (default 9092)")

    report = commands.add_parser(
        "report", help="analyse request logs with PySpark (needs the [pipeline] extra)"
    )
    pipeline_command.add_arguments(report)
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Turn the flags that were given into ``{section: {key: value}}`` overrides."""
    overrides: dict[str, dict[str, Any]] = {}

    def put(section: str, key: str, value: Any) -> None:
        if value is not None:
            overrides.setdefault(section, {})[key] = value

    put("proxy", "listen", args.listen)
    put("proxy", "advertised_host", args.advertised_host)
    if args.upstream is not None:
        put("upstream", "bootstrap", [part for part in args.upstream.split(",") if part])
    put("memory", "limit", args.memory_limit)
    put("log", "level", args.log_level)
    put("metrics", "listen", args.metrics)
    put("log", "requests", args.request_log)
    return overrides


async def _until_signal(
    cancel_scope: trio.CancelScope, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Cancel ``cancel_scope`` on the first SIGTERM or SIGINT (started once they are caught)."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            cancel_scope.cancel()
            return


async def _run(config: Config) -> None:
    from proxy.server import serve  # the server pulls in the codec; keep --help fast

    async with trio.open_nursery() as nursery:
        shutdown = trio.CancelScope()
        await nursery.start(_until_signal, shutdown)
        upstream = [Address(*parse_host_port(item)) for item in config.upstream.bootstrap]
        if not upstream:
            broker: Address = await nursery.start(run_embedded_broker)
            log.info(
                "no upstream configured: started the embedded Tansu broker on %s "
                "(memory storage; its data is gone when the proxy stops)",
                broker,
            )
            upstream = [broker]
        await serve(config, upstream, shutdown)
        nursery.cancel_scope.cancel()


async def _dev_broker(port: int) -> None:
    async with trio.open_nursery() as nursery:
        stop = trio.CancelScope()
        await nursery.start(_until_signal, stop)
        address: Address = await nursery.start(run_embedded_broker, port)
        log.info("embedded Tansu broker listening on %s (memory storage)", address)
        with stop:
            await trio.sleep_forever()
        nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.command == "dev-broker":
        trio.run(_dev_broker, args.port)
        return 0
    if args.command == "report":
        return pipeline_command.run(args)
    try:
        config = load_config(args.config, _overrides(args))
    except ConfigError as error:
        print(f"purgatory-proxy: {error}", file=sys.stderr)
        return 2
    logging.getLogger().setLevel(config.log.level)
    trio.run(_run, config)
    return 0
