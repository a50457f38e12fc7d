# Strategy: in SNI mode one TLS port serves the whole cluster. Clients are told a host name per
# broker, made from a pattern such as `broker-{node_id}.kafka.example.com`, all on that one
# port; the name a client sends in its TLS hello then says which broker the connection stands
# for, as a port does in the default mode. DNS names compare without regard to case (RFC 4343)
# and a trailing dot names the same host. Pure: the TLS handshake asks, the listener routes.
"""Server names of SNI mode: the name told for each broker, the broker a name stands for."""

from __future__ import annotations

import re

__all__ = ["NODE_ID", "ServerNames", "UnknownServerName"]

#: The placeholder of the broker name pattern.
NODE_ID = "{node_id}"


class UnknownServerName(ValueError):
    """A TLS hello named no host this proxy serves (or none at all)."""


class ServerNames:
    """The bootstrap name and the brokers' name pattern of SNI mode.

    Args:
        bootstrap_host: the name clients bootstrap with.
        broker_host: the brokers' names, with ``{node_id}`` where the node id goes.
    """

    __slots__ = ("_broker", "_prefix", "_suffix", "bootstrap_host", "broker_host")

    def __init__(self, bootstrap_host: str, broker_host: str) -> None:
        if broker_host.count(NODE_ID) != 1:
            raise ValueError(f"the broker name pattern needs {NODE_ID} once: {broker_host!r}")
        self.bootstrap_host = _canonical(bootstrap_host)
        self.broker_host = broker_host
        prefix, suffix = _canonical(broker_host).split(NODE_ID.lower())
        self._prefix, self._suffix = prefix, suffix
        self._broker = re.compile(re.escape(prefix) + "([0-9]{1,10})" + re.escape(suffix))

    def __repr__(self) -> str:
        return f"<ServerNames {self.bootstrap_host} {self.broker_host}>"

    def of_broker(self, node_id: int) -> str:
        """The host name clients are told for broker ``node_id``."""
        return f"{self._prefix}{node_id}{self._suffix}"

    def route(self, server_name: str | None) -> int | None:
        """The broker ``server_name`` stands for, or None for the bootstrap name.

        Raises:
            UnknownServerName: no name, or one that is neither the bootstrap name nor a
                broker's (the message quotes it).
        """
        if not server_name:
            raise UnknownServerName("the TLS hello named no server (SNI is required here)")
        name = _canonical(server_name)
        if name == self.bootstrap_host:
            return None
        match = self._broker.fullmatch(name)
        if match is None or str(int(match[1])) != match[1]:  # one spelling per node id
            raise UnknownServerName(
                f"the TLS hello named {server_name!r}, which is neither {self.bootstrap_host} "
                f"nor a broker's name ({self.broker_host})"
            )
        return int(match[1])


def _canonical(name: str) -> str:
    return name.lower().removesuffix(".")
