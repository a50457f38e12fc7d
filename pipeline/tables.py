# Strategy: each table of the report is one pure function DataFrame -> DataFrame over the
# request log (schema: docs/request-log.md), so each can be read, tested and reused alone.
# Percentiles use Spark's percentile_approx (a Greenwald-Khanna sketch) with one accuracy for
# all tables: its rank error is at most rows/ACCURACY, so for logs under ACCURACY rows it is
# exact up to one rank. Time windows are fixed-width buckets of the arrival time ``ts``
# (``floor(ts / window_s) * window_s``, epoch seconds), which keeps them plain numbers.
"""The report's tables, each a function of the request-log DataFrame."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

__all__ = [
    "ACCURACY",
    "LOG_SCHEMA",
    "fairness",
    "held_histogram",
    "memory_pressure",
    "per_api",
    "per_client",
    "purgatory_outcomes",
    "throughput",
    "top_talkers",
    "with_window",
]

#: percentile_approx accuracy: relative rank error 1/ACCURACY.
ACCURACY = 10_000
PERCENTILES = (0.5, 0.95, 0.99)
NO_CLIENT = "(none)"

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


def _percentiles(column: str, prefix: str) -> list[Column]:
    sketch = F.percentile_approx(column, list(PERCENTILES), ACCURACY)
    return [sketch[i].alias(f"{prefix}_p{round(p * 100)}_ms") for i, p in enumerate(PERCENTILES)]


def _request_stats() -> list[Column]:
    return [
        F.count(F.lit(1)).alias("requests"),
        *_percentiles("latency_ms", "latency"),
        F.max("latency_ms").alias("latency_max_ms"),
        *_percentiles("upstream_ms", "upstream"),
        F.sum("request_bytes").alias("request_bytes"),
        F.sum("response_bytes").alias("response_bytes"),
        F.sum(F.when(F.col("outcome") == "error", 1).otherwise(0)).alias("errors"),
    ]


def with_window(log: DataFrame, window_s: int) -> DataFrame:
    """``log`` plus ``window_start`` (epoch seconds) and a non-null ``client``."""
    return log.withColumn(
        "window_start", (F.floor(F.col("ts") / window_s) * window_s).cast(LongType())
    ).withColumn("client", F.coalesce(F.col("client_id"), F.lit(NO_CLIENT)))


def per_api(log: DataFrame) -> DataFrame:
    """Per API: requests, latency and upstream p50/p95/p99, bytes, errors."""
    return log.groupBy("api").agg(*_request_stats()).orderBy("api")


def per_client(log: DataFrame) -> DataFrame:
    """Per (client, API): the same figures as :func:`per_api`."""
    return log.groupBy("client", "api").agg(*_request_stats()).orderBy("client", "api")


def throughput(log: DataFrame, window_s: int) -> DataFrame:
    """Per window and API: requests, requests/s and bytes/s."""
    return (
        log.groupBy("window_start", "api")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum(F.col("request_bytes") + F.col("response_bytes")).alias("bytes"),
        )
        .withColumn("requests_per_s", F.col("requests") / window_s)
        .withColumn("bytes_per_s", F.col("bytes") / window_s)
        .orderBy("window_start", "api")
    )


def purgatory_outcomes(log: DataFrame) -> DataFrame:
    """Per API and outcome: requests, how many were held, held-time percentiles.

    ``completed`` vs ``expired``: held requests whose outcome is ``ok`` completed; ``expired``
    ones hit their deadline (the purgatory, issue 6, produces them).
    """
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


def held_histogram(log: DataFrame, bucket_ms: int = 50) -> DataFrame:
    """Held requests by held time, in ``bucket_ms`` buckets (empty if none was held)."""
    return (
        log.where(F.col("held_ms") > 0)
        .withColumn("bucket_ms", (F.floor(F.col("held_ms") / bucket_ms) * bucket_ms).cast("long"))
        .groupBy("api", "bucket_ms")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy("api", "bucket_ms")
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
    """Per window: Jain's fairness index over the bytes (in + out) of each client.

    J = (sum x)^2 / (n * sum x^2): 1 when every client moved the same bytes, 1/n when one
    client moved everything. Clients that sent nothing in a window are not in it.
    """
    per_client_bytes = log.groupBy("window_start", "client").agg(
        F.sum(F.col("request_bytes") + F.col("response_bytes")).cast(DoubleType()).alias("bytes")
    )
    return (
        per_client_bytes.groupBy("window_start")
        .agg(
            F.count(F.lit(1)).alias("clients"),
            F.sum("bytes").alias("bytes"),
            F.sum(F.col("bytes") * F.col("bytes")).alias("bytes_squared"),
        )
        .withColumn(
            "jain_index",
            F.when(
                F.col("bytes_squared") > 0,
                F.col("bytes") * F.col("bytes") / (F.col("clients") * F.col("bytes_squared")),
            ).otherwise(F.lit(1.0)),
        )
        .drop("bytes_squared")
        .orderBy("window_start")
    )


def top_talkers(log: DataFrame, limit: int = 10) -> DataFrame:
    """The ``limit`` clients that moved the most bytes, with their request counts."""
    return (
        log.groupBy("client")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum("request_bytes").alias("request_bytes"),
            F.sum("response_bytes").alias("response_bytes"),
        )
        .withColumn("bytes", F.col("request_bytes") + F.col("response_bytes"))
        .orderBy(F.desc("bytes"), "client")
        .limit(limit)
    )
