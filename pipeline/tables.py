# Strategy: each table of the report is one pure function DataFrame -> DataFrame over the
# request log (schema: docs/request-log.md), so each can be read, tested and reused alone.
# Percentiles use Spark's percentile_approx (a Greenwald-Khanna sketch) with one accuracy for
# all tables: its rank error is at most rows/ACCURACY, so for logs under ACCURACY rows it is
# exact up to one rank. Time windows are fixed-width buckets of the arrival time ``ts``
# (``floor(ts / window_s) * window_s``, epoch seconds), which keeps them plain numbers.
#
# The logs are read once (``prepare``): with the explicit schema below, so Spark never runs an
# inference pass over the files, and with only the columns some table uses, so the cached copy
# every table is computed from is as small as it can be. A line that is not a JSON object of
# that schema (a torn last line after a crash, a stray edit) is kept in the cache as one
# ``malformed`` row, counted in the report and left out of every table.
"""The report's tables, each a function of the request-log DataFrame."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pipeline.waits import (
    BOOTSTRAP,
    EXPIRED,
    FETCH,
    FETCH_ERROR,
    FORWARDED,
    NOT_HELD,
    PROTOCOL_WAITS,
    WOKEN,
)

__all__ = [
    "ACCURACY",
    "API_VERSIONS",
    "FAIRNESS_MIN_CONNECTIONS",
    "HELD_BUCKET_MS",
    "LOG_SCHEMA",
    "MALFORMED",
    "NO_CLIENT",
    "connection_clients",
    "errors_by_code",
    "fairness",
    "fetch_answer",
    "fetch_answers",
    "held_histogram",
    "memory_pressure",
    "per_api",
    "per_broker",
    "per_client",
    "prepare",
    "purgatory_outcomes",
    "read_logs",
    "shared_connection_ids",
    "throughput",
    "top_talkers",
    "well_formed",
    "with_connection_clients",
    "with_window",
]

#: percentile_approx accuracy: relative rank error 1/ACCURACY (a p99 lies between the true p98.9
#: and p99.1). 10,000 cost twice the sketch time per row for no difference an operator can use.
ACCURACY = 1_000
PERCENTILES = (0.5, 0.95, 0.99)
#: Width of the held-time histogram's buckets.
HELD_BUCKET_MS = 50
#: Fewest connections in a window for Jain's index to mean anything.
FAIRNESS_MIN_CONNECTIONS = 2
NO_CLIENT = "(none)"
API_VERSIONS = "ApiVersions"

LOG_SCHEMA = StructType(
    [
        StructField("ts", DoubleType()),
        StructField("api", StringType()),
        StructField("api_version", IntegerType()),
        StructField("client_id", StringType()),
        StructField("conn", LongType()),
        StructField("broker", StringType()),
        StructField("latency_ms", DoubleType()),
        StructField("upstream_ms", DoubleType()),
        StructField("held_ms", DoubleType()),
        StructField("muted_ms", DoubleType()),
        StructField("request_bytes", LongType()),
        StructField("response_bytes", LongType()),
        StructField("outcome", StringType()),
        StructField("error_code", IntegerType()),
    ]
)
#: Spark puts a line that does not parse against LOG_SCHEMA into this column (PERMISSIVE mode).
CORRUPT = "_corrupt_record"
#: The prepared log's flag for lines no table uses (unparseable, or without ``ts`` or ``api``).
MALFORMED = "malformed"
_READ_SCHEMA = StructType([*LOG_SCHEMA.fields, StructField(CORRUPT, StringType())])
#: What the tables use; ``api_version`` and the raw line are not kept in the cache.
_KEPT = ("ts", "api", "conn", "broker", "latency_ms", "upstream_ms", "held_ms", "muted_ms",
         "request_bytes", "response_bytes", "outcome", "error_code")  # fmt: skip


def _percentiles(column: str, prefix: str) -> list[Column]:
    sketch = F.percentile_approx(column, list(PERCENTILES), ACCURACY)
    return [sketch[i].alias(f"{prefix}_p{round(p * 100)}_ms") for i, p in enumerate(PERCENTILES)]


def _request_stats(latency: str = "latency_ms", upstream: str = "upstream_ms") -> list[Column]:
    """Count, percentiles of the columns ``latency`` and ``upstream`` (named after them), bytes
    and errors of a group of requests."""
    latency_prefix = latency.removesuffix("_ms")
    return [
        F.count(F.lit(1)).alias("requests"),
        *_percentiles(latency, latency_prefix),
        F.max(latency).alias(f"{latency_prefix}_max_ms"),
        *_percentiles(upstream, upstream.removesuffix("_ms")),
        F.sum("request_bytes").alias("request_bytes"),
        F.sum("response_bytes").alias("response_bytes"),
        F.sum(F.when(F.col("outcome") == "error", 1).otherwise(0)).alias("errors"),
    ]


def read_logs(session: SparkSession, logs: str) -> DataFrame:
    """The raw lines of the logs at ``logs`` (path, glob or URI) parsed against LOG_SCHEMA."""
    return (
        session.read.schema(_READ_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(logs)
    )


def prepare(raw: DataFrame, window_s: int) -> DataFrame:
    """The columns the tables need, with ``window_start``, ``client`` and ``malformed``."""
    malformed = F.col(CORRUPT).isNotNull() | F.col("ts").isNull() | F.col("api").isNull()
    return with_window(raw.select(*_KEPT, "client_id", malformed.alias(MALFORMED)), window_s).drop(
        "client_id"
    )


def well_formed(prepared: DataFrame) -> DataFrame:
    """The rows of :func:`prepare` that every table is computed from."""
    return prepared.where(~F.col(MALFORMED)).drop(MALFORMED)


def with_window(log: DataFrame, window_s: int) -> DataFrame:
    """``log`` plus ``window_start`` (epoch seconds) and a non-null ``client``."""
    return log.withColumn(
        "window_start", (F.floor(F.col("ts") / window_s) * window_s).cast(LongType())
    ).withColumn("client", F.coalesce(F.col("client_id"), F.lit(NO_CLIENT)))


def connection_clients(log: DataFrame) -> DataFrame:
    """Per connection (``conn``) that has one: the client id of its latest request that
    carries one (``conn_client``)."""
    return (
        log.where(F.col("client") != NO_CLIENT)
        .groupBy("conn")
        .agg(F.max_by("client", "ts").alias("conn_client"))
    )


def with_connection_clients(log: DataFrame, clients: DataFrame) -> DataFrame:
    """``log`` with requests that have no client id named by their connection's
    (:func:`connection_clients`). The proxy answers each connection's ApiVersions itself,
    before it reads the header's client id, so those lines have none: counted as a client
    "(none)" they were a top talker that no client is."""
    named = F.when(F.col("client") == NO_CLIENT, F.coalesce("conn_client", F.lit(NO_CLIENT)))
    return (
        log.join(clients, "conn", "left")
        .withColumn("client", named.otherwise(F.col("client")))
        .drop("conn_client")
    )


def shared_connection_ids(log: DataFrame) -> int:
    """How many ``conn`` values carry more than one successful ApiVersions: a client sends
    it once, first, on each connection, so such an id stands for several connections, which
    happens when logs of more than one proxy process (each counting from 1) are read as one."""
    handshakes = log.where((F.col("api") == API_VERSIONS) & (F.col("error_code") == 0))
    return handshakes.groupBy("conn").count().where(F.col("count") > 1).count()


def per_api(log: DataFrame) -> DataFrame:
    """Per API: requests, latency and upstream p50/p95/p99, bytes, errors."""
    return log.groupBy("api").agg(*_request_stats()).orderBy("api")


def per_broker(log: DataFrame) -> DataFrame:
    """Per ``broker`` field (upstream node id, ``bootstrap``, ``local``): as :func:`per_api`,
    but latency and upstream percentiles over ``service_requests`` only, the requests whose
    API does not wait by protocol (pipeline/waits.py): a broker's p99 is then not the
    consumers' max_wait_ms."""
    service = ~F.col("api").isin(list(PROTOCOL_WAITS))
    return (
        log.withColumn("service_latency_ms", F.when(service, F.col("latency_ms")))
        .withColumn("service_upstream_ms", F.when(service, F.col("upstream_ms")))
        .groupBy("broker")
        .agg(
            *_request_stats("service_latency_ms", "service_upstream_ms"),
            F.sum(F.when(service, 1).otherwise(0)).alias("service_requests"),
        )
        .orderBy("broker")
    )


