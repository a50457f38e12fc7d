# Strategy: one pydantic model tree is the single source of truth for every setting. Values
# come, in rising precedence, from the defaults below, a TOML file, PURGATORY_PROXY_* env vars
# (section and key joined by "__") and CLI flags. Every model forbids unknown keys, so a typo is
# an error that names the key instead of a silently ignored setting. config.example.toml
# mirrors these defaults and a test keeps the two in step.
#
# Errors name the key, where its value came from and what was expected, never the value
# itself: any setting may hold a secret (a password, or a whole section as JSON in one
# variable), and error text ends up in terminals, CI logs and crash reports. Our validators
# say what they expected; _describe hides any given text that a message still repeats; and
# tests/unit/proxy/test_config_no_echo.py tries every key with bad values to keep it so.
"""The proxy's configuration: defaults, TOML file, environment and CLI overrides."""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
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

from proxy.address import normalize_ip
from proxy.primitives.purgatory import DEFAULT_PURGE_INTERVAL, DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE
from proxy.security.security_config import (
    ClientAuth,
    ClientTlsSection,
    UpstreamSaslSection,
    UpstreamTlsSection,
)

__all__ = ["UNLIMITED", "Config", "ConfigError", "load_config", "parse_host_port"]

ENV_PREFIX = "PURGATORY_PROXY_"
#: Kafka's default for every connection quota: no limit.
UNLIMITED = 2**31 - 1


class ConfigError(Exception):
    """A setting is unknown or invalid; the one-line message names every offending key."""


#: What a HOST:PORT setting must look like (its examples are ours, never the value given).
_HOST_PORT_EXPECTED = "expected HOST:PORT, e.g. 127.0.0.1:9092 or [::1]:9092"


def parse_host_port(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6) and check the port's range."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(_HOST_PORT_EXPECTED)
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 0-65535")
    return host.strip("[]"), port


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is a wildcard bind address (0.0.0.0, ::), which no client can dial."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _host_port(value: str) -> str:
    parse_host_port(value)
    return value


def _optional_host_port(value: str) -> str:
    return _host_port(value) if value else value


def _ip_address(value: str) -> str:
    try:
        return normalize_ip(value)
    except ValueError:
        raise ValueError(f"expected an IP address, got {value!r}") from None


HostPort = Annotated[str, AfterValidator(_host_port)]
IpAddress = Annotated[str, AfterValidator(_ip_address)]
OptionalHostPort = Annotated[str, AfterValidator(_optional_host_port)]
Port = Annotated[int, Field(ge=1, le=65535)]

_BYTE_SIZE = TypeAdapter(ByteSize)
#: A whole size: a number, then at most a unit (pydantic's own pattern stops at the unit and
#: ignores what follows, so "256MB!" was 256 MB).
_SIZE_TEXT = re.compile(r"\s*(\d*\.?\d+)\s*([a-z]*)\s*", re.IGNORECASE)
_SIZE_EXPECTED = "expected a size in bytes such as 1048576, 64MiB or 100MB"
#: The validators' fixed texts: constants, so they hold no value given and stay whole.
_EXPECTED_TEXTS = (_HOST_PORT_EXPECTED, _SIZE_EXPECTED)


def _byte_size(value: object) -> int:
    """A size in bytes from an int or a text like ``64MiB``; the whole text must be a size."""
    if isinstance(value, str):
        match = _SIZE_TEXT.fullmatch(value)
        if match is None:
            raise ValueError(_SIZE_EXPECTED)
        if match[2] and match[2].lower() not in ByteSize.byte_sizes:
            units = "B, KB, MB, GB, KiB, MiB, GiB, ..."
            raise ValueError(f"{_SIZE_EXPECTED}: the unit is not one of {units}")
        value = match[1] + match[2]
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(_SIZE_EXPECTED)
    size = int(_BYTE_SIZE.validate_python(value))
    if size < 0:
        raise ValueError(f"{_SIZE_EXPECTED}, not a negative one")
    return size


def _pool_limit(value: object) -> int:
    # Kafka's -1 ("disabled") arrives as an int from TOML but as a string from the environment.
    if value in (-1, "-1"):
        return -1
    return _byte_size(value)


Bytes = Annotated[ByteSize, BeforeValidator(_byte_size)]
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

    @model_validator(mode="after")
    def _advertised_host_dialable(self) -> ProxySection:
        # Kafka refuses the same: "advertised.listeners cannot use the nonroutable
        # meta-address 0.0.0.0", also when it would be copied from listeners.
        if is_wildcard(self.advertised_host):
            raise ValueError(
                "proxy.advertised_host is a wildcard address, which no client can connect to: "
                "set --advertised-host (proxy.advertised_host) to the name or address clients "
                "reach this proxy at"
            )
        listen_host = parse_host_port(self.listen)[0]
        if not self.advertised_host and is_wildcard(listen_host):
            raise ValueError(
                f"proxy.listen binds the wildcard address {listen_host}, and without "
                "--advertised-host (proxy.advertised_host) clients would be told to connect to "
                f"{listen_host}: set --advertised-host to the name or address clients reach "
                "this proxy at (Kafka refuses the same: advertised.listeners cannot use the "
                "nonroutable meta-address 0.0.0.0)"
            )
        return self


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
    socket_request_max_bytes: Bytes = ByteSize(100 * 1024 * 1024)
    """Largest request frame accepted from a client (Kafka: socket.request.max.bytes)."""
    unauthenticated_request_max_bytes: ByteSize = ByteSize(512 * 1024)
    """With client_auth = "passthrough", largest request frame accepted before the cluster has
    accepted the client (Kafka: sasl.server.max.receive.size); larger ones close it."""
    tight_fraction: float = Field(default=0.10, gt=0.0, lt=1.0)
    """Below this share of the pool, waiting connections are served in random order."""

    @model_validator(mode="after")
    def _limit_holds_one_request(self) -> MemorySection:
        # KIP-72 "Configuration Validation": the pool must fit the largest single request.
        if self.limit == -1 or self.limit >= self.socket_request_max_bytes:
            return self
        limit, largest = _bytes(self.limit), _bytes(self.socket_request_max_bytes)
        problem = (
            f"memory.limit ({limit}) is below memory.socket_request_max_bytes ({largest}), the "
            "largest request the pool must hold (Kafka's rule: queued.max.request.bytes >= "
            "socket.request.max.bytes): "
        )
        if self.limit >= CLIENT_MAX_REQUEST_BYTES:
            advice = (
                f"raise the limit (e.g. --memory-limit {largest}) or lower the largest request "
                f"(e.g. --max-request-size {limit}: memory.socket_request_max_bytes)"
            )
        else:  # the largest request must not go below what real clients send
            advice = (
                f"raise the limit, e.g. --memory-limit {largest} (a largest request below "
                f"{_bytes(CLIENT_MAX_REQUEST_BYTES)}, Kafka producers' default "
                "max.request.size, would refuse their ordinary requests)"
            )
        raise ValueError(problem + advice)


