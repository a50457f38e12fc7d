# Strategy: confluent-kafka's (librdkafka's) admin round (tests/compat/_admin.py): AdminClient
# creates a topic, describes and incrementally alters its retention.ms, creates, describes
# and deletes an ACL, and deletes the topic, one step at a time (_case_program.step).
#
#   python -m tests.compat._admin_confluent BOOTSTRAP TOPIC PRINCIPAL
"""confluent-kafka's admin program."""

from __future__ import annotations

import sys
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.compat._case_program import sasl_from_environment, step

TIMEOUT_S = 30


def retention(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    return str(configs["retention.ms"].value)


def main(argv: list[str]) -> int:
    bootstrap, topic, principal = argv
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if sasl := sasl_from_environment():
        mechanism, user, password = sasl
        settings |= {"security.protocol": "sasl_plaintext", "sasl.mechanisms": mechanism,
                     "sasl.username": user, "sasl.password": password}  # fmt: skip
    admin = AdminClient(settings)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=TIMEOUT_S)
    step("created", topic)
    step("config", topic, f"retention.ms={retention(admin, topic)}")
    resource = ConfigResource(
        ResourceType.TOPIC, topic,
        incremental_configs=[ConfigEntry("retention.ms", "3600000",
                                         incremental_operation=AlterConfigOpType.SET)],
    )  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
    step("altered", topic)
    step("described", topic, f"retention.ms={retention(admin, topic)}")
    binding = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    admin.create_acls([binding])[binding].result(timeout=TIMEOUT_S)
    step("acl-created", topic, principal)
    acl_filter = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    described = admin.describe_acls(acl_filter).result(timeout=TIMEOUT_S)
    found = sorted(f"{b.principal} {b.host} {b.operation.name} {b.name}" for b in described)
    step("acls", topic, "; ".join(found))
    deleted = admin.delete_acls([acl_filter])[acl_filter].result(timeout=TIMEOUT_S)
    step("acl-deleted", topic, str(len(deleted)))
    admin.delete_topics([topic])[topic].result(timeout=TIMEOUT_S)
    step("deleted", topic)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
