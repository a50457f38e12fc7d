"""Apache Kafka for the tests, resolved from Maven Central into a cache outside the repo.

Why Maven and not a release tarball: the machines reach Maven Central, and the broker is an
ordinary artifact there (``org.apache.kafka:kafka_2.13``) whose POM lists every module it runs
with. ``mvn dependency:copy-dependencies`` over testbed/kafka/pom.xml copies that classpath
into ``<cache>/kafka-<version>/libs``; the broker is then ``java -cp 'libs/*' kafka.Kafka``.
A finished install is marked by a stamp file, so a second call costs nothing and an
interrupted one is redone.

``ensure_kafka_tools`` resolves Kafka's verifiable clients (the kafka-tools jar, over
testbed/kafka/tools-pom.xml) the same way into ``<cache>/kafka-tools-<version>/libs``: the
clients Kafka's system tests judge brokers with, which the fault tests run (testbed/kafka_tools.py).
``resolve_classpath`` does the same for any such POM (bench.peers resolves Kroxylicious so).

``python -m testbed.kafka_install`` installs every pinned line and the newest line's tools
(``make test`` and ``make kafka`` run it); ``--version V`` one line, without the tools
(``make run-kafka`` resolves only the one it runs); ``--print-libs`` prints the classpath
folder; ``--print-clients-jar`` prints the kafka-clients
jar of the newest line (or of ``--version``), whose message schemas wire's generated tables
follow (``python -m wire._generate --jar``).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "KAFKA_LINES",
    "KAFKA_VERSION",
    "cache_root",
    "ensure_kafka",
    "ensure_kafka_tools",
    "is_installed",
    "kafka_clients_jar",
    "main",
    "resolve_classpath",
]

#: The newest 4.x and the last 3.x line, the two that users run.
KAFKA_LINES = ("4.4.0", "3.9.2")
#: The broker of the suite unless a test asks for another line ($KAFKA_VERSION overrides).
KAFKA_VERSION = os.environ.get("KAFKA_VERSION", KAFKA_LINES[0])

_POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
_TOOLS_POM = _POM.with_name("tools-pom.xml")
_STAMP = ".installed"


def cache_root() -> Path:
    """Where downloaded tools live: $PURGATORY_CACHE, else ~/.cache/purgatory-proxy."""
    configured = os.environ.get("PURGATORY_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "purgatory-proxy"


def _install_dir(version: str) -> Path:
    return cache_root() / f"kafka-{version}"


def is_installed(version: str) -> bool:
    """Whether Kafka ``version`` is in the cache already (``ensure_kafka`` costs nothing)."""
    return (_install_dir(version) / _STAMP).exists()


def ensure_kafka(version: str = KAFKA_VERSION) -> Path:
    """The folder of Kafka ``version``'s runtime jars, resolving them first if needed.

    Raises:
        RuntimeError: Maven failed (its output is in the message).
    """
    return resolve_classpath(
        _POM, _install_dir(version), {"kafka.version": version}, f"kafka_2.13-{version}.jar"
    )


def _tools_dir(version: str) -> Path:
    return cache_root() / f"kafka-tools-{version}"


def ensure_kafka_tools(version: str = KAFKA_VERSION) -> Path:
    """The folder of Kafka ``version``'s verifiable clients and their runtime jars (a
    classpath of its own: the broker's lacks kafka-tools), resolving them first if needed.

    Raises:
        RuntimeError: Maven failed (its output is in the message).
    """
    return resolve_classpath(
        _TOOLS_POM, _tools_dir(version), {"kafka.version": version}, f"kafka-tools-{version}.jar"
    )


def resolve_classpath(
    pom: Path, home: Path, properties: Mapping[str, str], expected_jar: str
) -> Path:
    """``home``/libs: the runtime classpath of ``pom`` (with ``properties`` set) from Maven
    Central, resolved on the first call; ``expected_jar`` must be among the jars.

    Raises:
        RuntimeError: Maven is missing or failed (its output is in the message).
    """
    libs = home / "libs"
    if (home / _STAMP).exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Maven (mvn) is not on PATH: it resolves {pom} from Maven Central")
    home.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=home))
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom),
        *(f"-D{key}={value}" for key, value in properties.items()),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not any(staging.glob(expected_jar)):
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(
            f"resolving {expected_jar} from Maven Central ({pom.name}) failed "
            f"(exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    (home / _STAMP).write_text(f"{time.monotonic() - started:.1f} s\n")
    return libs


def kafka_clients_jar(version: str = KAFKA_VERSION) -> Path:
    """The kafka-clients jar of ``version`` (the Java client, and Kafka's message schemas)."""
    return ensure_kafka(version) / f"kafka-clients-{version}.jar"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.kafka_install", description=__doc__)
    parser.add_argument("--version", choices=KAFKA_LINES, help="only this line")
    parser.add_argument("--print-libs", action="store_true", help="print the classpath folder")
    parser.add_argument(
        "--print-clients-jar",
        action="store_true",
        help="print the kafka-clients jar of the newest line, or of --version (the schemas of "
        "wire's generated tables)",
    )
    args = parser.parse_args(argv)
    if args.print_clients_jar:
        try:
            print(kafka_clients_jar(args.version or KAFKA_LINES[0]))
        except RuntimeError as exc:
            print(f"kafka-install: {exc}", file=sys.stderr)
            return 1
        return 0
    wanted = [
        (f"Apache Kafka {version}", _install_dir(version), functools.partial(ensure_kafka, version))
        for version in ([args.version] if args.version else KAFKA_LINES)
    ]
    if not args.version:  # the fault tests run Kafka's verifiable clients of the newest line
        tools = functools.partial(ensure_kafka_tools, KAFKA_LINES[0])
        wanted.append((f"Kafka's tools {KAFKA_LINES[0]}", _tools_dir(KAFKA_LINES[0]), tools))
    for what, home, ensure in wanted:
        fresh = not (home / _STAMP).exists()
        started = time.monotonic()
        try:
            libs = ensure()
        except RuntimeError as exc:
            print(f"kafka-install: {exc}", file=sys.stderr)
            return 1
        if args.print_libs:
            print(libs)
        elif fresh:
            took = time.monotonic() - started
            print(f"kafka-install: {what} resolved into {libs} in {took:.0f} s")
        else:
            print(f"kafka-install: {what} already in {libs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
