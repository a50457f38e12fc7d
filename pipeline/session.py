# Strategy: every job runs on a SparkSession built here, so the few settings that make a run
# safe, quick and quiet live in one place. A local master binds the driver to loopback (no port
# is ever opened on a public interface, and a laptop without a resolvable hostname still works);
# any other master URL (spark://, yarn, k8s://) is passed through untouched.
#
# No ``.crc`` files: Hadoop's file:// filesystem (LocalFileSystem) is a checksum layer over
# RawLocalFileSystem that writes a hidden ``.NAME.crc`` beside every file it creates, which
# only Hadoop reads, and which clutters a report folder an operator opens by hand. file:// is
# mapped to RawLocalFileSystem itself (spark.hadoop.* reaches the driver's and every
# executor's Hadoop configuration), so none is ever written; other filesystems are untouched.
#
# Quiet by default: the operator reads the report's own progress lines, so Spark's console
# progress bar is off and the driver JVM's stdout/stderr (log4j warnings, JDK notices) go to a
# log file instead of the terminal. pyspark's ``launch_gateway`` takes ``popen_kwargs`` for
# exactly this; the SparkContext is then built on that gateway. ``verbose`` restores both.
"""The SparkSession the report runs on."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from pipeline.errors import ReportError

__all__ = ["Spark", "spark_session"]

#: file:// without Hadoop's checksum layer: no ``.crc`` file beside each output (see above).
_RAW_LOCAL_FS = "org.apache.hadoop.fs.RawLocalFileSystem"


@dataclass(frozen=True)
class Spark:
    """A running session, and where its driver JVM's output goes (None: the terminal)."""

    session: SparkSession
    jvm_log: Path | None


def _conf(master: str, shuffle_partitions: int, verbose: bool) -> SparkConf:
    conf = (
        SparkConf()
        .setMaster(master)
        .setAppName("purgatory-proxy-report")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "true" if verbose else "false")
        .set("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .set("spark.sql.session.timeZone", "UTC")
        .set("spark.hadoop.fs.file.impl", _RAW_LOCAL_FS)
    )
    if master.startswith("local"):
        # The JVM picks its own "local IP" before reading the driver settings (and warns when
        # the hostname resolves to loopback); pin it too, unless the user already did.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        conf.set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1")
    return conf


@contextlib.contextmanager
def spark_session(
    master: str = "local[*]", *, shuffle_partitions: int = 8, verbose: bool = False
) -> Iterator[Spark]:
    """A session on ``master`` for the block; stopped when the block ends, even on error.

    Quiet unless ``verbose``: the driver JVM writes to a temporary log file, removed when the
    block ends, unless it raises something other than a :class:`ReportError`: then the file is
    kept and its path added to the exception's notes.
    """
    conf = _conf(master, shuffle_partitions, verbose)
    if verbose:
        context = SparkContext(conf=conf)
        spark = Spark(SparkSession(context), None)
        context.setLogLevel("WARN")
        try:
            yield spark
        finally:
            spark.session.stop()
        return
    # py4j logs each gateway connection it closes at INFO through Python's logging.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    fd, name = tempfile.mkstemp(prefix="purgatory-proxy-report-", suffix=".jvm.log")
    jvm_log = Path(name)
    with os.fdopen(fd, "wb") as sink:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]  # untyped in pyspark
            conf, popen_kwargs={"stdout": sink, "stderr": sink}
        )
        context = SparkContext(conf=conf, gateway=gateway)
    context.setLogLevel("ERROR")
    spark = Spark(SparkSession(context), jvm_log)
    keep_log = False
    try:
        yield spark
    except ReportError:
        raise  # the user's mistake, said in one line: the JVM's output would not help
    except BaseException as exc:
        keep_log = True
        exc.add_note(f"the driver JVM's output is in {jvm_log}")
        raise
    finally:
        spark.session.stop()
        if not keep_log:
            jvm_log.unlink(missing_ok=True)
