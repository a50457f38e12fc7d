# Strategy: one frozen Config is what a run measures (its sizes, the proxy's settings, the
# consumers' max wait, the broker), and Run is what it found; the runner fills a Run and the
# report reads it, so each can be read without the other. The proxy's settings for N consumers
# live here too: bench/peers/families.py sizes the proxy the same way for its fan-in family.
"""What a fan-in run measures (Config), what it found (Run), and the proxy's settings for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.fanin.consumer import DEFAULT_MAX_WAIT_MS
from bench.fanin.measure import Measurement
from bench.fanin.stack import DescriptorLimits

__all__ = [
    "BENCH_UPSTREAM_IDLE_MS",
    "FULL",
    "QUICK",
    "QUIET_MARGIN_S",
    "ROUTES",
    "Config",
    "Run",
    "proxy_env",
    "proxy_settings",
    "quiet_s",
    "upstream_idle_s",
]

ROUTES = ("direct", "proxy")
_UPSTREAM_IDLE_KEY = "PURGATORY_PROXY_CONNECTIONS__UPSTREAM_IDLE_TIMEOUT_MS"
#: The proxy's connections.upstream_idle_timeout_ms in the benchmark unless --proxy-env says.
BENCH_UPSTREAM_IDLE_MS = 2_000
#: Past the proxy's upstream idle timeout, before the window: its closing is not instant.
QUIET_MARGIN_S = 3.0


@dataclass(frozen=True)
class Config:
    """What one run measures."""

    ns: tuple[int, ...]
    seconds: float
    probes: int
    settle_s: float
    proxy_env: tuple[tuple[str, str], ...] = ()
    routes: tuple[str, ...] = ROUTES
    #: The consumers' fetch.max.wait.ms: each idle consumer polls 1000 / max_wait_ms times a
    #: second, so N consumers ask the proxy for N * 1000 / max_wait_ms answers per second.
    max_wait_ms: int = DEFAULT_MAX_WAIT_MS
    #: The broker behind the relays (a key of bench.fanin.stack.BROKERS).
    broker: str = "kafka"

    @property
    def section(self) -> str:
        """The docs/benchmarks.md section this run writes (one per max wait and broker)."""
        name = (
            "fanin" if self.max_wait_ms == DEFAULT_MAX_WAIT_MS else f"fanin-wait-{self.max_wait_ms}"
        )
        return name if self.broker == "kafka" else f"{name}-{self.broker}"


FULL = Config(ns=(100, 1_000, 10_000), seconds=60.0, probes=5, settle_s=2.0)
QUICK = Config(ns=(100, 1_000), seconds=5.0, probes=2, settle_s=1.0)


@dataclass
class Run:
    """Every measurement of a run, and what limited it."""

    config: Config
    limits: DescriptorLimits
    measurements: list[Measurement] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: os.getloadavg() when the run started and ended (the machine is shared).
    load: list[tuple[float, float, float]] = field(default_factory=list)

    def get(self, route: str, n: int) -> Measurement | None:
        for m in self.measurements:
            if m.route == route and m.n == n:
                return m
        return None


def proxy_settings(n: int, upstream_idle_ms: int = BENCH_UPSTREAM_IDLE_MS) -> dict[str, str]:
    """The proxy's settings (PURGATORY_PROXY_*) for ``n`` idle consumers."""
    # Kafka's default session cache (1,000 slots) would leave consumers beyond the first
    # thousand without a session (sessionless full fetches, still held). An operator sizing a
    # proxy for N consumers sizes the cache too, so the benchmark does.
    # A consumer's warm-up ApiVersions is forwarded on its connection's own upstream
    # connection, which stays open connections.upstream_idle_timeout_ms unused: with the
    # default 30 s, N consumers connecting within 30 s cost the proxy 2N descriptors (and
    # the relays 2N more), past a 20,000 hard limit at N = 10,000. The benchmark shortens it.
    return {
        "PURGATORY_PROXY_FETCH__SESSION_CACHE_SIZE": str(max(1000, n)),
        _UPSTREAM_IDLE_KEY: str(upstream_idle_ms),
    }


def proxy_env(config: Config, n: int) -> dict[str, str]:
    # --proxy-env overrides any of the benchmark's settings, the default included.
    return proxy_settings(n) | dict(config.proxy_env)


def upstream_idle_s(config: Config) -> float:
    """The proxy's connections.upstream_idle_timeout_ms in this run, in seconds (0: never)."""
    value = dict(config.proxy_env).get(_UPSTREAM_IDLE_KEY)
    return (BENCH_UPSTREAM_IDLE_MS if value is None else int(value)) / 1000


def quiet_s(config: Config, route: str) -> float:
    """The proxy route's least settle: its warm-up's upstream connections have closed."""
    idle_s = upstream_idle_s(config)
    return idle_s + QUIET_MARGIN_S if route == "proxy" and idle_s > 0 else 0.0
