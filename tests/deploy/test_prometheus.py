"""The Grafana dashboard and the alert rules, against a real Prometheus scraping a real proxy.

A proxy in front of Apache Kafka (the session's ``kafka_broker``) with TLS on its client
listeners, `--metrics` and `--request-log`, scraped every second by Debian's Prometheus
(tests/support/prometheus.py), which also loads deploy/prometheus/alerts.yml. Real clients
then make the traffic the panels are about: a topic created, records produced with acks=all
and consumed in a group, fetches held until their deadline and one woken by a produce, a
client newer than the proxy (ApiVersions at an unknown version: an error answer), a
connection refused by a per-IP limit, a plaintext client on the TLS port, and two SIGHUP
reloads of the TLS files, the second of a key that does not load. After a few more scrapes,
every panel's query (its variables substituted as Grafana would) must return series, every
alert expression must evaluate, and the alerts this traffic should trip must fire in
Prometheus itself.

No Grafana server here: the dashboard's JSON is checked for what Grafana needs to import it
(test_dashboard_structure), and `promtool` checks the rules file and runs its unit tests
(tests/deploy/prometheus/alerts_test.yml).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer

from testbed.certs import make_pki
from testbed.processes import Broker
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.support.prometheus import Prometheus, running_prometheus, tool
from wire.headers import RequestHeader, encode_request_header

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "purgatory-proxy.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = Path(__file__).parent / "prometheus" / "alerts_test.yml"
JOB = "purgatory-proxy"
RECORDS = 30
#: What Grafana puts for $__rate_interval at a 1 s scrape interval is 4 s; a minute keeps
#: every counter's increase since the traffic inside the window, so rates are non-zero.
RATE_INTERVAL = "1m"
#: Refused at accept by connections.max_connections_per_ip_overrides (a loopback address).
REFUSED_IP = "127.0.0.2"

#: Alerts this traffic must trip (the rules file loaded in Prometheus, evaluated every second).
MUST_FIRE = {"PurgatoryProxyConnectionsRefused", "PurgatoryProxyTLSReloadFailed"}
#: Alerts that must stay silent on a healthy proxy under this traffic.
MUST_NOT_FIRE = {
    "PurgatoryProxyDown",
    "PurgatoryProxyNotReady",
    "PurgatoryProxyUpstreamUnreachable",
    "PurgatoryProxyUpstreamConnectsFailing",
    "PurgatoryProxyFull",
    "PurgatoryProxyAcceptFailures",
    "PurgatoryProxyInternalError",
    "PurgatoryProxyProduceExpirations",
    "PurgatoryProxyRequestLogDropping",
    "PurgatoryProxyDescriptorsNearLimit",
}


@dataclass
class Scraped:
    """A proxy after the traffic, and the Prometheus that scraped it throughout."""

    prometheus: Prometheus
    proxy: ProxyProcess
    traffic_ended_s: float


def _tls(ca: Path) -> dict[str, Any]:
    return {"security_protocol": "SSL", "ssl_cafile": str(ca)}


def _produce(bootstrap: str, topic: str, ca: Path, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **_tls(ca))
    try:
        for index in range(count):
            producer.send(topic, key=b"k%d" % index, value=b"v%d" % index)
        producer.flush(timeout=30)
    finally:
        producer.close()


def _consume_in_group(bootstrap: str, topic: str, ca: Path) -> None:
    """Consume every record in a group and commit; then poll the drained partition (held
    fetches that expire) and once more while a record arrives (a held fetch it wakes)."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"group-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,  # Apache Kafka's group.min.session.timeout.ms
        heartbeat_interval_ms=1000,
        fetch_max_wait_ms=1500,
        **_tls(ca),
    )
    try:
        consumed = 0
        deadline = time.monotonic() + 60
        while consumed < RECORDS and time.monotonic() < deadline:
            consumed += sum(len(batch) for batch in consumer.poll(timeout_ms=1000).values())
        assert consumed == RECORDS, f"consumed {consumed} of {RECORDS}"
        consumer.commit()
        # Nothing new: each fetch is held for fetch_max_wait_ms and expires.
        idle_until = time.monotonic() + 3.5
        while time.monotonic() < idle_until:
            assert not consumer.poll(timeout_ms=500)
        # A record produced while a fetch is held wakes it (a completion, not an expiry).
        late = threading.Timer(0.7, _produce, (bootstrap, topic, ca, 1))
        late.start()
        woken = 0
        deadline = time.monotonic() + 20
        while not woken and time.monotonic() < deadline:
            woken = sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
        late.join()
        assert woken == 1
    finally:
        consumer.close()


