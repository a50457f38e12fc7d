# Strategy: SNI mode's host names (bootstrap.kafka.test, broker-N.kafka.test) must resolve to
# the proxy for the clients, and for nothing else on the machine. Each client process runs in
# a mount namespace of its own (unshare(1) of util-linux, as an unprivileged user namespace
# mapped to root, so no privilege is needed) where the test's hosts file is bind-mounted over
# /etc/hosts: every resolver (glibc's, Java's, Go's) reads it, and the machine's own file is
# never touched. Nothing else changes: the network namespace is the machine's.
"""Run a client command with the test's hosts file as its /etc/hosts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["with_hosts", "write_hosts"]

_BIND_AND_EXEC = 'mount --bind "$0" /etc/hosts && exec "$@"'


def with_hosts(hosts_file: str | None, command: Sequence[str]) -> list[str]:
    """``command``, run where ``hosts_file`` is /etc/hosts (None: as it is)."""
    if hosts_file is None:
        return list(command)
    return ["unshare", "--map-root-user", "--mount", "sh", "-c", _BIND_AND_EXEC, hosts_file,
            *command]  # fmt: skip


def write_hosts(path: Path, names: Sequence[str], address: str = "127.0.0.1") -> str:
    """A hosts file that sends ``names`` to ``address`` (and localhost where it belongs)."""
    path.write_text(
        f"127.0.0.1 localhost\n::1 localhost ip6-localhost\n{address} {' '.join(names)}\n"
    )
    return str(path)
