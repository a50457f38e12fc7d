"""The client compatibility matrix: one round trip per Kafka client, checked against the broker.

Each client (aiokafka, kafka-python, confluent-kafka, kcat, the Java client: the programs in
examples/, run as a user runs them; and sarama) creates a topic, produces keyed records with
acks=all, consumes them in a consumer group from the earliest offset and commits; the
"produced"/"consumed" lines the program prints are parsed back (tests/compat/_examples.py).
``check_roundtrip`` then compares what the client saw with what a plain kafka-python reader
sees on the broker itself. The bootstrap address is an argument, so the
same round trip runs directly against the broker (the baseline) or through the proxy.

    result = run_roundtrip("java", proxy_bootstrap, topic)
    assert check_roundtrip(result, observe(broker_bootstrap, topic, result.job.group)) == []

``python -m tests.compat [BOOTSTRAP]`` prints the matrix as a table.
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
