# Strategy: the proxy logs through the standard logging module everywhere; this module only
# chooses how a record is written. Text stays the default (people read it); json writes one
# object per line with time, level, logger and message, plus whatever structured fields the
# call passed in ``extra=`` (connection, broker, reason), so a log shipper can filter on them
# without parsing sentences. The JSON encoding is python-json-logger's, not ours.
"""How log records are written: readable text or one JSON object per line."""

from __future__ import annotations

import logging
import sys
from typing import Literal

from pythonjsonlogger.json import JsonFormatter

__all__ = ["configure_logging"]

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str = "INFO", log_format: Literal["text", "json"] = "text") -> None:
    """Send every log record to stderr at ``level`` and above, as text or as JSON lines.

    Calling it again replaces the handler (the command line first logs at INFO, then again
    once the configuration is known).
    """
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter(
                "{levelname}{name}{message}",
                style="{",
                timestamp="time",
                rename_fields={"levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter(_TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
