"""The client compatibility matrix: every Kafka client, every case, checked against the broker.

The round trip: each client (aiokafka, kafka-python, confluent-kafka, kcat, the Java client:
the programs in examples/, run as a user runs them; and Go's franz-go, sarama and kafka-go,
tests/compat/go) creates a topic, produces keyed records with acks=all (idempotent where the
client can), consumes them in a consumer group from the earliest offset and commits; the
lines the program prints are parsed back. ``check_roundtrip`` then compares what the client
saw with what a plain kafka-python reader sees on the broker itself. The bootstrap address is
an argument, so the same round trip runs directly against the broker (the baseline) or
through the proxy.

    result = run_roundtrip("java", proxy_bootstrap, topic)
    assert check_roundtrip(result, observe(broker_bootstrap, topic, result.job.group)) == []

The other cases, each with its own module and check: codecs, 5 MiB records, 200 partitions,
headers and tombstones (_cases.py), transactions with read_committed (_transactions.py),
share consumers (_share.py), a group of three with a member leaving in the classic and
KIP-848 protocols (_group_consume.py), the admin round (_admin.py). The routes they run on
are in conftest.py.

``python -m tests.compat`` prints the round-trip matrix as a table.
"""

from tests.compat._check import check_roundtrip
from tests.compat._direct import observe
from tests.compat._matrix import CLIENTS, DRIVERS, roundtrip_and_check, run_roundtrip
from tests.compat._model import ClientFailed, Observation, Result

__all__ = [
    "CLIENTS",
    "DRIVERS",
    "ClientFailed",
    "Observation",
    "Result",
    "check_roundtrip",
    "observe",
    "roundtrip_and_check",
    "run_roundtrip",
]
