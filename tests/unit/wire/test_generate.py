"""The checked-in generated modules are exactly what the generator writes today, from the
schemas of the newest Kafka line the tests run."""

from __future__ import annotations

import functools
from pathlib import Path

from testbed.kafka_install import KAFKA_LINES, kafka_clients_jar
from wire import _generate


@functools.cache
def _generated() -> dict[Path, str]:
    schemas = _generate.KafkaSchemas.from_jar(kafka_clients_jar(KAFKA_LINES[0]))
    return _generate.generate(schemas)


def test_generated_files_are_current() -> None:
    stale = [str(p) for p, text in _generated().items() if not p.exists() or p.read_text() != text]
    assert stale == [], (
        "run `python -m wire._generate --jar "
        '"$(python -m testbed.kafka_install --print-clients-jar)"`'
    )


def test_every_decodable_api_has_a_request_and_a_response_module() -> None:
    names = {p.name for p in _generated()}
    for api in _generate.DECODABLE_APIS:
        for kind in ("request", "response"):
            assert f"{_generate.snake(api)}_{kind}.py" in names
