# Strategy: paths are Hadoop URIs end to end (file://, hdfs://, s3a:// when its jars are on the
# classpath, or a plain path on the default filesystem), never pathlib objects: pathlib would turn
# ``s3a://bucket/r`` into ``s3a:/bucket/r``. Spark reads the logs and writes the Parquet tables
# through Hadoop's FileSystem API; the driver writes summary.json, report.md and the PNGs through
# the very same API, reached over the session's py4j gateway, so the whole report lands where
# the user asked even when the driver's local disk is not that place.
"""Hadoop-filesystem access from the driver: globbing the logs, writing the report's files."""

from __future__ import annotations

from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from pipeline.errors import ReportError

__all__ = ["HadoopFiles", "java_message"]


class HadoopFiles:
    """The Hadoop filesystems of one Spark session, as the driver sees them."""

    def __init__(self, session: SparkSession) -> None:
        context = session.sparkContext
        self._jvm: Any = context._jvm
        self._conf: Any = context._jsc.hadoopConfiguration()

    def _path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def _fs(self, path: Any) -> Any:
        try:
            return path.getFileSystem(self._conf)
        except Py4JJavaError as exc:
            raise ReportError(f"cannot open {path.toString()}: {java_message(exc)}") from None

    def child(self, base: str, *parts: str) -> str:
        """``base`` with ``parts`` appended, joined as Hadoop joins paths (scheme kept)."""
        path = self._path(base)
        for part in parts:
            path = self._jvm.org.apache.hadoop.fs.Path(path, part)
        return str(path.toString())

    def matching_files(self, pattern: str) -> int:
        """How many files or directories the path or glob ``pattern`` names (0: none)."""
        path = self._path(pattern)
        try:
            found = self._fs(path).globStatus(path)
        except Py4JJavaError as exc:
            raise ReportError(f"cannot list {pattern}: {java_message(exc)}") from None
        return 0 if found is None else len(found)

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Create (or overwrite) the file ``uri`` holding ``data``; parents are created."""
        path = self._path(uri)
        try:
            stream = self._fs(path).create(path, True)
            try:
                stream.write(bytearray(data))
            finally:
                stream.close()
        except Py4JJavaError as exc:
            raise ReportError(f"cannot write {uri}: {java_message(exc)}") from None


def java_message(exc: Py4JJavaError) -> str:
    """The Java exception's class and message, without its stack trace."""
    java = exc.java_exception
    return f"{java.getClass().getSimpleName()}: {java.getMessage()}"