#: The largest request Kafka clients send by default (the producer's max.request.size, 1 MiB):
#: a pool or frame limit below it refuses ordinary produce requests.
CLIENT_MAX_REQUEST_BYTES = 1 << 20


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
    send_timeout_ms: int = Field(default=30_000, ge=1)
    """Close a client that does not take an answer within this time once writing it has to
    wait, releasing the memory the answer holds (Kafka clients' own request.timeout.ms)."""
    authentication_timeout_ms: int = Field(default=30_000, ge=1)
    """With client_auth = "passthrough", close a client the cluster has not accepted this long
    after it connected, and its upstream connection with it (Kafka's Java client allows
    socket.connection.setup.timeout.max.ms, 30 s, for connecting and authenticating)."""
    shutdown_drain_ms: int = Field(default=5_000, ge=0)
    """On SIGTERM/SIGINT, how long in-flight requests may take to finish."""
    upstream_idle_timeout_ms: int = Field(default=30_000, ge=0)
    """Close a client's own upstream connection when nothing went on it this long and nothing
    is owed on it (re-opened on the next request that needs it); 0 = keep it open. Its held
    fetches go on the proxy's shared channels, so an idle consumer costs one descriptor.
    Never closed with client_auth = "passthrough" (it carries the client's authentication), nor
    once it carried a ShareFetch or ShareAcknowledge (the broker ends a KIP-932 share session
    with the connection that opened it)."""
    upstream_answer_grace_ms: int = Field(default=5_000, ge=1)
    """A broker answers a produce by its timeout_ms (REQUEST_TIMED_OUT at the latest) and the
    proxy's own fetches for a held fetch (min_bytes 0) within their max wait. One silent this long
    past that (after the proxy answered a produce REQUEST_TIMED_OUT itself, or past a fetch's max
    wait) is taken as hung: the client's connection is closed, so the client looks for the
    partition's leader again (as its own request timeout would have made it do)."""
    # Connection quotas (issue 29; Kafka's KIP-402 and KIP-612, with Kafka's defaults: no
    # limit). An excess connection is closed as it is accepted (proxy/connection/admission.py).
    max_connections: int = Field(default=UNLIMITED, ge=0)
    """Client connections open at once, all listeners (Kafka: max.connections); lowered at
    start to what the descriptor limit allows (proxy/primitives/descriptors.py)."""
    max_connections_per_ip: int = Field(default=UNLIMITED, ge=0)
    """Client connections open at once from one IP address (Kafka: max.connections.per.ip);
    0 admits only the addresses of max_connections_per_ip_overrides."""
    max_connections_per_ip_overrides: dict[IpAddress, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict
    )
    """IP address -> its own cap instead of max_connections_per_ip (Kafka:
    max.connections.per.ip.overrides)."""
    max_connection_creation_rate: int = Field(default=UNLIMITED, ge=1)
    """New client connections accepted per second, all addresses (Kafka:
    max.connection.creation.rate)."""
    max_connection_creation_rate_per_ip: int = Field(default=UNLIMITED, ge=1)
    """New client connections accepted per second from one IP address (Kafka: the
    connection_creation_rate quota of an IP, KIP-612)."""
    reserved_descriptors: int = Field(default=64, ge=16)
    """Descriptors kept from client connections for the proxy itself (the HTTP endpoint's
    probes above all): the client connection cap is (RLIMIT_NOFILE - this - 6 per broker) / 2."""

    @model_validator(mode="after")
    def _zero_per_ip_needs_overrides(self) -> ConnectionsSection:
        # Kafka's rule: max.connections.per.ip may be 0 only if overrides admit someone.
        if self.max_connections_per_ip == 0 and not self.max_connections_per_ip_overrides:
            raise ValueError(
                "connections.max_connections_per_ip is 0 with no "
                "connections.max_connections_per_ip_overrides: no client could connect"
            )
        return self


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
    response_max_bytes: Bytes = ByteSize(4 * 1024 * 1024)
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
    requests_max_bytes: Bytes = ByteSize(100 * 1024 * 1024)
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
            raise ConfigError(f"invalid configuration: {variable}: expected JSON") from None


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
        variable = _env_variable(*parts[:depth])
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
    own = {f"\0{n}\0": text for n, text in enumerate(_EXPECTED_TEXTS) if text in message}
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
