# Strategy: the vocabulary every client driver and the checker share, and nothing else.
#
# A round trip is: the records to send (made here, the same for every client), what the
# client's producer reported back (`Delivered`), what its group consumer returned
# (`Consumed`), and — observed afterwards by a client we trust, reading the broker directly —
# what is really in the topic and what the group committed (`Observation`). Drivers fill in
# a `ClientReport`; `run_roundtrip` wraps it in a timed `Result`; `check_roundtrip` compares
# `Result` with `Observation`. Everything is plain frozen data so the checker is a pure
# function that can be tested on hand-made inputs.

from __future__ import annotations

from dataclasses import dataclass, field

from tests.compat._tls import ClientSasl, ClientTls

__all__ = [
    "DEADLINE_S",
    "KEY_COUNT",
    "SESSION_TIMEOUT_MS",
    "ClientFailed",
    "ClientReport",
    "Consumed",
    "Delivered",
    "Job",
    "Observation",
    "Record",
    "Result",
    "make_records",
]

#: Consumer-group session timeout for every client: Apache Kafka's smallest
#: (group.min.session.timeout.ms), so a member that dies is noticed quickly.
SESSION_TIMEOUT_MS = 6000

#: Upper bound on one client's whole round trip. Round trips take 1-5 s on a quiet broker;
#: the bound only turns a hang into a clear failure.
DEADLINE_S = 90.0

#: Distinct keys in the workload: every key is reused n / KEY_COUNT times, so the checker
#: can see that one key always lands on one partition, in the order it was produced.
KEY_COUNT = 100


@dataclass(frozen=True)
class Record:
    """One record to produce: ASCII, the key without spaces, the value without tabs or newlines
    (the examples print both on one line, the value last; the Go clients take them as TSV)."""

    key: str
    value: str


@dataclass(frozen=True, order=True)
class Consumed:
    """A record as a consumer returned it: where it was, and what it held."""

    partition: int
    offset: int
    key: str | None
    value: str | None


@dataclass(frozen=True)
class Delivered:
    """What a producer was told about one record.

    ``key``/``value`` are None when the client reports the slot but not which record it
    was (kcat prints "delivered to partition P (offset O)" and nothing else).
    """

    partition: int
    offset: int
    key: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class Job:
    """Everything a driver needs for one round trip. ``bootstrap`` is the broker or a proxy."""

    bootstrap: str
    topic: str
    partitions: int
    group: str
    records: tuple[Record, ...]
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    deadline_s: float = DEADLINE_S
    #: TLS to ``bootstrap``; None = plaintext.
    tls: ClientTls | None = None
    #: SASL login to ``bootstrap``; None = none.
    sasl: ClientSasl | None = None
    #: The prefix of every value (``make_records``), which the examples take as --run-id.
    run_id: str = "compat"
    #: A hosts file the client's process sees as /etc/hosts (tests/compat/_hosts.py): SNI
    #: mode's names resolve for the client only. None: the machine's.
    hosts_file: str | None = None
    #: Where a driver without an admin API creates its topic when ``bootstrap`` is a name
    #: only the client resolves (the cluster itself, plaintext). Empty: ``bootstrap``.
    admin_bootstrap: str = ""


@dataclass(frozen=True)
class ClientReport:
    """What a driver hands back: producer reports, consumed records, and what it needed.

    ``settings`` names every non-default setting, environment variable or workaround the
    client needed, so the matrix can report them (the issue's closing note asks for it).
    """

    produced: tuple[Delivered, ...]
    consumed: tuple[Consumed, ...]
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """One client's round trip: the job, the report and the wall time it took."""

    client: str
    job: Job
    report: ClientReport
    elapsed_s: float


@dataclass(frozen=True)
class Observation:
    """The topic and the group as a plain direct consumer sees them after the round trip.

    ``records`` are every record in every partition from the beginning (no group);
    ``committed`` maps partition to the group's committed offset (absent = none committed).
    """

    records: tuple[Consumed, ...]
    committed: dict[int, int]


class ClientFailed(Exception):
    """A client could not complete a stage of the round trip.

    Raised, never returned, so a failing client fails its test with the client's own words.
    ``stage`` is one of "setup", "metadata", "create", "produce", "consume".
    """

    def __init__(self, client: str, stage: str, detail: str) -> None:
        super().__init__(f"{client}: {stage} failed: {detail}")
        self.client = client
        self.stage = stage
        self.detail = detail


def make_records(n: int, run_id: str = "compat") -> tuple[Record, ...]:
    """The workload: ``n`` records over ``KEY_COUNT`` keys, every value unique.

    The same records as the examples produce with ``--count n --keys KEY_COUNT --run-id
    run_id``: record i is key ``key-<i % KEY_COUNT>``, value ``<run_id> record <i>``.
    """
    return tuple(Record(f"key-{i % KEY_COUNT}", f"{run_id} record {i}") for i in range(n))
