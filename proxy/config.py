# Strategy: one pydantic model tree is the single source of truth for every setting. Values
# come, in rising precedence, from the defaults below, a TOML file, PURGATORY_PROXY_* env vars
# (section and key joined by "__") and CLI flags. Every model forbids unknown keys, so a typo is
# an error that names the key instead of a silently ignored setting. config.example.toml
# mirrors these defaults and a test keeps the two in step.
"""The proxy's configuration: defaults, TOML file, environment and CLI overrides."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from proxy.purgatory import DEFAULT_PURGE_INTERVAL, DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE
from proxy.security_config import (
    ClientAuth,
    ClientTlsSection,
    UpstreamSaslSection,
    UpstreamTlsSection,
)

__all__ = ["Config", "ConfigError", "load_config", "parse_host_port"]

ENV_PREFIX = "PURGATORY_PROXY_"


class ConfigError(Exception):
    """A setting is unknown or invalid; the one-line message names every offending key."""


def parse_host_port(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6) and check the port's range."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 0-65535")
    return host.strip("[]"), port


def _host_port(value: str) -> str:
    parse_host_port(value)
    return value


def _optional_host_port(value: str) -> str:
    return _host_port(value) if value else value


HostPort = Annotated[str, AfterValidator(_host_port)]
OptionalHostPort = Annotated[str, AfterValidator(_optional_host_port)]
Port = Annotated[int, Field(ge=1, le=65535)]

_BYTE_SIZE = TypeAdapter(ByteSize)


def _pool_limit(value: object) -> int:
    # Kafka's -1 ("disabled") arrives as an int from TOML but as a string from the environment.
    if value in (-1, "-1"):
        return -1
    return int(_BYTE_SIZE.validate_python(value))


PoolLimit = Annotated[int, BeforeValidator(_pool_limit)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProxySection(_Section):
    """Where clients connect and what the proxy tells them to connect to."""

    listen: HostPort = "127.0.0.1:9092"
    """Bootstrap listener. Port 0 picks a free port (printed when ready)."""
    advertised_host: str = ""
    """Host written into every broker address a client sees; empty = the listen host."""
    first_broker_port: int = Field(default=0, ge=0, le=65535)
    """Per-broker listeners get consecutive ports from here; 0 = free ports chosen by the OS."""
    broker_ports: dict[int, Port] = Field(default_factory=dict)
    """Explicit node id -> proxy port mapping; wins over first_broker_port."""
    client_auth: ClientAuth = "none"
    """How clients authenticate; "none" = the proxy's own identity upstream (docs/security.md)."""
    tls: ClientTlsSection = Field(default_factory=ClientTlsSection)


class UpstreamSection(_Section):
    """The real Kafka cluster behind the proxy."""

    bootstrap: list[HostPort] = Field(default_factory=list)
    """Upstream bootstrap servers. Empty = start the embedded Tansu broker."""
    connect_timeout_ms: int = Field(default=10_000, ge=1)
    """Connection attempt limit (Kafka: socket.connection.setup.timeout.ms)."""
    metadata_refresh_ms: int = Field(default=30_000, ge=100)
    """How often the proxy refreshes the broker list it routes to (Kafka: metadata.max.age.ms)."""
    tls: UpstreamTlsSection = Field(default_factory=UpstreamTlsSection)
    sasl: UpstreamSaslSection = Field(default_factory=UpstreamSaslSection)


class MemorySection(_Section):
    """KIP-72: one bytes limit for everything the proxy reads from clients."""

    limit: PoolLimit = 256 * 1024 * 1024
    """Pool size in bytes (64MiB etc. accepted); -1 disables (Kafka: queued.max.request.bytes)."""
    socket_request_max_bytes: ByteSize = ByteSize(100 * 1024 * 1024)
    """Largest request frame accepted from a client (Kafka: socket.request.max.bytes)."""
    tight_fraction: float = Field(default=0.10, gt=0.0, lt=1.0)
    """Below this share of the pool, waiting connections are served in random order."""

    @model_validator(mode="after")
    def _limit_holds_one_request(self) -> MemorySection:
        # KIP-72 "Configuration Validation": the pool must fit the largest single request.
        if self.limit != -1 and self.limit < self.socket_request_max_bytes:
            raise ValueError(
                f"memory.limit ({_bytes(self.limit)}) is below memory.socket_request_max_bytes "
                f"({_bytes(self.socket_request_max_bytes)}), the largest request the pool must "
                "hold (Kafka's rule: queued.max.request.bytes >= socket.request.max.bytes): "
                "raise the limit, or lower the largest request with --max-request-size "
                f"(memory.socket_request_max_bytes), e.g. --max-request-size {_bytes(self.limit)}"
            )
        return self


