"""``make run`` and ``make run-kafka``: say that a taken metrics port is the Makefile's METRICS.

Why: the Makefile serves /metrics on 127.0.0.1:9464 by default, so a second ``make run``
fails on that port, and the proxy's own line ("cannot listen on 127.0.0.1:9464") cannot know
the address came from the Makefile. This check runs first and names the variable to change.

    python -m testbed.port_free --target run 127.0.0.1:9464    # exit 0 if it can be bound
"""

from __future__ import annotations

import argparse
import socket
import sys

__all__ = ["main", "why_taken"]


def why_taken(address: str) -> str | None:
    """Why ``HOST:PORT`` cannot be bound here (None: it can, or it is no HOST:PORT at all,
    which the proxy itself reports, naming --metrics)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return None
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError as error:
            return (error.strerror or str(error)).lower()
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.port_free", description=__doc__)
    parser.add_argument("--target", default="run", help="the make target, for the message")
    parser.add_argument("address", help="the Makefile's METRICS, HOST:PORT")
    args = parser.parse_args(argv)
    reason = why_taken(args.address)
    if reason is None:
        return 0
    print(
        f"make {args.target}: cannot serve /metrics on {args.address}, the Makefile's METRICS: "
        f"{reason} (another make run?). Pick another port, make {args.target} "
        f"METRICS=127.0.0.1:9465, or none, make {args.target} METRICS=",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
