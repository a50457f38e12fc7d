# Strategy: one pydantic model tree is the single source of truth for every setting. Values
# come, in rising precedence, from the defaults below, a TOML file, PURGATORY_PROXY_* env vars
# (section and key joined by "__") and CLI flags. Every model forbids unknown keys, so a typo is
# an error that names the key instead of a silently ignored setting. config.example.toml
# mirrors these defaults and a test keeps the two in step.
"""The proxy's configuration: defaults, TOML file, environment and CLI overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

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
from pydantic_settings import (
    BaseSettings,
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
    """A setting is unknown or invalid; the message names every offending key."""


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
                "memory.limit must be -1 or at least memory.socket_request_max_bytes "
                f"({int(self.socket_request_max_bytes)} bytes)"
            )
        return self


class ConnectionsSection(_Section):
    """Client connection lifetimes."""

    idle_timeout_ms: int = Field(default=600_000, ge=1)
    """Close a client connection idle this long (Kafka: connections.max.idle.ms)."""
    frame_timeout_ms: int = Field(default=30_000, ge=1)
    """Close a client that starts a frame and does not finish it within this time."""
    shutdown_drain_ms: int = Field(default=5_000, ge=0)
    """On SIGTERM/SIGINT, how long in-flight requests may take to finish."""


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
        return (init_settings, env_settings, toml)


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"{key}: {item['msg']}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Build the configuration from ``path`` (TOML), the environment and ``overrides``.

    Args:
        path: a TOML file, or None for defaults and environment only.
        overrides: nested ``{section: {key: value}}`` from CLI flags; they win over everything.

    Raises:
        ConfigError: naming each unknown or invalid key.
    """
    if path is not None and not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    settings_cls = type(
        "FileConfig",
        (Config,),
        {"model_config": SettingsConfigDict(**{**Config.model_config, "toml_file": path})},
    )
    try:
        loaded: Config = settings_cls(**(overrides or {}))
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None
    except ValueError as error:  # malformed TOML
        raise ConfigError(f"cannot read {path}: {error}") from None
    return Config.model_validate(loaded.model_dump())
