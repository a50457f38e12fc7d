"""The Apache Kafka testbed itself (testbed/kafka_cluster.py): what every other test rests on.

A testbed that let anonymous clients past its authorizer, or left JVMs behind, would make the
security and reliability results meaningless; these are the properties the suite relies on.
"""

from __future__ import annotations

import psutil
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from testbed.kafka_cluster import SASL_MECHANISMS, USERS, KafkaCluster, running_kafka
from testbed.topics import create_topic


def _admin(cluster: KafkaCluster, listener: str, mechanism: str | None, user: str) -> AdminClient:
    config: dict[str, str | bool] = {
        "bootstrap.servers": cluster.bootstrap(listener),
        "security.protocol": listener,
        "log_level": "0",
    }
    if "SSL" in listener:
        assert cluster.pki is not None
        config["ssl.ca.location"] = str(cluster.pki.ca)
    if mechanism == "OAUTHBEARER":
        config |= {
            "sasl.mechanism": mechanism,
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": f"principal={user}",
        }
    elif mechanism is not None:
        config |= {
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": USERS[user],
        }
    return AdminClient(config)


def _create(admin: AdminClient, name: str) -> None:
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)


@pytest.fixture(scope="module")
def secure() -> KafkaCluster:
    with running_kafka(
        1, listeners=("SSL", "SASL_PLAINTEXT", "SASL_SSL"), authorizer=True
    ) as cluster:
        yield cluster  # type: ignore[misc]


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
def test_every_sasl_mechanism_authenticates_the_super_user(
    secure: KafkaCluster, listener: str, mechanism: str
) -> None:
    _create(_admin(secure, listener, mechanism, "admin"), f"t-{listener}-{mechanism}".lower())


def test_the_authorizer_denies_who_has_no_acl(secure: KafkaCluster) -> None:
    for listener, mechanism, user in (("SSL", None, "admin"), ("SASL_PLAINTEXT", "PLAIN", "bob")):
        with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
            _create(_admin(secure, listener, mechanism, user), f"denied-{listener}".lower())


def test_a_wrong_password_is_refused(secure: KafkaCluster) -> None:
    errors: list[KafkaError] = []
    admin = AdminClient(
        {
            "bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "not-her-password",
            "log_level": "0",
            "error_cb": errors.append,
        }
    )
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # delivers the error callbacks
    assert any(error.code() == KafkaError._AUTHENTICATION for error in errors), errors


def test_nodes_restart_on_their_ports_and_data_and_every_jvm_is_stopped() -> None:
    with running_kafka(1, request_log=True) as cluster:
        node = cluster.nodes[0]
        topic = create_topic(cluster.bootstrap(), "testbed", partitions=2)
        first_pid = node.pid
        cluster.kill(1)
        assert node.pid is None and first_pid is not None
        assert not psutil.pid_exists(first_pid)
        cluster.start(1)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": "0"})
        assert topic in admin.list_topics(timeout=30).topics
        assert cluster.request_counts(1)["CreateTopics"] == 1
        pid = node.pid
    assert pid is not None and not psutil.pid_exists(pid)
    with pytest.raises(RuntimeError, match="boom"), running_kafka(1) as failing:
        pid = failing.nodes[0].pid
        raise RuntimeError("boom")
    assert pid is not None and not psutil.pid_exists(pid)
