# Strategy: a development tool, never imported by wire at run time. It reads Kafka's JSON
# message schemas from the kafka-clients jar it is given and writes checked-in Python: the API
# table of every API key (wire/_api_table.py) and one module of typed dataclasses per message
# the proxy looks inside (wire/messages/). The codec itself is compiled at run time from the
# schema rows written here (wire/_compiler.py).
"""Generate wire/_api_table.py and wire/messages/ from the Kafka JSON message schemas.

Run ``python -m wire._generate --jar "$(python -m testbed.kafka_install --print-clients-jar)"``
after changing the message list or upgrading the Kafka line; with ``--check`` it exits 1 if
anything is stale. The modules import one another relatively and nothing from ``wire``, so if
stale output keeps ``wire`` itself from importing, load this folder as a package of its own
(importlib.util.spec_from_file_location with submodule_search_locations) and call ``main()``.

schemas.py    Kafka's JSON schemas read strictly from a jar, version ranges, attribute names
api_table.py  the source of wire/_api_table.py: every API key
messages.py   the source of one wire/messages/ module
output.py     every generated file (DECODABLE_APIS), and the command that writes or checks them
"""

from __future__ import annotations

from .output import DECODABLE_APIS, generate, main
from .schemas import KafkaSchemas, snake

__all__ = ["DECODABLE_APIS", "KafkaSchemas", "generate", "main", "snake"]
