"""The admin round on a cluster with the StandardAuthorizer, directly and through the proxy.

Every admin client (Java Admin, confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient, franz-go's kadm, sarama's ClusterAdmin, kafka-go's Client; aiokafka has no
ACL API, kcat no admin API) creates a topic, describes and alters its retention.ms, creates,
describes and deletes an ACL and deletes the topic, each step checked on the broker directly
by its super user before the next (tests/compat/_admin.py).

One Kafka node for the module, with the authorizer, admin its super user, a SASL_PLAINTEXT
listener and no ACL: an anonymous client may do nothing. Directly, clients log in as admin
(SCRAM-SHA-512). Through the proxy, clients are anonymous in plaintext and the proxy's own
identity upstream is admin (the sidecar's proxy identity, docs/security.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import trio

from testbed.kafka_cluster import USERS, KafkaCluster, running_kafka
from testbed.proxy_process import ProxyProcess, running_proxy
from tests.compat._admin import CLIENTS, DirectAdmin, run_admin
from tests.compat._tls import ClientSasl

ADMIN = ClientSasl("admin", USERS["admin"], "SCRAM-SHA-512")


@dataclass(frozen=True)
class Secured:
    cluster: KafkaCluster
    proxy: ProxyProcess
    direct: DirectAdmin


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    with running_kafka(1, listeners=("SASL_PLAINTEXT",), authorizer=True) as cluster:
        env = {
            "PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM": ADMIN.mechanism,
            "PURGATORY_PROXY_UPSTREAM__SASL__USERNAME": ADMIN.username,
            "PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD": ADMIN.password,
        }
        with running_proxy(cluster.bootstrap("SASL_PLAINTEXT"), env=env) as proxy:
            direct = DirectAdmin(cluster.bootstrap("SASL_PLAINTEXT"), ADMIN)
            try:
                yield Secured(cluster, proxy, direct)
            finally:
                direct.close()


@pytest.mark.parametrize("through", ["direct", "proxy"])
@pytest.mark.parametrize("client", CLIENTS)
async def test_admin_round_matches_the_broker(secured: Secured, client: str, through: str) -> None:
    topic = f"admin-{client}-{uuid.uuid4().hex[:8]}"
    if through == "direct":
        bootstrap, sasl = secured.cluster.bootstrap("SASL_PLAINTEXT"), ADMIN
    else:
        bootstrap, sasl = secured.proxy.bootstrap, None
    problems = await trio.to_thread.run_sync(
        run_admin, client, bootstrap, topic, secured.direct, sasl
    )
    assert problems == []
    assert secured.proxy.alive()
