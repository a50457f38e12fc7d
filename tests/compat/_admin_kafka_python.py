# Strategy: kafka-python's admin round (tests/compat/_admin.py): KafkaAdminClient creates a
# topic, describes and (incrementally) alters its retention.ms, creates, describes and
# deletes an ACL, and deletes the topic, one step at a time (_case_program.step).
#
#   python -m tests.compat._admin_kafka_python BOOTSTRAP TOPIC PRINCIPAL
"""kafka-python's admin program."""

from __future__ import annotations

import sys
from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from tests.compat._case_program import sasl_from_environment, step


def retention(admin: KafkaAdminClient, topic: str) -> str:
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": None})],
        config_filter="all",
    )
    entry = described["topic"][topic]["retention.ms"]
    return str(entry["value"] if isinstance(entry, dict) else entry)


def main(argv: list[str]) -> int:
    bootstrap, topic, principal = argv
    options: dict[str, Any] = {}
    if sasl := sasl_from_environment():
        mechanism, user, password = sasl
        options = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
                   "sasl_plain_username": user, "sasl_plain_password": password}  # fmt: skip
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="compat-admin", **options)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        step("created", topic)
        step("config", topic, f"retention.ms={retention(admin, topic)}")
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "3600000"})],
            incremental=True,
        )
        step("altered", topic)
        step("described", topic, f"retention.ms={retention(admin, topic)}")
        pattern = ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
        acl = ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
        created = admin.create_acls([acl])
        if created["failed"]:
            raise SystemExit(f"create ACL failed: {created['failed']}")
        step("acl-created", topic, principal)
        acl_filter = ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL),
        )  # fmt: skip
        acls, error = admin.describe_acls(acl_filter)
        if error.errno:
            raise SystemExit(f"describe ACLs failed: {error}")
        found = sorted(
            f"{a.principal} {a.host} {a.operation.name} {a.resource_pattern.resource_name}"
            for a in acls
        )
        step("acls", topic, "; ".join(found))
        ((_, deleted, error),) = admin.delete_acls([acl_filter])
        if error.errno:
            raise SystemExit(f"delete ACLs failed: {error}")
        step("acl-deleted", topic, str(len(deleted)))
        admin.delete_topics([topic])
        step("deleted", topic)
    finally:
        admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