def _bytes(count: int) -> str:
    """A byte count as the config accepts it back: 64MiB rather than 67108864."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size}{unit}"
    return str(count)


class ConnectionsSection(_Section):
    """Client connection lifetimes."""

    idle_timeout_ms: int = Field(default=600_000, ge=1)
    """Close a client connection idle this long (Kafka: connections.max.idle.ms)."""
    frame_timeout_ms: int = Field(default=30_000, ge=1)
    """Close a client that starts a frame and does not finish it within this time."""
    shutdown_drain_ms: int = Field(default=5_000, ge=0)
    """On SIGTERM/SIGINT, how long in-flight requests may take to finish."""
    upstream_idle_timeout_ms: int = Field(default=30_000, ge=0)
    """Close a client's own upstream connection when nothing went on it this long and nothing
    is owed on it (re-opened on the next request that needs it); 0 = keep it open. Its held
    fetches go on the proxy's shared channels, so an idle consumer costs one descriptor.
    Never closed with client_auth = "passthrough" (it carries the client's authentication), nor
    once it carried a ShareFetch or ShareAcknowledge (the broker ends a KIP-932 share session
    with the connection that opened it)."""


class PurgatorySection(_Section):
    """The timing wheel that holds delayed operations (seed 000's parameters)."""

    tick_ms: int = Field(default=DEFAULT_TICK_MS, ge=1)
    wheel_size: int = Field(default=DEFAULT_WHEEL_SIZE, ge=2)
    purge_interval: int = Field(default=DEFAULT_PURGE_INTERVAL, ge=1)
    """Purge watcher lists when estimated watched - pending exceeds this (Kafka's default)."""


class FetchSection(_Section):
    """Fetch sessions and long-polls terminated in the proxy (issue 6)."""

    hold: bool = True
    """Hold long-poll fetches and produces in the proxy's purgatory; false forwards them."""
    watcher_max_wait_ms: int = Field(default=500, ge=1)
    """How long each broker's watcher long-poll waits upstream for new data."""
    immediate_max_wait_ms: int = Field(default=100, ge=1)
    """Most a broker may keep the proxy's min_bytes=0 fetches (Kafka answers them at once)."""
    offset_watch_interval_ms: int = Field(default=100, gt=0)
    """With client_auth = "passthrough", each broker's offset watcher asks ListOffsets this
    often (the proxy's identity may read no records): a held fetch learns of data written behind
    the proxy at most this late, and "nothing new" known without asking is at most this old."""
    session_cache_size: int = Field(default=1000, ge=0)
    """Fetch sessions kept per broker (Kafka: max.incremental.fetch.session.cache.slots)."""
    response_max_bytes: ByteSize = ByteSize(4 * 1024 * 1024)
    """Most response bytes one upstream fetch may ask for, reserved from the pool first."""


class MetricsSection(_Section):
    """The operators' HTTP endpoint: /metrics, /healthz, /readyz."""

    listen: OptionalHostPort = ""
    """HOST:PORT of the endpoint; empty = not served."""


class LogSection(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"
    """text: one readable line per event; json: one JSON object per line (for log shippers)."""
    requests: str = ""
    """Request log file (JSON lines, one per client request); empty = no request log."""
    requests_max_bytes: ByteSize = ByteSize(100 * 1024 * 1024)
    """Rotate the request log when it would grow past this; 0 = never rotate."""
    requests_backups: int = Field(default=5, ge=0)
    """Rotated request logs kept (requests.jsonl.1 .. .N)."""
    requests_queue_lines: int = Field(default=10_000, ge=1)
    """Lines waiting for the writer at most; more are dropped (and counted), never waited for."""


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
            variable = _env_variable_of_key(field_name) or f"the variable for {field_name}"
            raise ConfigError(
                f"invalid configuration: {variable}: expected JSON, got {value!r}"
            ) from None


def _env_variable(*path: str) -> str | None:
    """The PURGATORY_PROXY_* variable set for ``path`` (section, key), case-insensitively."""
    wanted = (ENV_PREFIX + "__".join(path)).upper()
    return next((name for name in os.environ if name.upper() == wanted), None)


def _env_variable_of_key(key: str) -> str | None:
    """The PURGATORY_PROXY_*__KEY variable set for a key of any section."""
    suffix = "__" + key.upper()
    names = [name.upper() for name in os.environ]
    return next((n for n in names if n.startswith(ENV_PREFIX) and n.endswith(suffix)), None)


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
    overrides: Mapping[str, Any],
    flag_names: Mapping[str, str],
    path: Path | None,
) -> str:
    """Where the offending value came from, in the precedence order the loader applies."""
    parts = [str(part) for part in loc]
    if len(parts) == 1 and parts[0] in _SECTION_RULE_KEY:  # blame the key the rule is about
        parts.append(_SECTION_RULE_KEY[parts[0]])
    dotted = ".".join(parts[:2])
    if len(parts) >= 2 and parts[1] in overrides.get(parts[0], {}):
        return f" (from {flag_names.get(dotted, 'the command line')})"
    variable = _env_variable(*parts[:2]) if parts else None
    if variable is not None:
        return f" (from environment variable {variable})"
    return f" (in {path})" if path is not None else ""


#: Sections whose cross-key rule is reported against one key: the one users set to break it.
_SECTION_RULE_KEY = {"memory": "limit"}


def _describe(
    error: ValidationError,
    overrides: Mapping[str, Any],
    flag_names: Mapping[str, str],
    path: Path | None,
) -> str:
    problems = []
    for item in error.errors():
        message = item["msg"].removeprefix("Value error, ")
        problem = _problem(tuple(item["loc"]), message, item["type"])
        problems.append(problem + _source(tuple(item["loc"]), overrides, flag_names, path))
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