def errors_by_code(log: DataFrame) -> DataFrame:
    """Per (top-level error code, API): requests answered with that non-zero code.

    Only top-level codes the proxy could read are in the log (docs/request-log.md): per-partition
    errors of Produce, Metadata and the like are not.
    """
    return (
        log.where(F.col("error_code").isNotNull() & (F.col("error_code") != 0))
        .groupBy("error_code", "api")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy(F.desc("requests"), "error_code", "api")
    )


def per_client(log: DataFrame) -> DataFrame:
    """Per (client, API): the same figures as :func:`per_api`."""
    return log.groupBy("client", "api").agg(*_request_stats()).orderBy("client", "api")


def throughput(log: DataFrame, window_s: int, first_ts: float, last_ts: float) -> DataFrame:
    """Per window and API: requests, bytes, and their rates over the window's covered time.

    ``covered_s`` is the part of the window inside the log's time range [first_ts, last_ts]:
    ``window_s`` except for the first and last windows, which the log usually covers only in
    part. Rates divide by it (by at least one second: a rate over a sliver of a second is
    noise), so a log that ends two seconds into a window does not show a drop to a fifth.
    """
    start = F.col("window_start")
    covered = F.least(start + window_s, F.lit(last_ts)) - F.greatest(start, F.lit(first_ts))
    return (
        log.groupBy("window_start", "api")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum(F.col("request_bytes") + F.col("response_bytes")).alias("bytes"),
        )
        .withColumn("covered_s", covered.cast(DoubleType()))
        .withColumn("requests_per_s", _rate("requests"))
        .withColumn("bytes_per_s", _rate("bytes"))
        .orderBy("window_start", "api")
    )


