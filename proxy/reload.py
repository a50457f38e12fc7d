# Strategy: SIGHUP means "re-read your files", as for most daemons: here the listeners'
# certificate, key, client CA and revocation list (proxy.security.tls.ServerTls) and the upstream CA
# and client certificate (proxy.security.tls.UpstreamTls). One task owns the signal for the whole
# life of serve(), with TLS or without, so a SIGHUP never falls through to its default action, which
# ends the process at once (exit 129, no drain). Each part keeps its previous files when the
# new ones do not load; a reload is one log line per part (its own, naming files, never their
# content) and one count in purgatory_proxy_tls_reloads_total{side, result}.
#
# Passwords and tokens are not in here: they are read at every authentication
# (proxy/security/secure_upstream.py), so rotating their files needs no signal.
"""SIGHUP: reload the TLS files, or say that there is nothing to reload."""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from typing import Protocol

import trio
from prometheus_client import Counter

__all__ = ["Reloadable", "reload_on_sighup"]

log = logging.getLogger("purgatory_proxy.reload")


class Reloadable(Protocol):
    """Files re-read on SIGHUP; ``reload`` logs its own outcome and says whether it worked."""

    @property
    def side(self) -> str: ...

    def reload(self) -> bool: ...


async def reload_on_sighup(
    parts: Sequence[Reloadable],
    reloads: Counter,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Reload ``parts`` at each SIGHUP, counting each outcome in ``reloads`` (labels side and
    result: ok, failed); started once the signal is caught. Runs until cancelled."""
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            if not parts:
                log.info("received SIGHUP: no TLS files to reload ([proxy.tls], [upstream.tls])")
            for part in parts:
                reloads.labels(part.side, "ok" if part.reload() else "failed").inc()
