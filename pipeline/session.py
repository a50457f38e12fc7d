# Strategy: every job runs on a SparkSession built here, so the few settings that make a local
# run safe and quick live in one place. A local master binds the driver to loopback (no port is
# ever opened on a public interface, and a laptop without a resolvable hostname still works);
# any other master URL (spark://, yarn, k8s://) is passed through untouched. The request log is
# small compared with what Spark is built for, so shuffles use few partitions by default.
"""The SparkSession the report runs on."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

__all__ = ["spark_session"]


def spark_session(master: str = "local[*]", *, shuffle_partitions: int = 8) -> SparkSession:
    """A session on ``master``; loopback-bound when the master is ``local``/``local[N]``.

    Resource handling: the caller stops it (``session.stop()``) when done.
    """
    builder = (
        SparkSession.builder.master(master)
        .appName("purgatory-proxy-report")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master.startswith("local"):
        # The JVM picks its own "local IP" before reading the driver settings (and warns when
        # the hostname resolves to loopback); pin it too, unless the user already did.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
