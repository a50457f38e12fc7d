# Strategy: one pydantic model tree is the single source of truth for every setting, and this
# package's face is the one the rest of the proxy imports (``from proxy.config import Config``);
# its modules each hold one idea behind it. Values come, in rising precedence, from the
# sections' defaults, a TOML file, PURGATORY_PROXY_* env vars and CLI flags; every model
# forbids unknown keys; errors name the key and where its value came from, never the value.
"""The proxy's configuration: defaults, TOML file, environment and CLI overrides.

_values.py    the kinds of value settings hold: HOST:PORT, IP addresses, ports, sizes
_sections.py  one model per TOML table ([proxy], [upstream], [memory], ...), with defaults
_model.py     Config: every section, and the sources settings come from (env lists too)
_load.py      load_config: file, environment and flags, or one line naming every bad key
"""

from __future__ import annotations

from proxy.config._load import load_config
from proxy.config._model import ENV_PREFIX, Config, ConfigError
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
from proxy.config._values import UNLIMITED, is_wildcard, parse_host_port

__all__ = [
    "ENV_PREFIX",
    "UNLIMITED",
    "Config",
    "ConfigError",
    "ConnectionsSection",
    "FetchSection",
    "LogSection",
    "MemorySection",
    "MetricsSection",
    "ProxySection",
    "PurgatorySection",
    "UpstreamSection",
    "is_wildcard",
    "load_config",
    "parse_host_port",
]
