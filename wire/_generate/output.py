# Strategy: the generated files are committed, so that `wire` needs neither the JSON nor the
# jar at run time, and a test re-runs the generator to prove they are current. Which jar is
# the caller's business: ``--jar`` names it (testbed/kafka_install.py prints the one of the
# newest Kafka line the tests run), so this development tool depends on nothing but the file.
"""Every generated file of wire/, and the command that writes them or checks them."""

from __future__ import annotations

import argparse
from pathlib import Path

from .api_table import api_table_source
from .messages import message_module_source, module_name
from .schemas import KafkaSchemas

__all__ = ["DECODABLE_APIS", "WIRE_DIR", "generate", "main"]

#: The APIs whose bodies the proxy looks inside. Every other API key is still in the API
#: table; adding a name here is all it takes to decode it too.
DECODABLE_APIS = (
    "Produce",
    "Fetch",
    "ListOffsets",
    "Metadata",
    "FindCoordinator",
    "ApiVersions",
    "DescribeCluster",
    # The proxy's own SASL client (proxy/security/sasl_client.py) and its answer to clients.
    "SaslHandshake",
    "SaslAuthenticate",
    # Their responses name brokers (KIP-932 node endpoints), rewritten by proxy/routing/rewrite.py.
    "ShareFetch",
    "ShareAcknowledge",
)

WIRE_DIR = Path(__file__).resolve().parent.parent


def messages_init_source(schemas: KafkaSchemas) -> str:
    lines = [schemas.banner("the message list in wire/_generate/output.py").rstrip("\n")]
    lines.append('"""Typed message classes of the APIs wire can decode (generated)."""')
    lines += ["", "from __future__ import annotations", "", "from wire._struct import Message"]
    names = []
    for api in sorted(DECODABLE_APIS):
        for kind in ("Request", "Response"):
            message = api + kind
            names.append(message)
            lines.append(f"from wire.messages.{module_name(message)} import {message}")
    lines += ["", "__all__ = ["]
    lines += [f'    "{n}",' for n in ["REQUESTS", "RESPONSES", *sorted(names)]]
    lines += ["]", ""]
    for kind in ("Request", "Response"):
        lines.append(f"#: Every decodable {kind.lower()} class, by API name.")
        lines.append(f"{kind.upper()}S: tuple[type[Message], ...] = (")
        lines += [f"    {api}{kind}," for api in sorted(DECODABLE_APIS)]
        lines.append(")")
    lines.append("")
    return "\n".join(lines)


def generate(schemas: KafkaSchemas) -> dict[Path, str]:
    """Every generated file: path -> content."""
    files = {WIRE_DIR / "_api_table.py": api_table_source(schemas)}
    files[WIRE_DIR / "messages" / "__init__.py"] = messages_init_source(schemas)
    for api in DECODABLE_APIS:
        for kind in ("Request", "Response"):
            message = api + kind
            path = WIRE_DIR / "messages" / f"{module_name(message)}.py"
            files[path] = message_module_source(schemas, message)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wire._generate",
        description="Write wire/_api_table.py and wire/messages/ from the message schemas "
        "in a kafka-clients jar.",
    )
    parser.add_argument(
        "--jar",
        type=Path,
        required=True,
        help="the kafka-clients jar to read (the one the tables follow: "
        "`python -m testbed.kafka_install --print-clients-jar`)",
    )
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    stale = []
    for path, content in generate(KafkaSchemas.from_jar(args.jar)).items():
        if not path.exists() or path.read_text() != content:
            stale.append(path)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
    for path in stale:
        print(("stale: " if args.check else "wrote: ") + str(path.relative_to(WIRE_DIR.parent)))
    return 1 if (args.check and stale) else 0
