# Strategy: confluent-kafka's (librdkafka's) side of the transactions case, the same steps and
# lines as Cases.java's txn mode (tests/compat/_transactions.py reads both): a transactional
# producer commits one transaction of 100 records, aborts one (flushed to the log first) and
# commits a third; then a read_committed consumer reads every partition from the beginning.
#
# librdkafka's consumer position does not count the transaction markers a partition ends
# with, so the reader cannot stop at "position = end offset" as the Java one does; it stops
# once it has the committed records and one more second has brought nothing.
#
#   python -m tests.compat._txn_confluent BOOTSTRAP TOPIC
"""confluent-kafka's transactions program."""

from __future__ import annotations

import functools
import sys
import time

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat._case_program import emit

PARTITIONS = 3
RECORDS = 100
OUTCOMES = ("commit", "abort", "commit")
DEADLINE_S = 90.0


def main(argv: list[str]) -> int:
    bootstrap, topic = argv
    deadline = time.monotonic() + DEADLINE_S
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(timeout=60)
    emit("created", topic)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "acks": "all"}
    )
    producer.init_transactions(60)
    failures: list[str] = []

    def delivered(outcome: str, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))
            return
        emit("produced", topic, msg.partition() or 0, msg.offset() or 0, msg.key(),
                  msg.value(), detail=outcome)  # fmt: skip

    committed = 0
    for t, outcome in enumerate(OUTCOMES):
        producer.begin_transaction()
        for i in range(RECORDS):
            producer.produce(
                topic, key=f"key-{i % 10}".encode(), value=f"txn {t} {outcome} {i}".encode(),
                on_delivery=functools.partial(delivered, outcome),
            )  # fmt: skip
        producer.flush(60)  # the records reach the log before the transaction ends
        if failures:
            print(f"produce failed: {failures[:3]}", file=sys.stderr)
            return 1
        if outcome == "commit":
            producer.commit_transaction(60)
            committed += RECORDS
        else:
            producer.abort_transaction(60)
        emit("ended", topic, detail=outcome)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-unused",  # required by the client; nothing is committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen, quiet_since = 0, time.monotonic()
        while seen < committed or time.monotonic() - quiet_since < 1.0:
            if time.monotonic() > deadline:
                print(f"consume failed: {seen} of {committed} by the deadline", file=sys.stderr)
                return 1
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is not None:
                    print(f"consume failed: {msg.error()}", file=sys.stderr)
                    return 1
                emit("consumed", topic, msg.partition() or 0, msg.offset() or 0,
                          msg.key(), msg.value())  # fmt: skip
                seen += 1
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
