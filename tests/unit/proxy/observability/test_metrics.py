"""Prometheus series: per-request accounting, scrape-time pool sensors, the purgatory hook.

Every check scrapes the registry through prometheus-client's own exposition and parser, so
what is asserted is what Prometheus would read.
"""

from __future__ import annotations

import random
from importlib.metadata import version
from pathlib import Path

import trio
import trio.testing
from prometheus_client import generate_latest

from proxy.observability.metrics import Metrics
from proxy.observability.observer import Observer
from proxy.observability.request_log import RequestLog, RequestRecord
from proxy.primitives.memory import MemoryPool
from proxy.primitives.purgatory import DelayedOperation, Purgatory
from tests.support.prometheus_scrape import scrape


def _record(api: str = "Fetch", **changes: object) -> RequestRecord:
    fields: dict[str, object] = dict(
        ts=0.0, api=api, api_version=12, client_id="c", conn=1, broker="1", latency_ms=3.0,
        upstream_ms=2.0, held_ms=0.0, muted_ms=0.0, request_bytes=100, response_bytes=300,
        outcome="ok", error_code=0,
    )  # fmt: skip
    fields.update(changes)
    return RequestRecord(**fields)  # type: ignore[arg-type]


async def test_records_move_the_per_api_series() -> None:
    metrics = Metrics(MemoryPool(1000, 1000))
    metrics.observe(_record())
    metrics.observe(_record(latency_ms=700.0, muted_ms=40.0))
    metrics.observe(_record(outcome="error", error_code=6))
    metrics.observe(_record("Produce", outcome="no_response", response_bytes=0, upstream_ms=0.5))
    seen = scrape(metrics)
    p = "purgatory_proxy_"
    assert seen[(f"{p}requests_total", (("api", "Fetch"), ("outcome", "ok")))] == 2
    assert seen[(f"{p}requests_total", (("api", "Fetch"), ("outcome", "error")))] == 1
    assert seen[(f"{p}requests_total", (("api", "Produce"), ("outcome", "no_response")))] == 1
    assert seen[(f"{p}request_errors_total", (("api", "Fetch"), ("error_code", "6")))] == 1
    assert seen[(f"{p}request_bytes_total", (("api", "Fetch"),))] == 300
    assert seen[(f"{p}response_bytes_total", (("api", "Fetch"),))] == 900
    assert seen[(f"{p}request_bytes_total", (("api", "Produce"),))] == 100
    assert seen[(f"{p}requests_muted_total", (("api", "Fetch"),))] == 1
    assert seen[(f"{p}request_muted_seconds_total", (("api", "Fetch"),))] == 0.04
    latency = f"{p}request_latency_seconds_bucket"
    assert seen[(latency, (("api", "Fetch"), ("le", "0.005")))] == 2
    assert seen[(latency, (("api", "Fetch"), ("le", "1.0")))] == 3
    assert seen[(f"{p}request_latency_seconds_count", (("api", "Produce"),))] == 1
    # acks=0 has no upstream round trip: it is not in the upstream latency histogram.
    assert seen[(f"{p}upstream_latency_seconds_count", (("api", "Fetch"),))] == 3
    assert seen[(f"{p}upstream_latency_seconds_count", (("api", "Produce"),))] == 0


async def test_pool_sensors_are_read_at_scrape_time(mock_clock: trio.testing.MockClock) -> None:
    pool = MemoryPool(100, 100, rng=random.Random(0), depleted_window_s=10)
    metrics = Metrics(pool)
    p = "purgatory_proxy_memory_pool_"
    assert scrape(metrics)[(f"{p}available_bytes", ())] == 100
    lease = pool.allocate_nowait(100)
    assert pool.try_allocate(1) is None  # refused: depletion starts
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.allocate, 10)  # parks: a mute
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(5)
        seen = scrape(metrics)
        assert seen[(f"{p}available_bytes", ())] == 0
        assert seen[(f"{p}used_bytes", ())] == 100
        assert seen[(f"{p}muted_connections", ())] == 1
        assert seen[(f"{p}mutes_total", ())] == 1
        assert seen[(f"{p}depleted_seconds_total", ())] == 5
        assert seen[(f"{p}avg_depleted_ratio", ())] == 0.5
        lease.release()  # hands 10 bytes to the parked task
    seen = scrape(metrics)
    assert seen[(f"{p}muted_connections", ())] == 0
    assert seen[(f"{p}used_bytes", ())] == 10


class _Op(DelayedOperation):
    def try_complete(self) -> bool:
        return self.force_complete()

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        pass


async def test_purgatory_families_appear_once_attached() -> None:
    metrics = Metrics(MemoryPool(1000, 1000))
    assert not any("purgatory_pending" in name for name, _ in scrape(metrics))
    purgatory = Purgatory()
    metrics.attach_purgatory("fetch", purgatory)
    never = _Op(1000)
    never.try_complete = lambda: False  # type: ignore[method-assign]
    purgatory.try_complete_else_watch(never, ["t-0"])
    purgatory.try_complete_else_watch(_Op(1000), ["t-1"])
    seen = scrape(metrics)
    label = (("operation", "fetch"),)
    assert seen[("purgatory_proxy_purgatory_pending", label)] == 1
    assert seen[("purgatory_proxy_purgatory_completions_total", label)] == 1
    assert seen[("purgatory_proxy_purgatory_expirations_total", label)] == 0
    assert seen[("purgatory_proxy_fanin_held_fetches", ())] == 1


async def test_observer_feeds_metrics_and_log(tmp_path: Path) -> None:
    metrics = Metrics(MemoryPool(1000, 1000))
    request_log = RequestLog(tmp_path / "r.jsonl", max_bytes=0, backups=0, queue_lines=1)
    observer = Observer(metrics, request_log)
    observer.request_done(_record())
    observer.request_done(_record())  # the queue holds one: this one is dropped
    seen = scrape(metrics)
    assert seen[("purgatory_proxy_requests_total", (("api", "Fetch"), ("outcome", "ok")))] == 2
    assert seen[("purgatory_proxy_request_log_queued_lines", ())] == 1
    assert seen[("purgatory_proxy_request_log_dropped_lines_total", ())] == 1


async def test_operator_basics_process_series_build_info_and_no_created_series() -> None:
    metrics = Metrics(MemoryPool(100, 100))
    metrics.connections_accepted.labels("bootstrap").inc()
    text = generate_latest(metrics.registry).decode()
    seen = scrape(metrics)
    assert seen[("process_resident_memory_bytes", ())] > 0
    assert seen[("process_open_fds", ())] > 0
    assert ("process_cpu_seconds_total", ()) in seen
    [(labels, value)] = [
        (labels, value) for (name, labels), value in seen.items()
        if name == "purgatory_proxy_build_info"
    ]  # fmt: skip
    assert value == 1 and dict(labels)["version"] == version("purgatory-proxy")
    assert "_created" not in text
    assert seen[("purgatory_proxy_connections_accepted_total", (("listener", "bootstrap"),))] == 1
