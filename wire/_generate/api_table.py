"""The source of wire/_api_table.py: every API key in the schemas, with its version ranges.

Why every key and not only the decodable ones: the proxy passes on every API the cluster
offers (as bytes, at the cluster's range), and an API missing from the table is one it cannot
pass on.
"""

from __future__ import annotations

from .schemas import KafkaSchemas, parse_versions, snake

__all__ = ["api_table_source"]


def api_table_source(schemas: KafkaSchemas) -> str:
    rows = []
    for name in schemas.names():
        data = schemas.load(name)
        if data.get("type") != "request":
            continue
        response = schemas.load(name[: -len("Request")] + "Response")
        valid = parse_versions(data["validVersions"])
        if valid is None:
            # "none": an API Kafka removed (the ZooKeeper-era LeaderAndIsr, StopReplica,
            # UpdateMetadata, ControlledShutdown), kept as a file only to reserve its key.
            continue
        flexible = parse_versions(data.get("flexibleVersions"))
        rflexible = parse_versions(response.get("flexibleVersions"))
        assert flexible == rflexible, name
        rows.append(
            (
                data["apiKey"],
                name[: -len("Request")],
                valid[0],
                valid[1],
                None if flexible is None else flexible[0],
                bool(data.get("latestVersionUnstable", False)),
                tuple(data.get("listeners", ())),
            )
        )
    rows.sort()
    body = "\n".join(f"    {row!r},".replace("'", '"') for row in rows)
    members = "\n".join(f"    {snake(row[1]).upper()} = {row[0]}" for row in rows)
    return (
        schemas.banner("every *Request.json / *Response.json")
        + '"""Every API key in the schema tables (generated; see wire/_generate/)."""\n\n'
        + "from __future__ import annotations\n\n"
        + "from enum import IntEnum\n\n\n"
        + "class ApiKey(IntEnum):\n"
        + '    """Kafka API keys by name."""\n\n'
        + members
        + "\n\n\n"
        + "#: (api_key, name, min_version, max_version, first_flexible_version,\n"
        + "#:  latest_version_unstable, listeners)\n"
        + "API_ROWS: tuple[tuple[int, str, int, int, int | None, bool, tuple[str, ...]], ...] = (\n"
        + body
        + "\n)\n"
    )
