"""No configuration error repeats a value it was given: any setting may hold a secret.

The rule is general, so the test is too: every key of the configuration (and every section,
as one JSON variable) gets bad values that carry a marker, from each place a value can come
from (the TOML file, a PURGATORY_PROXY_* variable, a command-line override); each error the
loader raises must name the key and must not contain the marker. A count of the errors seen
keeps the test from passing because nothing failed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from proxy.config import ENV_PREFIX, Config, ConfigError, load_config

MARKER = "s3cr3t-Marker-x9"
#: Values that fail most validators in different ways (JSON, sizes, HOST:PORT, literals).
BAD_VALUES = [
    MARKER,
    f"[{MARKER}",
    f'{{"{MARKER}": "{MARKER}"}}',
    f'["{MARKER}"]',
    f"1 {MARKER}",
    f"256MB!{MARKER}",
    f"{MARKER}:80",
    f"{MARKER}:99999",
    f"0.0.0.0:1{MARKER}",
]


def _leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaves(annotation, (*prefix, name))
        else:
            yield (*prefix, name)


def _sections(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield (*prefix, name)
            yield from _sections(annotation, (*prefix, name))


KEYS = list(_leaves(Config))
SECTIONS = list(_sections(Config))


def _error(load: object) -> str | None:
    try:
        load()  # type: ignore[operator]
    except ConfigError as error:
        return str(error)
    return None


def _toml(path: tuple[str, ...], value: str) -> str:
    return f"[{'.'.join(path[:-1])}]\n{path[-1]} = {json.dumps(value)}\n"


def test_the_sweep_covers_every_key_and_section() -> None:
    assert ("upstream", "sasl", "password") in KEYS
    assert ("proxy", "tls", "client_ca_file") in KEYS
    assert ("upstream", "sasl") in SECTIONS
    assert len(KEYS) > 40


@pytest.mark.parametrize("path", KEYS, ids=".".join)
def test_no_error_repeats_a_bad_value_of_any_key(
    path: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = ENV_PREFIX + "__".join(path).upper()
    errors = []
    for index, value in enumerate(BAD_VALUES):
        toml = tmp_path / f"bad-{index}.toml"
        toml.write_text(_toml(path, value))
        errors.append(_error(lambda toml=toml: load_config(toml)))  # type: ignore[misc]
        if len(path) == 2:  # what a command-line flag gives
            overrides = {path[0]: {path[1]: value}}
            errors.append(_error(lambda overrides=overrides: load_config(None, overrides)))  # type: ignore[misc]
        with monkeypatch.context() as env:
            env.setenv(variable, value)
            errors.append(_error(load_config))
    raised = [error for error in errors if error is not None]
    for error in raised:
        assert MARKER not in error
        # It names the key, or the section whose rule it broke (cert_file without key_file).
        assert ".".join(path[:-1]) in error or variable in error
    # Only free text settings (names, paths) take every one of these values.
    free_text = {"username", "password", "password_file", "token_file", "cert_file", "key_file"}
    free_text |= {"ca_file", "client_ca_file", "crl_file", "requests", "advertised_host"}
    if path[-1] not in free_text:
        assert raised, f"no bad value was refused for {'.'.join(path)}"


@pytest.mark.parametrize("section", SECTIONS, ids=".".join)
@pytest.mark.parametrize(
    "value",
    [
        f'{{"password": "{MARKER}", ',  # malformed JSON: the case issue 29 found
        f'{{"password": "{MARKER}", "mechanism": "{MARKER}", "listen": "{MARKER}"}}',
        f'{{"limit": "{MARKER}", "bootstrap": ["{MARKER}"], "tick_ms": "{MARKER}"}}',
        f'["{MARKER}"]',
        MARKER,
    ],
)
def test_no_error_repeats_a_section_given_as_one_variable(
    section: tuple[str, ...], value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = ENV_PREFIX + "__".join(section).upper()
    monkeypatch.setenv(variable, value)
    error = _error(load_config)
    assert error is not None
    assert MARKER not in error
    assert variable in error or ".".join(section) in error


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        # The case issue 29 found: the password was in the error.
        (
            "UPSTREAM__SASL",
            '{"password": "hunter2-secret", ',
            "invalid configuration: PURGATORY_PROXY_UPSTREAM__SASL: expected JSON",
        ),
        # A key three deep names its own variable, not none.
        (
            "UPSTREAM__SASL__MECHANISM",
            "GSSAPI",
            "invalid configuration: upstream.sasl.mechanism: Input should be '', 'PLAIN', "
            "'SCRAM-SHA-256', 'SCRAM-SHA-512' or 'OAUTHBEARER' (from environment variable "
            "PURGATORY_PROXY_UPSTREAM__SASL__MECHANISM)",
        ),
    ],
    ids=["section as malformed JSON", "key three deep"],
)
def test_errors_from_the_environment_name_the_variable(
    variable: str, value: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_PREFIX + variable, value)
    with pytest.raises(ConfigError) as caught:
        load_config()
    assert str(caught.value) == expected
