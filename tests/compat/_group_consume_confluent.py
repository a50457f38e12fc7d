# Strategy: confluent-kafka's (librdkafka's) side of the group-consume check, the same
# program as GroupConsume.java and speaking the same line protocol, so the driver
# (tests/compat/_group_consume.py) treats both clients alike.
#
# Exactly once across a rebalance: auto-commit (and auto offset store) off; the offsets of
# the records this process has *processed* (printed) are committed synchronously in
# on_revoke (``asynchronous=False``; eager range assignment, so on_revoke runs before the
# partitions move) and once more before close. Records are processed at most max_rate per
# second so that members join and leave while there is still work to move.
#
# With protocol "consumer" the member speaks KIP-848 (group.protocol=consumer, librdkafka 2.12+):
# the broker assigns incrementally and on_revoke runs with the partitions taken away.
#
#   python -m tests.compat._group_consume_confluent bootstrap topic group session_ms max_rate \
#       classic|consumer
#   stdin : "stop" (or EOF) -> commit, close (leave the group), exit 0
#   stdout: assigned <p,..> | revoked <p,..> | consumed <p> <offset> <value>
#           | committed <p> <offset> | closed      (TSV, flushed after each poll)
"""One confluent-kafka group member for the exactly-once-across-a-rebalance check."""

from __future__ import annotations

import sys
import threading
import time

from confluent_kafka import Consumer, TopicPartition

MAX_POLL_RECORDS = 100


def main(argv: list[str]) -> int:
    bootstrap, topic, group, session_ms, max_rate, protocol = argv
    stopping = threading.Event()
    threading.Thread(target=_wait_for_stop, args=(stopping,), daemon=True).start()
    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }
    if protocol == "consumer":
        # KIP-848: the broker assigns and times the group; the client sets neither.
        settings["group.protocol"] = "consumer"
    else:
        settings |= {
            "partition.assignment.strategy": "range",
            "session.timeout.ms": int(session_ms),
            "heartbeat.interval.ms": int(session_ms) // 4,
        }
    consumer = Consumer(settings)
    processed: dict[int, int] = {}  # partition -> next offset to process

    def commit(partitions: list[int]) -> None:
        owned = [TopicPartition(topic, p, processed.pop(p)) for p in partitions if p in processed]
        if owned:
            consumer.commit(offsets=owned, asynchronous=False)
            for tp in owned:
                print(f"committed\t{tp.partition}\t{tp.offset}")

    def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
        commit([tp.partition for tp in partitions])
        print("revoked\t" + ",".join(str(tp.partition) for tp in partitions), flush=True)

    def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
        print("assigned\t" + ",".join(str(tp.partition) for tp in partitions), flush=True)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stopping.is_set():
            started = time.monotonic()
            messages = consumer.consume(num_messages=MAX_POLL_RECORDS, timeout=0.1)
            for msg in messages:
                error = msg.error()
                if error is not None:
                    print(f"error\t{error}", flush=True)
                    return 1
                partition, offset, value = msg.partition(), msg.offset(), msg.value()
                assert partition is not None and offset is not None
                print(f"consumed\t{partition}\t{offset}\t{(value or b'').decode()}")
                processed[partition] = offset + 1
            sys.stdout.flush()
            pause_s = len(messages) / float(max_rate) - (time.monotonic() - started)
            if pause_s > 0:
                time.sleep(pause_s)
        commit([tp.partition for tp in consumer.assignment()])
    finally:
        consumer.close()
    print("closed", flush=True)
    return 0


def _wait_for_stop(stopping: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stopping.set()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
