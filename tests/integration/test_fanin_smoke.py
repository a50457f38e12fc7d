"""bench.fanin end to end at a tiny N, plus the client half of KIP-227 its consumers speak.

The smoke test runs the real harness (Tansu, the counting relay, the proxy as a process, a
handful of protocol-level consumers) for about a second per route and checks that it
measured something on both routes. It asserts nothing about speed or the fan-in ratio:
those are the benchmark's goals, reported in docs/benchmarks.md, and this machine is shared.
"""

from __future__ import annotations

import uuid

from bench._fanin_client import TopicRoute, one_record_batch
from bench._fanin_consumer import FetchSession, FetchSettings, Probe, next_epoch
from bench.fanin import Config, render, run
from wire.messages import FetchResponse
from wire.messages.fetch_response import FetchableTopicResponse, PartitionData

ROUTE = TopicRoute("t", uuid.uuid4(), 0, "127.0.0.1", 9092)


def test_fanin_harness_measures_both_routes() -> None:
    # The proxy route settles past the proxy's upstream idle timeout (its consumers' warm-up
    # connections close first): a short one keeps the test short.
    idle = (("PURGATORY_PROXY_CONNECTIONS__UPSTREAM_IDLE_TIMEOUT_MS", "300"),)
    config = Config(ns=(3,), seconds=1.0, probes=1, settle_s=0.2, proxy_env=idle)
    result = run(config, log=False)

    assert [(m.route, m.n) for m in result.measurements] == [("direct", 3), ("proxy", 3)]
    for m in result.measurements:
        assert m.up == 3, (m.route, m.failures)
        assert m.answers_per_s > 0, m.route
        assert m.fetch_versions, m.route
        assert len(m.latencies_ms) == 3, (m.route, m.missed, m.produce_errors)
        assert m.cpu_percent.keys() >= {"broker", "proxy", "consumers", "relay0"}
    direct, proxy = result.measurements
    # Every direct fetch passes the relay; the proxy route's count may be anything >= 0.
    assert direct.upstream_fetch_per_s > 0
    assert proxy.proxy_rss_held_bytes > 0
    assert proxy.settle_s >= 0.3 and proxy.proxy_descriptors > 0
    assert "| 3 | proxy | 3 |" in render(result, "python -m bench.fanin --n 3")


def _response(
    session_id: int = 0, error_code: int = 0, records: bytes | None = None
) -> FetchResponse:
    partitions = [PartitionData(partition_index=0, records=records)]
    return FetchResponse(
        error_code=error_code,
        session_id=session_id,
        responses=[FetchableTopicResponse(topic="t", partitions=partitions)],
    )


def test_FetchSession_opens_a_session_then_sends_incremental_requests() -> None:
    session = FetchSession(ROUTE, FetchSettings(), fetch_offset=7)
    first = session.next_request()
    assert (first.session_id, first.session_epoch) == (0, 0)
    assert first.topics[0].partitions[0].fetch_offset == 7

    session.on_response(_response(session_id=42))
    second = session.next_request()
    assert (second.session_id, second.session_epoch, second.topics) == (42, 1, [])

    session.on_response(FetchResponse(session_id=42))  # incremental: no news, no partitions
    assert (session.next_request().session_epoch, session.fetch_offset) == (2, 7)


def test_FetchSession_names_the_partition_again_once_its_offset_moved() -> None:
    session = FetchSession(ROUTE, FetchSettings())
    session.next_request()
    session.on_response(_response(session_id=5))
    session.next_request()
    outcome = session.on_response(_response(session_id=5, records=one_record_batch(b"x")))
    assert outcome.delivered and session.fetch_offset == 1
    moved = session.next_request()
    assert moved.session_epoch == 2
    assert moved.topics[0].partitions[0].fetch_offset == 1
    session.on_response(FetchResponse(session_id=5))
    assert session.next_request().topics == []


def test_FetchSession_without_a_session_or_after_an_error_sends_full_requests() -> None:
    session = FetchSession(ROUTE, FetchSettings())
    session.next_request()
    session.on_response(_response(session_id=0))  # Tansu: sessionless
    assert session.next_request().session_epoch == 0

    session.on_response(_response(session_id=9))
    session.next_request()
    outcome = session.on_response(_response(error_code=71))  # INVALID_FETCH_SESSION_EPOCH
    assert outcome.error == "fetch error 71"
    again = session.next_request()
    assert (again.session_id, again.session_epoch, len(again.topics)) == (0, 0, 1)


def test_next_epoch_wraps_to_1() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(2**31 - 1) == 1


def test_Probe_counts_deliveries_seen_before_the_acknowledgement() -> None:
    probe = Probe(sent_at=10.0, expected={0, 1, 2})
    probe.arrived(0, next_offset=4, now=10.002)  # before the producer's ack
    probe.arrived(1, next_offset=3, now=10.003)  # an older record: not this probe's
    probe.acknowledged(3)
    probe.arrived(1, next_offset=4, now=10.005)
    assert not probe.done.is_set()
    probe.lost(2)
    assert probe.done.is_set()
    assert sorted(round(ms, 3) for ms in probe.latencies_ms()) == [2.0, 5.0]
