"""Connection limits at accept (issue 29; Kafka's KIP-402, KIP-612) as pure bookkeeping with
explicit times, and the descriptor arithmetic the total cap is fitted to."""

from __future__ import annotations

import pytest

from proxy.address import normalize_ip
from proxy.config import ConfigError, load_config
from proxy.connection.admission import ConnectionAdmission, TokenBucket
from proxy.primitives.descriptors import DescriptorBudget


def test_the_total_cap_refuses_the_connection_past_it_until_one_ends() -> None:
    admission = ConnectionAdmission(max_connections=2)
    assert admission.admit("10.0.0.1", 0.0) is None
    assert admission.admit("10.0.0.2", 0.0) is None
    refusal = admission.admit("10.0.0.3", 0.0)
    assert refusal is not None and refusal.reason == "max_connections"
    admission.release("10.0.0.1")
    assert admission.admit("10.0.0.3", 0.0) is None
    assert admission.open == 2


def test_the_per_ip_cap_counts_each_address_and_overrides_replace_it() -> None:
    admission = ConnectionAdmission(
        max_connections=100, max_connections_per_ip=2, per_ip_overrides={"10.0.0.9": 3}
    )
    for _ in range(2):
        assert admission.admit("10.0.0.1", 0.0) is None
    refusal = admission.admit("10.0.0.1", 0.0)
    assert refusal is not None and refusal.reason == "max_connections_per_ip"
    assert admission.admit("10.0.0.2", 0.0) is None  # another address: its own count
    for _ in range(3):
        assert admission.admit("10.0.0.9", 0.0) is None
    refusal = admission.admit("10.0.0.9", 0.0)
    assert refusal is not None and "_overrides: 3" in refusal.detail
    admission.release("10.0.0.1")
    assert admission.admit("10.0.0.1", 0.0) is None
    # A connection with no address (not a socket) is held to the total only.
    assert admission.admit(None, 0.0) is None


def test_zero_per_ip_admits_only_the_addresses_with_overrides() -> None:
    admission = ConnectionAdmission(100, max_connections_per_ip=0, per_ip_overrides={"::1": 1})
    assert admission.admit("10.0.0.1", 0.0) is not None
    assert admission.admit("::1", 0.0) is None


def test_the_creation_rate_admits_one_seconds_worth_at_once_then_the_rate() -> None:
    admission = ConnectionAdmission(100, creation_rate=10)
    admitted = [admission.admit(f"10.0.0.{i}", 0.0) is None for i in range(15)]
    assert admitted.count(True) == 10
    refusal = admission.admit("10.0.0.99", 0.05)
    assert refusal is not None and refusal.reason == "creation_rate"
    assert admission.admit("10.0.0.99", 0.1) is None  # one token a tenth of a second
    assert admission.admit("10.0.0.98", 0.1) is not None


def test_the_per_ip_rate_keeps_one_address_from_using_up_the_others_turns() -> None:
    admission = ConnectionAdmission(100, creation_rate=20, creation_rate_per_ip=5)
    attacker = [admission.admit("10.6.6.6", 0.0) for _ in range(30)]
    assert sum(refusal is None for refusal in attacker) == 5
    assert {r.reason for r in attacker if r is not None} == {"creation_rate_per_ip"}
    # Its refused attempts took nothing of the shared rate: 15 others still get in now.
    assert all(admission.admit(f"10.0.1.{i}", 0.0) is None for i in range(15))
    refusal = admission.admit("10.0.2.1", 0.0)
    assert refusal is not None and refusal.reason == "creation_rate"


def test_idle_rate_buckets_are_dropped_as_new_addresses_come() -> None:
    admission = ConnectionAdmission(10**6, creation_rate_per_ip=1)
    for i in range(5000):  # one connection each from 5,000 addresses, one a millisecond
        assert admission.admit(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", i / 1000) is None
        admission.release(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    # Those older than a second are full again, as good as new: at most ~2 x 1,000 kept.
    assert len(admission._buckets) <= 2048
    assert admission._by_ip == {}


def test_a_token_bucket_holds_at_most_one_seconds_worth() -> None:
    bucket = TokenBucket(4, 0.0)
    assert [bucket.take(0.0) for _ in range(5)] == [True] * 4 + [False]
    assert bucket.take(10.0)  # a long quiet time refills to 4, not to 40
    assert [bucket.take(10.0) for _ in range(4)] == [True] * 3 + [False]


def test_addresses_have_one_spelling() -> None:
    assert normalize_ip("::ffff:10.0.0.1") == "10.0.0.1"
    assert normalize_ip("2001:DB8::1") == "2001:db8::1"
    with pytest.raises(ValueError):
        normalize_ip("kafka-1.example")


# type: ignore[no-untyped-def]
def test_overrides_are_checked_and_normalized_by_the_configuration(tmp_path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[connections.max_connections_per_ip_overrides]\n"::ffff:10.1.2.3" = 7\n')
    assert load_config(path).connections.max_connections_per_ip_overrides == {"10.1.2.3": 7}
    path.write_text('[connections.max_connections_per_ip_overrides]\n"kafka-1" = 7\n')
    with pytest.raises(ConfigError, match="expected an IP address"):
        load_config(path)
    path.write_text("[connections]\nmax_connections_per_ip = 0\n")
    with pytest.raises(ConfigError, match="max_connections_per_ip is 0"):
        load_config(path)


def test_the_descriptor_budget_leaves_the_reserve_and_each_brokers_descriptors() -> None:
    budget = DescriptorBudget(256, 64)
    assert budget.capacity == 192  # 256 - 64
    for _ in range(3):
        budget.add_broker()
    assert budget.capacity == 171  # each broker: 7 descriptors
    assert DescriptorBudget(50, 64).capacity == 0
    assert DescriptorBudget(-1, 64).capacity == 2**31 - 1  # RLIM_INFINITY


def test_descriptors_are_taken_one_by_one_until_none_is_left_and_come_back() -> None:
    budget = DescriptorBudget(70, 64)  # 6 to spare
    assert [budget.try_take() for _ in range(7)] == [True] * 6 + [False]
    assert budget.in_use == 6
    budget.give()
    assert budget.try_take() and not budget.try_take()
    budget.add_broker()  # a broker's 6 come off what is left: nothing may be taken now
    budget.give()
    assert not budget.try_take()
