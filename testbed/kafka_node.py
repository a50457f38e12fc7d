# Strategy: one KRaft node is one JVM (`java -cp 'libs/*' kafka.Kafka server.properties`) in
# a folder of its own, on ports chosen when the cluster is made and kept across restarts. The
# JVM is asked by the kernel to die with the process that started it (PR_SET_PDEATHSIG), so a
# test killed with -9 leaves no broker behind; otherwise the cluster stops it by PID. JMX, when
# asked for, listens on loopback only, without authentication (testbed/kafka_jmx.py reads it).
"""KafkaNode: one Apache Kafka node's ports, folder and process, and how it is launched."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from testbed.processes import die_with_parent

__all__ = ["HOST", "KafkaNode"]

#: Every listener of every node binds here.
HOST = "127.0.0.1"
_JVM = ["-Xms128m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]


def _jmx_options(port: int | None) -> list[str]:
    """JVM flags for a JMX connector on 127.0.0.1:``port`` (RMI on the same port), or none."""
    if port is None:
        return []
    remote = "-Dcom.sun.management.jmxremote"
    return [
        f"{remote}.port={port}",
        f"{remote}.rmi.port={port}",
        f"{remote}.host={HOST}",
        f"-Djava.rmi.server.hostname={HOST}",
        f"{remote}.authenticate=false",
        f"{remote}.ssl=false",
    ]


@dataclass
class KafkaNode:
    """One broker-and-controller process: its ports, folder and (while running) process."""

    node_id: int
    ports: dict[str, int]
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: Where the node serves JMX (``running_kafka(jmx=True)``), else None.
    jmx_port: int | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def request_log_path(self) -> Path:
        return self.directory / "requests.log"

    def address(self, listener: str = "PLAINTEXT") -> str:
        return f"{HOST}:{self.ports[listener]}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch(self, libs: Path) -> None:
        """Start the node's JVM on its server.properties, its output appended to its log; where
        the log stood is kept in .log-offset, so a restart looks for its own "started" line."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        command = [
            "java",
            *_JVM,
            *_jmx_options(self.jmx_port),
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            "-cp",
            f"{libs}/*",
            "kafka.Kafka",
            str(self.properties_path),
        ]
        self.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            # Its own process group: a Ctrl-C at a terminal reaches whoever started it (who
            # may have a proxy to drain first), not the JVM directly.
            process_group=0,
        )
        log.close()
        self.directory.joinpath(".log-offset").write_text(str(offset))
