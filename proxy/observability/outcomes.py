# Strategy: the outcome of a request is written in three places (the request log, the
# requests metric's label, the report's glossary) and read by people who never saw the code.
# One Literal type is the list: mypy --strict holds every RequestRecord the proxy builds to it,
# and MEANINGS, keyed by that type, is what the report and the docs print, so a new outcome
# cannot be written without a definition (tests/pipeline/test_report_glossary.py checks that
# the two lists are one). The report is handed MEANINGS by the command line (proxy/cli.py):
# pipeline/ sits below proxy/ and imports nothing of it.
"""What can become of a client request: the ``outcome`` field of the request log."""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = ["MEANINGS", "OUTCOMES", "Outcome"]

Outcome = Literal["ok", "error", "no_response", "expired", "timeout"]

#: Every outcome, in the order the report lists them.
OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)

#: One sentence per outcome for readers of the log and the report.
MEANINGS: Final[dict[Outcome, str]] = {
    "ok": "answered; for a Fetch the proxy held, answered before its max_wait_ms passed "
    "(data came, or something else to tell the client)",
    "error": "answered with a non-zero top-level error code the proxy could read "
    "(per-partition errors are not in the log: such a request is ok)",
    "no_response": "an acks=0 Produce: Kafka sends no answer, so the request ends once it is "
    "written upstream",
    "expired": "a Fetch that waited until its max_wait_ms passed with no new data (held in the "
    "proxy's purgatory; a busy consumer's, at the broker as its own long-poll): answered with "
    "what there was, usually nothing; the normal end of an idle consumer's long-poll, not a "
    "failure",
    "timeout": "a Produce whose timeout_ms passed before the broker answered: the proxy "
    "answered REQUEST_TIMED_OUT for every partition (the broker may still write the records)",
}
