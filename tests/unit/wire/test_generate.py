"""The checked-in generated modules are exactly what the generator writes today."""

from __future__ import annotations

from wire import _generate


def test_generated_files_are_current() -> None:
    files = _generate.generate()
    stale = [str(p) for p, text in files.items() if not p.exists() or p.read_text() != text]
    assert stale == [], "run `python -m wire._generate`"


def test_every_decodable_api_has_a_request_and_a_response_module() -> None:
    names = {p.name for p in _generate.generate()}
    for api in _generate.DECODABLE_APIS:
        for kind in ("request", "response"):
            assert f"{_generate.snake(api)}_{kind}.py" in names
