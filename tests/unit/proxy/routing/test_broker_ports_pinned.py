"""A broker port the configuration pins, when it cannot be bound: which errors name the setting.

Only what the port itself refuses (taken, not this host's, privileged) is the setting's fault,
and then the error says which setting pins it; a port the OS chooses, or a bind that fails for
want of descriptors, stays a plain StartupError (the refresher retries those).
"""

from __future__ import annotations

import errno

import pytest

from proxy.address import Address
from proxy.errors import BrokerPortUnavailable, StartupError
from proxy.routing.directory import BrokerDirectory
from proxy.routing.table import Routing
from proxy.routing.topic_names import TopicNames

UPSTREAM = Address("kafka-1", 9092)


class _Refusing:
    """Binds nothing: every port fails with ``code``, as bind_socket_listener reports it."""

    def __init__(self, code: int) -> None:
        self.code = code

    def open_broker(self, node_id: int, wanted_port: int) -> int:
        cause = OSError(self.code, "refused")
        raise StartupError(f"cannot listen on 127.0.0.1:{wanted_port}: refused") from cause


def _directory(routing: Routing, code: int) -> BrokerDirectory:
    return BrokerDirectory(routing, _Refusing(code), "127.0.0.1", TopicNames())


@pytest.mark.parametrize("code", [errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES])
def test_a_port_pinned_by_broker_ports_names_it(code: int) -> None:
    directory = _directory(Routing({7: 9300}, 0), code)
    with pytest.raises(BrokerPortUnavailable) as raised:
        directory.advertise(7, UPSTREAM)
    assert str(raised.value) == (
        "cannot listen on 127.0.0.1:9300: refused: it is broker 7's port, which "
        "[proxy.broker_ports] pins: map node 7 to a free port there"
    )


def test_a_port_counted_from_first_broker_port_names_it() -> None:
    directory = _directory(Routing({}, 9300), errno.EADDRINUSE)
    with pytest.raises(BrokerPortUnavailable, match=r"counted up from proxy\.first_broker_port"):
        directory.advertise(3, UPSTREAM)


@pytest.mark.parametrize(
    ("routing", "code"),
    [(Routing({}, 0), errno.EADDRINUSE), (Routing({}, 9300), errno.EMFILE)],
    ids=["os-chooses", "out-of-descriptors"],
)
def test_other_failures_stay_plain_startup_errors(routing: Routing, code: int) -> None:
    with pytest.raises(StartupError) as raised:
        _directory(routing, code).advertise(1, UPSTREAM)
    assert type(raised.value) is StartupError
