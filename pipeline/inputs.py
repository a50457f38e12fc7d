# Strategy: starting Spark (a JVM, a py4j gateway) takes seconds, so the mistakes an operator
# makes most, a wrong path, a log that is still empty or an output folder that cannot be
# written, are found before it, when they can be: the paths are on the local filesystem (a
# plain path or a file: URI) and the glob is one Python's glob reads as Hadoop does (no {a,b}
# alternatives, no escapes, no [^...]). Anything else (hdfs://, s3a://, a plain path while a
# Hadoop configuration may name another default filesystem) is left to the checks inside the
# Spark session (pipeline/report.py, pipeline/storage.py), which say the same words. Stdlib
# only: this runs before pyspark is imported.
"""Finding a missing or empty request log, or an unwritable output, before Spark starts."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from urllib.parse import urlparse

__all__ = ["empty_message", "missing_message", "unusable_local_logs", "unwritable_local_out"]

#: Glob syntax Hadoop reads and Python's glob does not, or reads otherwise.
_HADOOP_ONLY = ("{", "\\", "[^")
#: Hadoop configuration that may make a plain path mean a file on another filesystem.
_HADOOP_CONF = ("HADOOP_CONF_DIR", "YARN_CONF_DIR")
_CHUNK_BYTES = 64 * 1024


def missing_message(logs: str) -> str:
    return f"no request log at {logs}: no such file, or the glob matches none"


def empty_message(logs: str, malformed: int = 0) -> str:
    if malformed:
        return f"no request-log record in {logs}, only {malformed:,} malformed line(s)"
    return f"no request-log lines in {logs}: the log is empty"


def unusable_local_logs(logs: str) -> str | None:
    """Why ``logs`` (the --logs argument) cannot be reported on, if that can be known without
    Spark: the one-line message, or None (fine, or not known here)."""
    pattern = _local_pattern(logs)
    if pattern is None:
        return None
    matched = glob.glob(pattern)
    if not matched:
        return missing_message(logs)
    files = [file for path in matched for file in _spark_files(Path(path))]
    if not any(_has_text(file) for file in files):
        return empty_message(logs)
    return None


def unwritable_local_out(out: str) -> str | None:
    """Why the report cannot be written to ``out`` (the --out argument), if that can be known
    without Spark: the one-line message, or None (fine, or not known here). Nothing is
    created: a report that fails later leaves no empty folder behind."""
    if any(token in out for token in _HADOOP_ONLY):
        return None
    path = _local_pattern(out)
    if path is None:
        return None
    target = Path(path).absolute()
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        what = "it is" if existing == target else f"{existing} is"
        return f"cannot write the report to {out}: {what} a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == target else f" ({existing}, where it would be created)"
        return f"cannot write the report to {out}: permission denied{where}"
    return None


def _local_pattern(logs: str) -> str | None:
    """The local path or glob ``logs`` names, or None when it may not be local or Python's
    glob may read it otherwise than Hadoop."""
    if any(token in logs for token in _HADOOP_ONLY):
        return None
    parsed = urlparse(logs)
    if parsed.scheme == "file":
        return parsed.path if parsed.netloc in ("", "localhost") else None
    if parsed.scheme or any(os.environ.get(name) for name in _HADOOP_CONF):
        return None
    return logs


def _spark_files(path: Path) -> list[Path]:
    """The files Spark reads for ``path``: itself, or a directory's files at any depth that
    are not hidden (Hadoop skips names starting with ``.`` or ``_``)."""
    if not path.is_dir():
        return [path]
    return [
        Path(root) / name
        for root, dirs, names in os.walk(path)
        for name in names
        if not name.startswith((".", "_"))
        and not any(part.startswith((".", "_")) for part in Path(root).relative_to(path).parts)
    ]


def _has_text(path: Path) -> bool:
    """Whether ``path`` holds anything but whitespace (Spark's reader skips blank lines)."""
    try:
        with path.open("rb") as file:
            while chunk := file.read(_CHUNK_BYTES):
                if chunk.strip():
                    return True
    except OSError:
        return True  # unreadable here: Spark says why
    return False
