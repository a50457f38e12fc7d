"""Upstream certificates the proxy must refuse, served by Apache Kafka itself (issue 29 item 6).

One Kafka node for the module whose SSL listener presents a certificate for another host
(elsewhere.example) and whose SASL_SSL listener presents an expired one, both signed by the
test CA (running_kafka's listener_certs). The proxy dials 127.0.0.1 with the CA and host check
on: each refusal is one clear line and a 503 on /readyz that says why, and the proxy stays up.
With check_hostname = false the wrong-host certificate is accepted (the switch works). Moved
here from a TLS front before Tansu (test_tls_sasl.py's bad certificates).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.kafka_cluster import KafkaCluster, running_kafka
from testbed.processes import free_port
from testbed.proxy_process import running_proxy
from tests.support.group_round_trip import group_round_trip
from tests.support.secure_kafka import proxy_env, readyz_saying


@pytest.fixture(scope="module")
def bad_kafka() -> Iterator[KafkaCluster]:
    with running_kafka(
        listeners=("SSL", "SASL_SSL"), listener_certs={"SSL": "wrong_host", "SASL_SSL": "expired"}
    ) as cluster:
        yield cluster


@pytest.mark.parametrize(
    ("listener", "ca", "reason"),
    [
        ("SSL", "ca", "IP address mismatch, certificate is not valid for '127.0.0.1'"),
        ("SASL_SSL", "ca", "certificate has expired"),
        ("SSL", "other_ca", "unable to get local issuer certificate"),
    ],
    ids=["wrong host", "expired", "untrusted"],
)
def test_a_bad_upstream_certificate_is_refused_with_one_clear_line(
    listener: str, ca: str, reason: str, bad_kafka: KafkaCluster, tmp_path: Path
) -> None:
    pki = bad_kafka.pki
    assert pki is not None
    metrics_port = free_port()
    mechanism = "SCRAM-SHA-512" if listener == "SASL_SSL" else ""
    env = proxy_env(mechanism, tmp_path, pki=pki)
    env |= {
        "PURGATORY_PROXY_UPSTREAM__TLS__CA_FILE": str(getattr(pki, ca)),
        "PURGATORY_PROXY_METRICS__LISTEN": f"127.0.0.1:{metrics_port}",
    }
    with running_proxy(bad_kafka.bootstrap(listener), env=env) as proxy:
        line = proxy.wait_for_log(r"cannot fetch upstream metadata.*", timeout_s=20).group(0)
        assert f"TLS handshake failed: certificate verify failed: {reason}" in line
        status, text = readyz_saying(metrics_port, "certificate verify failed")
        assert status == 503
        assert reason in text
        assert proxy.alive()


def test_the_wrong_host_is_accepted_only_with_check_hostname_off(
    bad_kafka: KafkaCluster, tmp_path: Path
) -> None:
    env = proxy_env("", tmp_path, pki=bad_kafka.pki)
    env["PURGATORY_PROXY_UPSTREAM__TLS__CHECK_HOSTNAME"] = "false"
    with running_proxy(bad_kafka.bootstrap("SSL"), env=env) as proxy:
        group_round_trip(proxy.bootstrap, count=3)
        assert "certificate verify failed" not in proxy.log_text()