def _rate(column: str) -> Column:
    return F.col(column) / F.greatest(F.col("covered_s"), F.lit(1.0))


def purgatory_outcomes(log: DataFrame) -> DataFrame:
    """Per API and outcome (proxy/observability/outcomes.py): requests, how many were held,
    held-time percentiles."""
    held = F.col("held_ms") > 0
    return (
        log.groupBy("api", "outcome")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum(F.when(held, 1).otherwise(0)).alias("held"),
            *_percentiles("held_ms", "held"),
            F.max("held_ms").alias("held_max_ms"),
        )
        .orderBy("api", "outcome")
    )


def fetch_answer() -> Column:
    """How a Fetch was answered (pipeline/waits.py's kinds), from its outcome and held time."""
    outcome = F.col("outcome")
    return (
        F.when(outcome == "error", F.lit(FETCH_ERROR))
        .when(outcome == "expired", F.lit(EXPIRED))
        .when(F.col("held_ms") > 0, F.lit(WOKEN))
        .when(F.col("broker") == BOOTSTRAP, F.lit(FORWARDED))
        .otherwise(F.lit(NOT_HELD))
    )


def fetch_answers(log: DataFrame) -> DataFrame:
    """Per kind of Fetch answer (not held, woken by data, expired, forwarded, error): requests,
    latency and held-time percentiles, so the purgatory's work is seen beside what it did not
    hold."""
    return (
        log.where(F.col("api") == FETCH)
        .withColumn("answer", fetch_answer())
        .groupBy("answer")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            *_percentiles("latency_ms", "latency"),
            *_percentiles("held_ms", "held"),
            F.max("held_ms").alias("held_max_ms"),
        )
        .orderBy("answer")
    )


