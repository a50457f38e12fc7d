"""The one exception the report raises on purpose.

Why: an operator who points the report at a missing path or an empty log needs one line that
says what to fix, not a Python and JVM traceback. Everything the report can diagnose itself
is a :class:`ReportError`; ``pipeline.command`` prints its message and exits 2. Anything else
is a bug or an environment failure, and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["ReportError"]


class ReportError(Exception):
    """A problem with the report's input or output that the user can fix; one line."""
