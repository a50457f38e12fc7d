"""A broker directory over a plain dict, for the rewriting tests: node n is served at the
proxy's port 20000 + n."""

from __future__ import annotations

from proxy.address import Address
from proxy.routing.topic_names import TopicNames

__all__ = ["PROXY_HOST", "Directory"]

PROXY_HOST = "proxy.local"


class Directory:
    """Our BrokerDirectory interface over a plain dict: node n is served at port 20000 + n."""

    def __init__(self) -> None:
        self.upstream: dict[int, Address] = {}
        self.topic_names = TopicNames()

    def advertise(self, node_id: int, upstream: Address) -> Address:
        self.upstream[node_id] = upstream
        return Address(PROXY_HOST, 20000 + node_id)

    def learn_brokers(self, brokers: dict[int, Address]) -> None:
        self.upstream.update(brokers)
