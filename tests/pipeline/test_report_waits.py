"""Waits the protocol asks for (long-polls, rebalances) are kept apart from service latency.

Checked on the report over real traffic (tests/pipeline/_traffic.py: a consumer group's
rebalance, idle consumers' long-polls, producers) and on the synthetic log of the cluster run,
against plain Python over the same files.
"""

from __future__ import annotations

import pytest

from pipeline.tables import ACCURACY
from pipeline.waits import PROTOCOL_WAITS, is_wait
from tests.pipeline._cluster import ClusterRun
from tests.pipeline._plain import percentile_bounds
from tests.pipeline._traffic import TrafficRun
from wire.apis import API_BY_KEY


def _section(report: str, heading: str) -> list[str]:
    """The first cells of the table rows under ``## heading`` (up to the next heading)."""
    text = report.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [row.split("|")[1].strip() for row in rows[2:]]  # after the header and its rule


def test_every_wait_is_an_api_the_proxy_names() -> None:
    # The log names APIs as wire/apis.py does: a wait under another spelling would never match.
    names = {spec.name for spec in API_BY_KEY.values()}
    assert set(PROTOCOL_WAITS) <= names
    assert {"Fetch", "JoinGroup", "SyncGroup", "ShareFetch"} == set(PROTOCOL_WAITS)
    assert not is_wait("Produce") and not is_wait("Heartbeat")


def test_each_api_of_the_traffic_is_on_its_side(traffic_run: TrafficRun) -> None:
    apis = {record["api"] for record in traffic_run.log}
    # The traffic has both kinds: a rebalance and long-polls, and plain requests.
    assert {"Fetch", "JoinGroup", "SyncGroup"} <= apis
    assert {"Produce", "Metadata", "Heartbeat", "OffsetCommit"} <= apis
    summary = traffic_run.summary["apis"]
    assert {api: row["wait"] for api, row in summary.items()} == {
        api: PROTOCOL_WAITS.get(api) for api in apis
    }
    report = (traffic_run.out / "report.md").read_text()
    assert _section(report, "Service latency per API") == sorted(a for a in apis if not is_wait(a))
    assert _section(report, "Waits the protocol asks for") == sorted(a for a in apis if is_wait(a))
    for api in apis & set(PROTOCOL_WAITS):
        assert f"| {PROTOCOL_WAITS[api]} |" in report  # why it waits, said beside it


@pytest.mark.parametrize("which", ["traffic", "cluster"])
def test_per_broker_latency_is_over_service_requests_only(
    which: str, traffic_run: TrafficRun, cluster_run: ClusterRun
) -> None:
    records = traffic_run.log if which == "traffic" else cluster_run.log.records
    summary = (traffic_run if which == "traffic" else cluster_run).summary
    assert set(summary["brokers"]) == {record["broker"] for record in records}
    for broker, row in summary["brokers"].items():
        service = [
            r["latency_ms"] for r in records if r["broker"] == broker and not is_wait(r["api"])
        ]
        assert row["count"] == sum(1 for r in records if r["broker"] == broker)
        assert row["service_requests"] == len(service)
        for p in (50, 95, 99):
            got = row[f"p{p}_ms"]
            if not service:
                assert got is None
                continue
            low, high = percentile_bounds(service, p / 100, ACCURACY)
            assert low <= got <= high, (broker, p, got, low, high)
