# Strategy: the fan-in benchmark's consumers speak the client half of KIP-227 (FetchSession)
# and judge deliveries (Probe) with pure logic -- no I/O, no clock. A mistake there would not
# crash the benchmark; it would quietly measure the wrong thing (full fetches where a real
# client sends incremental ones, latencies of the wrong record). So the bench checks that
# logic itself, in milliseconds, before it measures anything: `python -m bench.fanin` runs
# these checks first and stops on a failure, and `python -m bench.fanin --self-check` runs
# only them (tests/integration/test_fanin_smoke.py does, in a subprocess, since tests never
# import bench).
#
# The checks raise SelfCheckFailed rather than using `assert`, so `python -O` cannot skip them.
"""Self-checks of the fan-in consumers' fetch-session and probe logic (no broker needed)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from bench.fanin.client import TopicRoute, one_record_batch
from bench.fanin.consumer import FetchSession, FetchSettings, Probe, next_epoch
from wire.messages import FetchResponse
from wire.messages.fetch_response import FetchableTopicResponse, PartitionData

__all__ = ["CHECKS", "SelfCheckFailed", "run_checks"]

_ROUTE = TopicRoute("t", uuid.uuid4(), 0, "127.0.0.1", 9092)


class SelfCheckFailed(Exception):
    """One self-check found the logic doing something other than what it states."""


def _expect(actual: object, wanted: object, what: str) -> None:
    if actual != wanted:
        raise SelfCheckFailed(f"{what}: got {actual!r}, wanted {wanted!r}")


def _response(
    session_id: int = 0, error_code: int = 0, records: bytes | None = None
) -> FetchResponse:
    partitions = [PartitionData(partition_index=0, records=records)]
    return FetchResponse(
        error_code=error_code,
        session_id=session_id,
        responses=[FetchableTopicResponse(topic="t", partitions=partitions)],
    )


def fetch_session_opens_a_session_then_sends_incremental_requests() -> None:
    session = FetchSession(_ROUTE, FetchSettings(), fetch_offset=7)
    first = session.next_request()
    _expect((first.session_id, first.session_epoch), (0, 0), "first request")
    _expect(first.topics[0].partitions[0].fetch_offset, 7, "first request's offset")

    session.on_response(_response(session_id=42))
    second = session.next_request()
    _expect((second.session_id, second.session_epoch, second.topics), (42, 1, []), "second")

    session.on_response(FetchResponse(session_id=42))  # incremental: no news, no partitions
    _expect((session.next_request().session_epoch, session.fetch_offset), (2, 7), "third")


def fetch_session_names_the_partition_again_once_its_offset_moved() -> None:
    session = FetchSession(_ROUTE, FetchSettings())
    session.next_request()
    session.on_response(_response(session_id=5))
    session.next_request()
    outcome = session.on_response(_response(session_id=5, records=one_record_batch(b"x")))
    _expect((outcome.delivered, session.fetch_offset), (True, 1), "a record delivered")
    moved = session.next_request()
    _expect(moved.session_epoch, 2, "epoch after the delivery")
    _expect(moved.topics[0].partitions[0].fetch_offset, 1, "the moved offset, named")
    session.on_response(FetchResponse(session_id=5))
    _expect(session.next_request().topics, [], "nothing moved since")


def fetch_session_without_a_session_or_after_an_error_sends_full_requests() -> None:
    session = FetchSession(_ROUTE, FetchSettings())
    session.next_request()
    session.on_response(_response(session_id=0))  # Tansu: sessionless
    _expect(session.next_request().session_epoch, 0, "sessionless broker")

    session.on_response(_response(session_id=9))
    session.next_request()
    outcome = session.on_response(_response(error_code=71))  # INVALID_FETCH_SESSION_EPOCH
    _expect(outcome.error, "fetch error 71", "the error reported")
    again = session.next_request()
    _expect((again.session_id, again.session_epoch, len(again.topics)), (0, 0, 1), "restart")


def next_epoch_wraps_to_1() -> None:
    _expect(next_epoch(0), 1, "after 0")
    _expect(next_epoch(2**31 - 1), 1, "after the largest epoch")


def probe_counts_deliveries_seen_before_the_acknowledgement() -> None:
    probe = Probe(sent_at=10.0, expected={0, 1, 2})
    probe.arrived(0, next_offset=4, now=10.002)  # before the producer's ack
    probe.arrived(1, next_offset=3, now=10.003)  # an older record: not this probe's
    probe.acknowledged(3)
    probe.arrived(1, next_offset=4, now=10.005)
    _expect(probe.done.is_set(), False, "done with consumer 2 still expected")
    probe.lost(2)
    _expect(probe.done.is_set(), True, "done once consumer 2 is lost")
    latencies = sorted(round(ms, 3) for ms in probe.latencies_ms())
    _expect(latencies, [2.0, 5.0], "latencies (ms)")


CHECKS: tuple[Callable[[], None], ...] = (
    fetch_session_opens_a_session_then_sends_incremental_requests,
    fetch_session_names_the_partition_again_once_its_offset_moved,
    fetch_session_without_a_session_or_after_an_error_sends_full_requests,
    next_epoch_wraps_to_1,
    probe_counts_deliveries_seen_before_the_acknowledgement,
)


def run_checks() -> list[str]:
    """Run every check; return their names. Raises SelfCheckFailed naming the failed one."""
    for check in CHECKS:
        try:
            check()
        except SelfCheckFailed as failed:
            raise SelfCheckFailed(f"{check.__name__}: {failed}") from None
    return [check.__name__ for check in CHECKS]
