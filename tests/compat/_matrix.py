# Strategy: the one entry point — client name in, timed `Result` out.
#
# Every driver has the same shape, `run(Job) -> ClientReport`, is synchronous and blocking,
# and takes the bootstrap address as data; nothing knows whether it talks to the broker or
# to the proxy. The drivers run the programs in examples/ (tests/compat/_examples.py) for
# the clients that have one, and the Go programs of tests/compat/go (tests/compat/_go.py)
# for franz-go, sarama and kafka-go. Every producer that has an idempotent mode uses it.
# A trio test calls `run_roundtrip` through `trio.to_thread.run_sync`, so the proxy may run
# in the test's own trio loop without the clients blocking it.

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable

from tests.compat import _go, _java, _kcat
from tests.compat._check import check_roundtrip
from tests.compat._direct import observe
from tests.compat._examples import python_example
from tests.compat._model import ClientReport, Job, Result, make_records
from tests.compat._tls import ClientSasl, ClientTls, kafka_python_options

__all__ = ["CLIENTS", "DRIVERS", "roundtrip_and_check", "run_roundtrip"]

Driver = Callable[[Job], ClientReport]

DRIVERS: dict[str, Driver] = {
    "aiokafka": python_example("aiokafka_example.py", {"enable_idempotence": "True"}),
    "kafka-python": python_example("kafka_python_example.py", {"enable_idempotence": "True"}),
    "confluent-kafka": python_example("confluent_kafka_example.py", {"enable.idempotence": "true"}),
    "kcat": functools.partial(_kcat.run, librdkafka="wheel"),
    "java": _java.run,
    **{client: functools.partial(_go.run, client=client) for client in _go.CLIENTS},
    # Debian's kcat on Debian's librdkafka 2.0.2: reported, not required (see the tests).
    "kcat-debian": functools.partial(_kcat.run, librdkafka="debian"),
}

#: The clients the matrix requires to round-trip; "kcat-debian" is recorded separately.
CLIENTS: tuple[str, ...] = (
    "aiokafka", "kafka-python", "confluent-kafka", "kcat", "java", *_go.CLIENTS,
)  # fmt: skip


def run_roundtrip(
    client: str,
    bootstrap: str,
    topic: str,
    n: int = 1000,
    partitions: int = 3,
    group: str | None = None,
    tls: ClientTls | None = None,
    sasl: ClientSasl | None = None,
    hosts_file: str | None = None,
    admin_bootstrap: str = "",
) -> Result:
    """Run ``client``'s full round trip against ``bootstrap`` (a broker or a proxy).

    Args:
        client: a key of ``DRIVERS``.
        bootstrap: "host:port" the client connects to.
        topic: a topic that does not exist yet; the client creates it.
        n: records to produce (keys repeat every 100 records, values are unique).
        partitions: partitions of the new topic.
        group: consumer group; defaults to ``"<topic>-group"``.
        tls: the client's TLS to ``bootstrap``; None = plaintext.
        sasl: the client's SASL login to ``bootstrap``; None = none.
        hosts_file, admin_bootstrap: see Job (SNI mode's names, resolved for the client only).

    Raises:
        ClientFailed: the client could not complete a stage.
        KeyError: unknown client.
    """
    driver = DRIVERS[client]
    run_id = uuid.uuid4().hex[:8]
    job = Job(
        bootstrap,
        topic,
        partitions,
        group or f"{topic}-group",
        make_records(n, run_id),
        tls=tls,
        sasl=sasl,
        run_id=run_id,
        hosts_file=hosts_file,
        admin_bootstrap=admin_bootstrap,
    )
    started = time.monotonic()
    report = driver(job)
    return Result(client, job, report, time.monotonic() - started)


def roundtrip_and_check(
    client: str,
    bootstrap: str,
    direct_bootstrap: str,
    n: int = 1000,
    partitions: int = 3,
    tls: ClientTls | None = None,
    sasl: ClientSasl | None = None,
    direct_sasl: ClientSasl | None = None,
    hosts_file: str | None = None,
    topic: str = "",
) -> tuple[Result, list[str]]:
    """Round trip on ``bootstrap`` against a fresh topic, checked on ``direct_bootstrap``.

    ``direct_bootstrap`` is the broker itself even when ``bootstrap`` is a proxy: the
    client's view is compared with what is really stored. ``direct_sasl``: the trusted
    reader's login there (SASL_PLAINTEXT), on a cluster with an authorizer. ``hosts_file``:
    the client resolves ``bootstrap`` through it (Job). ``topic``: a name of the caller's
    (default: a fresh one); the client creates it unless it exists.

    Raises:
        ClientFailed: the client could not complete a stage.
    """
    topic = topic or f"compat-{client}-{uuid.uuid4().hex[:12]}"
    admin = direct_bootstrap if hosts_file is not None else ""
    result = run_roundtrip(client, bootstrap, topic, n=n, partitions=partitions, tls=tls,
                           sasl=sasl, hosts_file=hosts_file, admin_bootstrap=admin)  # fmt: skip
    options = kafka_python_options(None, direct_sasl)
    observed = observe(direct_bootstrap, topic, result.job.group, **options)
    return result, check_roundtrip(result, observed)
