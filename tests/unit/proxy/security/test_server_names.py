"""SNI mode's names: what each broker is told as, and which broker a hello's name stands for."""

from __future__ import annotations

import pytest

from proxy.security.server_names import ServerNames, UnknownServerName

NAMES = ServerNames("bootstrap.kafka.example.com", "broker-{node_id}.kafka.example.com")


def test_each_broker_is_told_its_own_name_and_that_name_routes_back_to_it() -> None:
    for node_id in (0, 1, 7, 2147483647):
        assert NAMES.route(NAMES.of_broker(node_id)) == node_id
    assert NAMES.of_broker(3) == "broker-3.kafka.example.com"


def test_the_bootstrap_name_routes_to_no_broker() -> None:
    assert NAMES.route("bootstrap.kafka.example.com") is None


def test_dns_names_match_whatever_their_case_and_with_a_trailing_dot() -> None:
    assert NAMES.route("Broker-2.KAFKA.example.com") == 2
    assert NAMES.route("broker-2.kafka.example.com.") == 2
    assert NAMES.route("BOOTSTRAP.kafka.example.com.") is None
    upper = ServerNames("Boot.Example.COM", "B{node_id}.Example.COM")
    assert (upper.route("boot.example.com"), upper.of_broker(4)) == (None, "b4.example.com")


@pytest.mark.parametrize(
    "name",
    [
        "broker-x.kafka.example.com",  # not a node id
        "broker-.kafka.example.com",
        "broker-01.kafka.example.com",  # a second spelling of node 1
        "broker-1.kafka.example.com.evil",
        "xbroker-1.kafka.example.com",
        "kafka.example.com",
        "127.0.0.1",
    ],
)
def test_a_name_that_is_neither_the_bootstrap_nor_a_brokers_is_refused(name: str) -> None:
    with pytest.raises(UnknownServerName, match=r"neither bootstrap\.kafka\.example\.com"):
        NAMES.route(name)


@pytest.mark.parametrize("name", [None, ""])
def test_a_hello_without_a_name_is_refused(name: str | None) -> None:
    with pytest.raises(UnknownServerName, match="named no server"):
        NAMES.route(name)


@pytest.mark.parametrize("pattern", ["broker.kafka.example.com", "{node_id}-{node_id}.example"])
def test_the_pattern_names_the_node_id_once(pattern: str) -> None:
    with pytest.raises(ValueError, match="once"):
        ServerNames("bootstrap.example", pattern)
