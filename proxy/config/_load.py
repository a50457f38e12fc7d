# Strategy: a configuration that does not validate is one line naming every offending key,
# where its value came from (flag, environment variable or file) and what was expected, and for
# an unknown key the nearest valid one. Never the value itself: any setting may hold a secret
# (a password, or a whole section as JSON in one variable), and error text ends up in
# terminals, CI logs and crash reports. The validators say what they expected; _describe hides
# any given text that a message still repeats; and tests/unit/proxy/config/test_config_no_echo.py
# tries every key with bad values to keep it so.
"""load_config: the configuration from file, environment and flags, or one line on why not."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsConfigDict

from proxy.config._model import ENV_PREFIX, Config, ConfigError, env_variable
from proxy.config._values import EXPECTED_TEXTS

__all__ = ["load_config"]


def _suggestion(unknown: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(unknown, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _problem(loc: tuple[str | int, ...], message: str, error_type: str) -> str:
    """One problem as ``key: message``, unknown keys with the nearest valid one."""
    parts = [str(part) for part in loc]
    key = ".".join(parts) or "(top level)"
    if len(parts) == 1 and message.startswith(f"{key}."):
        return message  # a section's own rule, which names its keys itself
    if error_type != "extra_forbidden":
        return f"{key}: {message}"
    model: type[BaseModel] | None = Config
    for part in parts[:-1]:  # walk down to the section that holds the unknown key
        field = model.model_fields.get(part) if model is not None else None
        annotation = field.annotation if field is not None else None
        is_model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        model = annotation if is_model else None  # type: ignore[assignment]
    prefix = "".join(f"{part}." for part in parts[:-1])
    choices = [prefix + name for name in model.model_fields] if model is not None else []
    return f"unknown key {key!r}{_suggestion(key, choices)}"


def _source(
    loc: tuple[str | int, ...],
    message: str,
    overrides: Mapping[str, Any],
    flag_names: Mapping[str, str],
    path: Path | None,
) -> str:
    """Where the offending value came from, in the precedence order the loader applies."""
    parts = [str(part) for part in loc]
    if len(parts) == 1 and message.startswith(f"{parts[0]}."):
        # A section's own rule opens with the key it is about ("memory.limit (1KiB) is ..."):
        # that key is the one the user set to break it.
        parts.append(message.removeprefix(f"{parts[0]}.").split(" ", 1)[0])
    dotted = ".".join(parts[:2])
    if len(parts) >= 2 and parts[1] in overrides.get(parts[0], {}):
        return f" (from {flag_names.get(dotted, 'the command line')})"
    for depth in range(len(parts), 0, -1):  # upstream.sasl.password, then upstream.sasl ...
        variable = env_variable(*parts[:depth])
        if variable is not None:
            return f" (from environment variable {variable})"
    return f" (in {path})" if path is not None else ""


def _given_texts(value: object) -> Iterator[str]:
    """Every text given for one key (a list holds several). Not a section's: its own rules
    quote the values they parsed (``memory.limit (1KiB)``), which are numbers, not secrets."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _given_texts(item)


def _without_given(message: str, given: object) -> str:
    """``message`` with any text given for the key replaced: the net under the rule that
    validators say what they expected, never what they got (see the Strategy comment). Our
    own fixed texts (their examples) are left whole: ``--listen 127.0.0.1`` must not turn the
    example ``127.0.0.1:9092`` into ``(the value given):9092``."""
    own = {f"\0{n}\0": text for n, text in enumerate(EXPECTED_TEXTS) if text in message}
    for placeholder, text in own.items():
        message = message.replace(text, placeholder)
    for text in sorted(_given_texts(given), key=len, reverse=True):
        if text.strip() and text in message:
            message = message.replace(text, "(the value given)")
    for placeholder, text in own.items():
        message = message.replace(placeholder, text)
    return message


def _key_of(
    loc: tuple[str | int, ...], bad_keys: set[tuple[str | int, ...]]
) -> tuple[str | int, ...]:
    """``loc`` without the keys given inside a value that failed their own check (``bad_keys``;
    pydantic marks them ``proxy.broker_ports.<text>.[key]``): such a text is the user's data,
    as a value is. A key that passed (a node id) stays, as do sections' keys and indexes."""
    model: type[BaseModel] | None = Config
    kept: list[str | int] = []
    for index, part in enumerate(loc):
        if model is None:  # inside a dict or list value
            if part != "[key]" and loc[: index + 1] not in bad_keys:
                kept.append(part)
            continue
        kept.append(part)
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        is_model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        model = annotation if is_model else None  # type: ignore[assignment]
    return tuple(kept)


def _describe(
    error: ValidationError,
    overrides: Mapping[str, Any],
    flag_names: Mapping[str, str],
    path: Path | None,
) -> str:
    problems: list[str] = []
    bad_keys = {
        tuple(item["loc"][:-1]) for item in error.errors() if item["loc"][-1:] == ("[key]",)
    }
    for item in error.errors():
        loc = _key_of(tuple(item["loc"]), bad_keys)
        message = _without_given(item["msg"].removeprefix("Value error, "), item.get("input"))
        problem = _problem(loc, message, item["type"])
        problem += _source(loc, message, overrides, flag_names, path)
        if problem not in problems:  # a dict's key and its value may fail alike
            problems.append(problem)
    return "invalid configuration: " + "; ".join(problems)


def _unknown_env_sections() -> list[str]:
    """PURGATORY_PROXY_* variables that name no section (pydantic-settings ignores them)."""
    sections = list(Config.model_fields)
    problems = []
    for name in os.environ:
        if not name.upper().startswith(ENV_PREFIX):
            continue
        section = name[len(ENV_PREFIX) :].split("__", 1)[0].lower()
        if section not in sections:
            suggestion = _suggestion(section, sections)
            problems.append(
                f"unknown key {section!r}{suggestion} (from environment variable {name})"
            )
    return problems


def load_config(
    path: Path | None = None,
    overrides: dict[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> Config:
    """Build the configuration from ``path`` (TOML), the environment and ``overrides``.

    Args:
        path: a TOML file, or None for defaults and environment only.
        overrides: nested ``{section: {key: value}}`` from CLI flags; they win over everything.
        flag_names: ``{"section.key": "--flag"}``, so an error names the flag the user typed.

    Raises:
        ConfigError: in one line, naming each unknown or invalid key and where it came from
            (flag, environment variable or file); unknown keys with the nearest valid one.
    """
    if path is not None and not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    unknown = _unknown_env_sections()
    if unknown:
        raise ConfigError("invalid configuration: " + "; ".join(unknown))
    settings_cls = type(
        "FileConfig",
        (Config,),
        {"model_config": SettingsConfigDict(**{**Config.model_config, "toml_file": path})},
    )
    try:
        loaded: Config = settings_cls(**(overrides or {}))
    except ValidationError as error:
        raise ConfigError(_describe(error, overrides or {}, flag_names or {}, path)) from None
    except ValueError as error:  # malformed TOML
        raise ConfigError(f"cannot read {path}: {error}") from None
    return Config.model_validate(loaded.model_dump())