def _client_newer_than_the_proxy(proxy: ProxyProcess, ca: Path) -> None:
    """ApiVersions at a version nobody knows, as a newer client sends it first: answered
    UNSUPPORTED_VERSION (35), a top-level error code the proxy counts."""
    head = encode_request_header(RequestHeader(18, 99, 7, "client-from-the-future"))
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((proxy.host, proxy.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=proxy.host) as sock,
    ):
        sock.sendall(len(head).to_bytes(4, "big") + head)
        answer = b""
        while len(answer) < 10:
            chunk = sock.recv(10 - len(answer))
            assert chunk, "closed before the answer"
            answer += chunk
    assert int.from_bytes(answer[8:10], "big") == 35


def _refused_connection(proxy: ProxyProcess) -> None:
    with socket.socket() as sock:
        sock.bind((REFUSED_IP, 0))
        sock.connect((proxy.host, proxy.port))
        sock.settimeout(10)
        assert sock.recv(1) == b"", "the per-IP limit should close it at accept"


def _plaintext_on_tls_port(proxy: ProxyProcess) -> None:
    with socket.create_connection((proxy.host, proxy.port)) as sock:
        sock.sendall(b"\x00\x00\x00\x0bnot a TLS hello")
        sock.settimeout(10)
        assert sock.recv(1) == b""


@pytest.fixture(scope="module")
def scraped(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    directory = tmp_path_factory.mktemp("prometheus-test")
    pki = make_pki(directory / "pki")
    # The proxy's own copies: the test breaks the key later, the PKI stays intact.
    cert, key = directory / "proxy.pem", directory / "proxy.key"
    shutil.copy(pki.server.cert, cert)
    shutil.copy(pki.server.key, key)
    env = {
        "PURGATORY_PROXY_PROXY__TLS__CERT_FILE": str(cert),
        "PURGATORY_PROXY_PROXY__TLS__KEY_FILE": str(key),
        "PURGATORY_PROXY_CONNECTIONS__MAX_CONNECTIONS_PER_IP_OVERRIDES": json.dumps(
            {REFUSED_IP: 0}
        ),
    }
    request_log = directory / "requests.jsonl"
    with running_proxy(
        kafka_broker.bootstrap,
        "--metrics", "127.0.0.1:0", "--request-log", str(request_log),
        env=env,
    ) as proxy:  # fmt: skip
        metrics = proxy.wait_for_log(r"metrics endpoint on http://(\S+)")[1]
        with running_prometheus(
            directory / "prometheus", [metrics], job=JOB, rule_files=[ALERTS]
        ) as prometheus:
            prometheus.wait_until(f'up{{job="{JOB}"}} == 1')
            bootstrap = proxy.bootstrap
            topic = create_topic(bootstrap, "dashboard", **_tls(pki.ca))
            _produce(bootstrap, topic, pki.ca, RECORDS)
            _consume_in_group(bootstrap, topic, pki.ca)
            _client_newer_than_the_proxy(proxy, pki.ca)
            _refused_connection(proxy)
            _plaintext_on_tls_port(proxy)
            os.kill(proxy.pid, signal.SIGHUP)  # the same files: reloaded
            proxy.wait_for_log(r"reloaded from")
            key.write_text("not a key\n")
            os.kill(proxy.pid, signal.SIGHUP)  # a key that does not load: kept, counted
            proxy.wait_for_log(r"not reloaded, keeping the previous ones")
            ended_s = time.time()
            # Three scrapes after the traffic, so every counter's last step is in Prometheus.
            prometheus.wait_until(
                f'timestamp(purgatory_proxy_build_info{{job="{JOB}"}}) > {ended_s + 3}'
            )
            yield Scraped(prometheus, proxy, ended_s)


# -- the dashboard ---------------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that shows data (rows are containers), nested rows' panels included."""
    found = []
    for panel in dashboard["panels"]:
        found += panel.get("panels", []) if panel["type"] == "row" else [panel]
    return found


_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}")
#: Grafana's own variables the queries may use.
_BUILTIN = {"__rate_interval", "__interval", "__range"}


def _grafana_expr(expr: str, values: dict[str, str]) -> str:
    """``expr`` with its variables replaced as Grafana would for the given values."""
    return _VARIABLE.sub(lambda m: values[m[1] or m[2]], expr)


def _substitutions(dashboard: dict[str, Any]) -> dict[str, str]:
    """The test's values: every query variable at its "All" (its allValue), the builtins."""
    values = {"__rate_interval": RATE_INTERVAL, "__interval": "15s", "__range": "5m"}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            values[variable["name"]] = variable["allValue"]
        elif variable["type"] == "datasource":
            values[variable["name"]] = "prometheus"
    return values


