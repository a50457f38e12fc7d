# Strategy: what each node is told, as text files in its folder: server.properties and
# log4j2.properties. Every node is broker and controller (combined mode, a static quorum of the
# voters), or broker alone when the cluster has fewer controllers than nodes.
#
#   listeners   one per kind the test asks for, named after its security protocol (PLAINTEXT,
#               SSL, SASL_PLAINTEXT, SASL_SSL), plus INTERNAL (broker to broker) and CONTROLLER.
#   SASL        every SASL listener offers PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER
#               (Kafka's unsecured JWS validator, which is for tests); the users of USERS exist
#               for each mechanism (SCRAM ones created at format time, KIP-900).
#   authorizer  StandardAuthorizer, super user admin, no ACL means no access. Broker-to-broker
#               and controller traffic then authenticate as admin over SASL PLAIN, as a
#               production cluster would, so an anonymous client is not a super user.
#   TLS         PEM key stores (KIP-651) from testbed/certs.py's throwaway CA; a listener may
#               serve another of its certificates (an expired or wrong-host one) instead.
#   logging     warnings, errors and the line that says the node is up; with the request log,
#               Kafka's own (`kafka.request.logger` at DEBUG) to requests.log.
"""The files a Kafka node starts from: server.properties and log4j2.properties."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.kafka_node import HOST, KafkaNode

if TYPE_CHECKING:  # testbed.certs needs `cryptography` (the test extra): see kafka_cluster.py
    from testbed.certs import Pki

__all__ = [
    "CLIENT_LISTENERS",
    "SASL_MECHANISMS",
    "USERS",
    "log4j_properties",
    "server_properties",
]

#: The client listener kinds a cluster can offer (named after their security protocol).
CLIENT_LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: Users known to every SASL mechanism; admin is the super user when the authorizer is on.
USERS: Mapping[str, str] = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def log4j_properties(directory: Path, *, request_log: bool) -> str:
    """Warnings and errors to stdout, plus the line that says the node is up; with
    ``request_log``, Kafka's request log (DEBUG) to requests.log, message only."""
    lines = [
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = out",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = warn",
        "rootLogger.appenderRef.out.ref = out",
        "logger.started.name = kafka.server.KafkaRaftServer",
        "logger.started.level = info",
    ]
    if request_log:
        lines += [
            "appender.requests.type = File",
            "appender.requests.name = requests",
            f"appender.requests.fileName = {directory / 'requests.log'}",
            "appender.requests.immediateFlush = true",
            "appender.requests.layout.type = PatternLayout",
            "appender.requests.layout.pattern = %m%n",
            "logger.requests.name = kafka.request.logger",
            "logger.requests.level = debug",
            "logger.requests.additivity = false",
            "logger.requests.appenderRef.requests.ref = requests",
        ]
    return "\n".join(lines) + "\n"


def _jaas_plain(username: str, users: Mapping[str, str]) -> str:
    accounts = " ".join(f'user_{name}="{secret}"' for name, secret in users.items())
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{username}" password="{users[username]}" {accounts};'
    )


def _sasl_listener_properties(listener: str) -> list[str]:
    name = listener.lower()
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    oauth = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="admin";'
    )
    validator = (
        "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
        "OAuthBearerUnsecuredValidatorCallbackHandler"
    )
    return [
        f"listener.name.{name}.plain.sasl.jaas.config={_jaas_plain('admin', USERS)}",
        f"listener.name.{name}.scram-sha-256.sasl.jaas.config={scram}",
        f"listener.name.{name}.scram-sha-512.sasl.jaas.config={scram}",
        f"listener.name.{name}.oauthbearer.sasl.jaas.config={oauth}",
        f"listener.name.{name}.oauthbearer.sasl.server.callback.handler.class={validator}",
    ]


def server_properties(
    node: KafkaNode,
    nodes: tuple[KafkaNode, ...],
    voters: tuple[KafkaNode, ...],
    *,
    version: str,
    listeners: tuple[str, ...],
    pki: Pki | None,
    ssl_client_auth: str,
    authorizer: bool,
    reauth_ms: int | None,
    listener_certs: Mapping[str, str],
    extra: Mapping[str, str],
) -> str:
    count = len(nodes)
    internal = "SASL_PLAINTEXT" if authorizer else "PLAINTEXT"
    voter = node in voters
    names = [*listeners, "INTERNAL", *(["CONTROLLER"] if voter else [])]
    protocol = {**{name: name for name in listeners}, "INTERNAL": internal, "CONTROLLER": internal}
    lines = {
        "process.roles": "broker,controller" if voter else "broker",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(
            f"{n.node_id}@{HOST}:{n.ports['CONTROLLER']}" for n in voters
        ),
        "listeners": ",".join(f"{name}://{HOST}:{node.ports[name]}" for name in names),
        "advertised.listeners": ",".join(
            f"{name}://{HOST}:{node.ports[name]}" for name in [*listeners, "INTERNAL"]
        ),
        "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol.items()),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "INTERNAL",
        "log.dirs": str(node.directory / "data"),
        "num.partitions": "1",
        "default.replication.factor": str(min(count, 3)),
        "min.insync.replicas": str(min(count, 2)),
        "offsets.topic.replication.factor": str(min(count, 3)),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(min(count, 3)),
        "transaction.state.log.min.isr": str(min(count, 2)),
        "transaction.state.log.num.partitions": "5",
        "group.initial.rebalance.delay.ms": "0",
        # A short wait before a restarted node is unfenced keeps restarts quick.
        "controller.quorum.election.timeout.ms": "1000",
        "controller.quorum.fetch.timeout.ms": "2000",
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
    }
    if not version.startswith("3."):
        lines |= {
            "share.coordinator.state.topic.replication.factor": str(min(count, 3)),
            "share.coordinator.state.topic.min.isr": str(min(count, 2)),
            "share.coordinator.state.topic.num.partitions": "3",
        }
    sasl = [name for name in listeners if name.startswith("SASL_")]
    if sasl or authorizer:
        lines["sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
    if authorizer:
        lines |= {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "allow.everyone.if.no.acl.found": "false",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": _jaas_plain("admin", USERS),
            "listener.name.controller.plain.sasl.jaas.config": _jaas_plain("admin", USERS),
        }
    if reauth_ms is not None:
        lines["connections.max.reauth.ms"] = str(reauth_ms)
    if pki is not None:
        lines |= {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(node.directory / "keystore.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": ssl_client_auth,
        }
        for listener in listener_certs:  # Kafka's per-listener override of the key store
            prefix = f"listener.name.{listener.lower()}.ssl.keystore"
            lines[f"{prefix}.type"] = "PEM"
            lines[f"{prefix}.location"] = str(node.directory / f"keystore-{listener}.pem")
    lines |= dict(extra)
    text = [f"{key}={value}" for key, value in lines.items()]
    for name in sasl:
        text += _sasl_listener_properties(name)
    return "\n".join(text) + "\n"
