"""The series the alert rules (deploy/prometheus/alerts.yml) need are there before anything
goes wrong: readiness as a gauge, and the alerted counters at 0 for every label value.

Prometheus's increase() cannot see a series step from absent to 1, so a counter child made at
its first increment hides the first refusal or failed refresh from `increase(...) > 0`.
Scraped through prometheus-client's exposition and parser, as Prometheus reads it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from proxy.observability.metrics import REFUSAL_REASONS, Metrics
from proxy.observability.readiness import Readiness
from proxy.primitives.memory import MemoryPool
from tests.support.prometheus_scrape import scrape

PROXY = Path(__file__).resolve().parents[4] / "proxy"


def _named(seen: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> dict:
    return {labels: value for (n, labels), value in seen.items() if n == name}


async def test_readiness_is_exported_with_its_causes() -> None:
    metrics = Metrics(MemoryPool(1000, 1000))
    readiness = Readiness()
    metrics.attach_readiness(readiness)
    readiness.block("listeners", "listeners not bound yet")
    readiness.block("metadata", "waiting for upstream metadata")
    seen = scrape(metrics)
    assert seen[("purgatory_proxy_ready", ())] == 0
    assert _named(seen, "purgatory_proxy_not_ready") == {
        (("cause", "listeners"),): 1,
        (("cause", "metadata"),): 1,
    }
    readiness.clear("listeners")
    readiness.clear("metadata")
    seen = scrape(metrics)
    assert seen[("purgatory_proxy_ready", ())] == 1
    assert _named(seen, "purgatory_proxy_not_ready") == {}


async def test_alerted_counters_exist_at_zero_before_the_first_event() -> None:
    seen = scrape(Metrics(MemoryPool(1000, 1000)))
    refused = _named(seen, "purgatory_proxy_connections_refused_total")
    assert refused == {(("reason", reason),): 0 for reason in REFUSAL_REASONS}
    for name in ("upstream_connects_total", "metadata_refreshes_total"):
        results = _named(seen, f"purgatory_proxy_{name}")
        assert results == {(("result", "ok"),): 0, (("result", "failed"),): 0}, name


def _refusal_reasons_in(path: Path) -> set[str]:
    """The first argument of every Refusal(...) call in ``path`` (string constants)."""
    reasons = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Refusal"
        ):
            first = node.args[0]
            assert isinstance(first, ast.Constant), ast.dump(first)
            reasons.add(first.value)
    return reasons


def test_every_refusal_reason_the_proxy_uses_is_created_up_front() -> None:
    used = set()
    for path in (PROXY / "connection").glob("*.py"):
        used |= _refusal_reasons_in(path)
    assert used == set(REFUSAL_REASONS)


async def test_every_close_reason_exists_at_zero() -> None:
    """connections_closed_total{reason}: the kinds of proxy/errors.py's tree, and shutdown."""
    seen = scrape(Metrics(MemoryPool(1000, 1000)))
    closed = _named(seen, "purgatory_proxy_connections_closed_total")
    expected = {
        "client_closed", "shutdown", "idle_timeout", "frame_timeout", "protocol_error",
        "broken", "upstream", "authentication_failed", "authentication_timeout",
        "send_timeout", "descriptors", "internal_error",
    }  # fmt: skip
    assert closed == {(("reason", reason),): 0 for reason in expected}
