# Strategy: pydantic-settings gathers every setting from, in rising precedence, the defaults
# of the sections, a TOML file, PURGATORY_PROXY_* environment variables (section and key joined
# by "__") and CLI flags (given as init arguments). The model is frozen: the proxy reads its
# configuration, never changes it.
"""Config: every setting of the proxy, and where settings come from."""

from __future__ import annotations

import os
from typing import Any, get_origin

from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from proxy.config._sections import (
    ConnectionsSection,
    FetchSection,
    LogSection,
    MemorySection,
    MetricsSection,
    ProxySection,
    PurgatorySection,
    UpstreamSection,
)

__all__ = ["ENV_PREFIX", "Config", "ConfigError", "env_variable", "env_variable_of_key"]

ENV_PREFIX = "PURGATORY_PROXY_"


class ConfigError(Exception):
    """A setting is unknown or invalid; the one-line message names every offending key."""


class Config(BaseSettings):
    """Every setting of the proxy. See config.example.toml for the documented defaults."""

    model_config = SettingsConfigDict(
        extra="forbid",
        frozen=True,
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        case_sensitive=False,
    )

    proxy: ProxySection = Field(default_factory=ProxySection)
    upstream: UpstreamSection = Field(default_factory=UpstreamSection)
    memory: MemorySection = Field(default_factory=MemorySection)
    connections: ConnectionsSection = Field(default_factory=ConnectionsSection)
    purgatory: PurgatorySection = Field(default_factory=PurgatorySection)
    fetch: FetchSection = Field(default_factory=FetchSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    log: LogSection = Field(default_factory=LogSection)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # CLI flags arrive as init kwargs and win; then env; then the TOML file, if any.
        toml = TomlConfigSettingsSource(settings_cls)
        return (init_settings, _EnvSource(settings_cls), toml)


class _EnvSource(EnvSettingsSource):
    """PURGATORY_PROXY_* variables; list values may be comma-separated as well as JSON.

    Why: ``PURGATORY_PROXY_UPSTREAM__BOOTSTRAP=kafka-1:9092,kafka-2:9092`` is how every other
    Kafka tool spells a bootstrap list, and pydantic-settings alone accepts only JSON there.
    """

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError:
            if isinstance(value, str) and get_origin(field.annotation) is list:
                return [item.strip() for item in value.split(",") if item.strip()]
            variable = env_variable_of_key(field_name) or f"the variable for {field_name}"
            raise ConfigError(f"invalid configuration: {variable}: expected JSON") from None


def env_variable(*path: str) -> str | None:
    """The PURGATORY_PROXY_* variable set for ``path`` (section, key), case-insensitively."""
    wanted = (ENV_PREFIX + "__".join(path)).upper()
    return next((name for name in os.environ if name.upper() == wanted), None)


def env_variable_of_key(key: str) -> str | None:
    """The PURGATORY_PROXY_*__KEY variable set for a key of any section."""
    suffix = "__" + key.upper()
    names = [name.upper() for name in os.environ]
    return next((n for n in names if n.startswith(ENV_PREFIX) and n.endswith(suffix)), None)