def held_histogram(log: DataFrame, bucket_ms: int = HELD_BUCKET_MS) -> DataFrame:
    """Held requests by API, kind of answer and held time in ``bucket_ms`` buckets (empty if
    none was held)."""
    return (
        log.where(F.col("held_ms") > 0)
        .withColumn("answer", fetch_answer())
        .withColumn("bucket_ms", (F.floor(F.col("held_ms") / bucket_ms) * bucket_ms).cast("long"))
        .groupBy("api", "answer", "bucket_ms")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy("api", "answer", "bucket_ms")
    )


def memory_pressure(log: DataFrame, window_s: int) -> DataFrame:
    """Per window: total muted time, requests, requests muted and their share."""
    muted = F.col("muted_ms") > 0
    return (
        log.groupBy("window_start")
        .agg(
            F.sum("muted_ms").alias("muted_ms"),
            F.count(F.lit(1)).alias("requests"),
            F.sum(F.when(muted, 1).otherwise(0)).alias("muted_requests"),
        )
        .withColumn("muted_share", F.col("muted_requests") / F.col("requests"))
        .orderBy("window_start")
    )


def fairness(log: DataFrame, window_s: int) -> DataFrame:
    """Per window: Jain's fairness index over the bytes (in + out) of each client connection,
    and the connection that moved the most (of equals, the lowest id).

    J = (sum x)^2 / (n * sum x^2): 1 when every connection moved the same bytes, 1/n when one
    moved everything. A connection is in a window when a request of it arrived there. With
    fewer than ``FAIRNESS_MIN_CONNECTIONS`` connections J says nothing (one is always "fair"):
    ``jain_index`` is null. Connections are told apart by ``conn`` (per proxy process), and
    named by the client id of their last request in the window.
    """
    per_connection = log.groupBy("window_start", "conn").agg(
        F.sum(F.col("request_bytes") + F.col("response_bytes")).cast(DoubleType()).alias("bytes"),
        F.max_by("client", "ts").alias("client"),
    )
    connections, moved = F.col("connections"), F.col("bytes")
    return (
        per_connection.groupBy("window_start")
        .agg(
            F.count(F.lit(1)).alias("connections"),
            F.sum("bytes").alias("bytes"),
            F.sum(F.col("bytes") * F.col("bytes")).alias("bytes_squared"),
            # The top connection; of equals, the lowest id (a tie must not pick at random).
            F.max_by(
                F.struct("conn", "client", "bytes"), F.struct(F.col("bytes"), -F.col("conn"))
            ).alias("top"),
        )
        .withColumn(
            "jain_index",
            F.when(
                (connections >= FAIRNESS_MIN_CONNECTIONS) & (F.col("bytes_squared") > 0),
                moved * moved / (connections * F.col("bytes_squared")),
            ),
        )
        .select(
            "window_start",
            "connections",
            "bytes",
            "jain_index",
            F.col("top.conn").alias("top_conn"),
            F.col("top.client").alias("top_client"),
            (F.col("top.bytes") / moved).alias("top_share"),
        )
        .orderBy("window_start")
    )


def top_talkers(log: DataFrame, limit: int = 10) -> DataFrame:
    """The ``limit`` clients that moved the most bytes, with their request and connection
    counts (one client id is often many connections: every librdkafka client is "rdkafka")."""
    return (
        log.groupBy("client")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.count_distinct("conn").alias("connections"),
            F.sum("request_bytes").alias("request_bytes"),
            F.sum("response_bytes").alias("response_bytes"),
        )
        .withColumn("bytes", F.col("request_bytes") + F.col("response_bytes"))
        .orderBy(F.desc("bytes"), "client")
        .limit(limit)
    )
