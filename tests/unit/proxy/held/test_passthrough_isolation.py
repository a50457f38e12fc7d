"""Isolation between identities in client_auth = "passthrough" (issue 29), in process against
a scripted broker with SASL PLAIN accounts and per-principal fetch denials, in virtual time:
one identity's errors never reach the proxy's shared knowledge (nor wake another identity's
held fetches), a connection stops being answered from that knowledge once the cluster denies
it, no answer carries a partition the cluster did not return on that connection, and fetch
session ids cannot be predicted."""

from __future__ import annotations

import random

import trio
import trio.testing

from proxy.held.fetch.session import FetchSessionCache
from tests.support.fetch_requests import fetch_partitions
from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import fetch
from tests.support.passthrough_clients import (
    PASSTHROUGH,
    accepted_client,
    broker_with_accounts,
    only_partition,
)
from tests.support.scripted_broker import TOPIC_AUTHORIZATION_FAILED
from wire.messages import FetchRequest


def _principals(fetch_log: list[object]) -> list[str | None]:
    return [entry.principal for entry in fetch_log]  # type: ignore[attr-defined]


async def test_a_denied_identity_neither_wakes_another_ones_held_fetch_nor_enters_shared_knowledge(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    broker.append("t", 0, b"abc")
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        held = proxy.running.services.held
        assert held is not None
        alice = await accepted_client(proxy, "alice", "alice-secret")
        await alice.send(fetch(offset=0, max_wait_ms=500), 12)
        await alice.receive()
        sent = trio.current_time()
        await alice.send(fetch(offset=1, max_wait_ms=5000), 12)  # at the end: held
        bob = await accepted_client(proxy, "bob", "bob-secret")
        for _ in range(3):
            await trio.sleep(0.5)
            await bob.send(fetch(offset=1, max_wait_ms=500), 12)
            _, response, _ = await bob.receive()
            denied = only_partition(response)
            assert denied.error_code == TOPIC_AUTHORIZATION_FAILED
            assert denied.high_watermark == -1 and not denied.records
            state = held.states.get(("t", 0))
            assert state is not None and (state.error_code, state.high_watermark) == (0, 1)
        _, response, at = await alice.receive()
        assert round(at - sent, 3) == 5.0  # held its whole max wait
        assert only_partition(response).error_code == 0
        # Alice's reads: her first fetch and her held fetch's first look. Bob's three denials
        # woke nothing of hers (each would have cost a re-fetch as alice).
        assert _principals(broker.fetch_log).count("alice") == 2
        assert _principals(broker.fetch_log).count("bob") == 3


async def test_once_the_cluster_denies_a_connection_it_gets_no_answer_from_what_others_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    broker.users["carol"] = "carol-secret"
    broker.append("t", 0, b"abc")
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        alice = await accepted_client(proxy, "alice", "alice-secret")
        await alice.send(fetch(offset=0, max_wait_ms=500), 12)
        await alice.receive()
        await alice.send(fetch(offset=1, max_wait_ms=500), 12)
        _, response, _ = await alice.receive()
        assert only_partition(response).error_code == 0

        broker.fetch_denied.add("alice")  # her Read ACL is revoked
        await trio.sleep(1.0)  # nothing held meanwhile: the proxy's knowledge is not current
        await alice.send(fetch(offset=1, max_wait_ms=500), 12)  # so the cluster is asked
        _, response, _ = await alice.receive()
        assert only_partition(response).error_code == TOPIC_AUTHORIZATION_FAILED

        carol = await accepted_client(proxy, "carol", "carol-secret")
        await carol.send(fetch(offset=1, max_wait_ms=3000), 12)  # read as carol, then held
        await trio.sleep(0.2)
        asked = len(broker.fetch_log)
        sent = trio.current_time()
        await alice.send(fetch(offset=1, max_wait_ms=500), 12)
        _, response, at = await alice.receive()
        # Not "nothing new" from what carol's read taught the proxy: the cluster's answer.
        denied = only_partition(response)
        assert denied.error_code == TOPIC_AUTHORIZATION_FAILED and denied.high_watermark == -1
        assert round(at - sent, 6) == 0.0
        assert _principals(broker.fetch_log[asked:]) == ["alice"]
        await carol.receive()


def _fetch_two(offset: int, max_wait_ms: int) -> FetchRequest:
    """A sessionless fetch of u/0 and u/1 at ``offset``."""
    return fetch_partitions({"u": (0, 1)}, offset=offset, max_wait_ms=max_wait_ms)


async def test_a_partition_the_cluster_left_out_is_not_filled_in_from_what_others_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = broker_with_accounts()
    broker.fetch_denied = {None}
    broker.create_topic("u", 2)
    broker.append("u", 0, b"a")
    broker.append("u", 1, b"b")
    broker.fetch_withheld = {"bob": {("u", 1)}}
    async with proxy_in_process(broker, proxy=PASSTHROUGH) as proxy:
        alice = await accepted_client(proxy, "alice", "alice-secret")
        await alice.send(_fetch_two(offset=0, max_wait_ms=500), 12)
        _, response, _ = await alice.receive()
        assert sorted(p.partition_index for p in response.responses[0].partitions) == [0, 1]

        bob = await accepted_client(proxy, "bob", "bob-secret")
        sent = trio.current_time()
        await bob.send(_fetch_two(offset=1, max_wait_ms=2000), 12)
        _, response, at = await bob.receive()
        # The cluster's answer to bob, as it is, at once: u/1 is not reported from alice's read.
        [topic] = response.responses
        assert [p.partition_index for p in topic.partitions] == [0]
        assert round(at - sent, 6) == 0.0
        assert _principals(broker.fetch_log).count("bob") == 1


def test_fetch_session_ids_are_not_predictable_from_pythons_random() -> None:
    ids = []
    for _ in range(2):
        random.seed(29)  # whatever state `random` is in, a session id does not follow from it
        ids.append(FetchSessionCache().maybe_create({}, False, 0))
    assert ids[0] != ids[1]
    assert all(1 <= session_id < 2**31 for session_id in ids)
