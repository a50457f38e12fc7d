# Strategy: one frozen pydantic model per TOML table, every model forbidding unknown keys, so a
# typo is an error that names the key instead of a silently ignored setting. Each default is
# the documented one (config.example.toml mirrors them and a test keeps the two in step), and
# each limit names the Kafka setting it follows. A rule that spans keys of one section is that
# section's validator, and its message opens with the key it is about.
"""The sections of the configuration: one model per TOML table, with defaults."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ByteSize, ConfigDict, Field, model_validator

from proxy.config._values import (
    CLIENT_MAX_REQUEST_BYTES,
    UNLIMITED,
    Bytes,
    HostPort,
    IpAddress,
    OptionalHostPort,
    PoolLimit,
    Port,
    format_bytes,
    is_wildcard,
    parse_host_port,
)
from proxy.primitives.purgatory import DEFAULT_PURGE_INTERVAL, DEFAULT_TICK_MS, DEFAULT_WHEEL_SIZE
from proxy.security.security_config import (
    ClientAuth,
    ClientTlsSection,
    UpstreamSaslSection,
    UpstreamTlsSection,
)
from proxy.security.server_names import NODE_ID

__all__ = [
    "ConnectionsSection",
    "FetchSection",
    "LogSection",
    "MemorySection",
    "MetricsSection",
    "ProxySection",
    "PurgatorySection",
    "SniSection",
    "UpstreamSection",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SniSection(_Section):
    """SNI mode: one TLS port for the whole cluster, a host name per broker."""

    bootstrap_host: str = ""
    """The name clients bootstrap with; empty = SNI mode off (a port per broker)."""
    broker_host: str = ""
    """The brokers' names, with ``{node_id}`` where the node id goes."""
    advertised_port: int = Field(default=0, ge=0, le=65535)
    """The port clients are told for every broker; 0 = the listen port."""

    @property
    def enabled(self) -> bool:
        return bool(self.bootstrap_host)

    @model_validator(mode="after")
    def _complete(self) -> SniSection:
        if bool(self.bootstrap_host) != bool(self.broker_host):
            raise ValueError("bootstrap_host and broker_host are set together or not at all")
        if self.broker_host and self.broker_host.count(NODE_ID) != 1:
            raise ValueError(
                f"broker_host needs {NODE_ID} exactly once, where the node id goes "
                f"(e.g. broker-{NODE_ID}.kafka.example.com): {self.broker_host!r}"
            )
        return self


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
    sni: SniSection = Field(default_factory=SniSection)

    @model_validator(mode="after")
    def _one_port_needs_tls_and_no_broker_ports(self) -> ProxySection:
        if not self.sni.enabled:
            return self
        if not self.tls.enabled:
            raise ValueError(
                "proxy.sni routes by the server name of the TLS hello: it needs [proxy.tls] "
                "cert_file and key_file"
            )
        if self.first_broker_port or self.broker_ports:
            raise ValueError(
                "proxy.sni serves every broker on the listen port: leave first_broker_port "
                "and [proxy.broker_ports] unset"
            )
        return self

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
        limit, largest = format_bytes(self.limit), format_bytes(self.socket_request_max_bytes)
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
                f"{format_bytes(CLIENT_MAX_REQUEST_BYTES)}, Kafka producers' default "
                "max.request.size, would refuse their ordinary requests)"
            )
        raise ValueError(problem + advice)


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
    # Connection quotas (Kafka's KIP-402 and KIP-612, with Kafka's defaults: no
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
    probes above all): the client connection cap is (RLIMIT_NOFILE - this - 7 per broker) / 2."""

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
    """The timing wheel that holds delayed operations (Kafka's SystemTimer defaults)."""

    tick_ms: int = Field(default=DEFAULT_TICK_MS, ge=1)
    wheel_size: int = Field(default=DEFAULT_WHEEL_SIZE, ge=2)
    purge_interval: int = Field(default=DEFAULT_PURGE_INTERVAL, ge=1)
    """Purge watcher lists when estimated watched - pending exceeds this (Kafka's default)."""


class FetchSection(_Section):
    """Fetch sessions and long-polls terminated in the proxy."""

    hold: bool = True
    """Hold long-poll fetches and produces in the proxy's purgatory; false forwards them."""
    watcher_max_wait_ms: int = Field(default=500, ge=1)
    """How long each broker's watcher long-poll waits upstream for new data, at least (the
    longest max wait of the fetches it covers when that is longer)."""
    busy_window_ms: int = Field(default=300, ge=0)
    """A fetch on partitions whose readable end moved twice within this long, and that no
    other fetch waits on, goes upstream as the client's own long-poll; 0: always hold."""
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