def test_dashboard_structure() -> None:
    """What Grafana needs to import the JSON and draw each panel, without a Grafana server."""
    dashboard = _dashboard()
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    # A datasource variable, so the dashboard imports against any Prometheus data source.
    (source,) = [v for v in variables.values() if v["type"] == "datasource"]
    assert source["query"] == "prometheus"
    reference = {"type": "prometheus", "uid": f"${{{source['name']}}}"}
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == reference, variable["name"]
            assert variable["includeAll"] and variable["allValue"], variable["name"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    ids += [p["id"] for row in dashboard["panels"] for p in row.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    known = set(variables) | _BUILTIN
    occupied: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("h", "w", "x", "y")), panel["title"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
    panels = _panels(dashboard)
    assert panels
    for panel in panels:
        title = panel["title"]
        assert panel["type"] in {"stat", "timeseries", "gauge", "bargauge", "table"}, title
        assert panel["datasource"] == reference, title
        assert panel["targets"], title
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), title
        for target in panel["targets"]:
            assert target["datasource"] == reference, title
            assert target["expr"].strip(), title
            used = {m[1] or m[2] for m in _VARIABLE.finditer(target["expr"])}
            assert used <= known, f"{title}: undefined variables {used - known}"
        assert panel.get("description"), f"{title}: say what to read in it"


def test_every_panel_query_returns_series(scraped: Scraped) -> None:
    dashboard = _dashboard()
    values = _substitutions(dashboard)
    empty = []
    for panel in _panels(dashboard):
        for target in panel["targets"]:
            expr = _grafana_expr(target["expr"], values)
            if not scraped.prometheus.query(expr):
                empty.append(f"{panel['title']} [{target['refId']}]: {expr}")
    assert not empty, "panels with no series:\n" + "\n".join(empty)


def test_the_traffic_shows_in_the_panels(scraped: Scraped) -> None:
    """Not only series: the values the traffic must have moved."""
    prometheus = scraped.prometheus
    window = f'job="{JOB}"'

    def value(expr: str) -> float:
        result = prometheus.query(expr)
        assert result, expr
        return sum(float(sample["value"][1]) for sample in result)

    assert value(f"purgatory_proxy_ready{{{window}}}") == 1
    # Per-API series start at a client's first request, so their values, not increase().
    assert value(f'purgatory_proxy_requests_total{{{window},api="Produce"}}') > 0
    assert value(f'purgatory_proxy_requests_total{{{window},api="JoinGroup"}}') > 0
    assert value(f'purgatory_proxy_requests_total{{{window},api="OffsetCommit"}}') > 0
    assert (
        value(f'purgatory_proxy_request_errors_total{{{window},api="ApiVersions",error_code="35"}}')
        == 1
    )
    assert value(f'purgatory_proxy_purgatory_expirations_total{{{window},operation="fetch"}}') > 0
    assert value(f'purgatory_proxy_purgatory_completions_total{{{window},operation="fetch"}}') > 0
    refused = (
        f'purgatory_proxy_connections_refused_total{{{window},reason="max_connections_per_ip"}}'
    )
    assert value(refused) == 1
    handshakes = f'purgatory_proxy_tls_handshake_failures_total{{{window},reason="not_tls"}}'
    assert value(handshakes) == 1
    assert value(f'purgatory_proxy_tls_reloads_total{{{window},result="ok"}}') == 1
    assert value(f'purgatory_proxy_tls_reloads_total{{{window},result="failed"}}') == 1
    assert value(f"purgatory_proxy_request_log_written_lines_total{{{window}}}") > 0


# -- the alert rules --------------------------------------------------------------------


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules_file() -> None:
    proc = subprocess.run(
        [tool("promtool"), "check", "rules", str(ALERTS)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout


def test_promtool_unit_tests_of_the_alerts() -> None:
    """Each alert fires on the series it is about and stays silent otherwise."""
    proc = subprocess.run(
        [tool("promtool"), "test", "rules", str(ALERT_TESTS)],
        capture_output=True, text=True, timeout=60, check=False, cwd=ALERT_TESTS.parent,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tested = set(re.findall(r"alertname:\s*(\w+)", ALERT_TESTS.read_text()))
    assert tested == {rule["alert"] for rule in _rules()}, "every alert needs a unit test"


def test_every_alert_expression_evaluates(scraped: Scraped) -> None:
    """Each expression is valid against the real series; which ones return series is printed
    (pytest -s) and the healthy-proxy ones must not."""
    returned = {}
    for rule in _rules():
        returned[rule["alert"]] = len(scraped.prometheus.query(rule["expr"]))
    print("alert expressions returning series under this traffic:", returned)
    assert not {name for name, count in returned.items() if count} & MUST_NOT_FIRE
    assert {name for name, count in returned.items() if count} >= MUST_FIRE


def test_prometheus_evaluates_every_rule_and_fires_the_expected_alerts(scraped: Scraped) -> None:
    prometheus = scraped.prometheus
    groups = prometheus.api("rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {rule["name"] for rule in rules} == {rule["alert"] for rule in _rules()}
    unhealthy = {rule["name"]: rule.get("lastError") for rule in rules if rule["health"] != "ok"}
    assert not unhealthy
    deadline = time.monotonic() + 30
    while True:
        firing = {
            alert["labels"]["alertname"]
            for alert in prometheus.api("alerts")["alerts"]
            if alert["state"] == "firing"
        }
        if firing >= MUST_FIRE or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert firing >= MUST_FIRE
    assert not firing & MUST_NOT_FIRE
