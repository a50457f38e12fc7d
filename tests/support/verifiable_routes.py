# Strategy: a route is one way to the cluster (through the proxy, or straight to the brokers)
# with its own topic and its own set of Kafka's verifiable clients, configured as Kafka's
# replication test configures them (apache/kafka:tests/kafkatest/services/verifiable_producer.py and
# verifiable_consumer.py):
#
#   producer   VerifiableProducer, acks=all, idempotent (enable.idempotence, retries 1000000,
#              max.in.flight 5), request.timeout.ms 30000, paced at THROUGHPUT records/s;
#              its values carry the route's prefix so two routes' records never look alike.
#              One change from Kafka's test: records go to the partitions in turn
#              (RoundRobinPartitioner). The default sticky partitioner fills a 16 KB batch on
#              one partition before it moves on, which at a few hundred small records a second
#              leaves a partition without records for seconds at a time, and that gap, not the
#              fault, would then decide when the partition's first acknowledgement after a
#              fault comes.
#   consumers  one VerifiableConsumer per group protocol, each in its own group: "classic" (the
#              JoinGroup/SyncGroup protocol, session timeout 30 s as Kafka's tests set it) and
#              "consumer" (KIP-848's ConsumerGroupHeartbeat), --verbose, a synchronous commit
#              after every poll.
#
# Start and finish follow produce_consume_validate.py and end_to_end.py: consumers first, the
# producer once each consumer has its partitions; running once the producer has more than 5
# acknowledgements and each consumer a record. To finish, the producer is stopped (SIGTERM: it
# flushes and closes), then each consumer is given time until its last commit reaches every
# partition's last acknowledged offset + 1 (Kafka's `await_consumed_offsets`), then stopped.
# Several routes run side by side against one cluster, so one fault hits them at one moment.
"""Routes to a cluster, each with its own topic, verifiable producer and consumers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.kafka_tools import KafkaTool, running_tool, verifiable_consumer, verifiable_producer
from tests.support.verifiable_judge import acks_of, committed_of

__all__ = [
    "PROTOCOLS",
    "Route",
    "finish",
    "make_route",
    "running_routes",
]

#: The consumer group protocols of Kafka 4: classic, and KIP-848's "consumer".
PROTOCOLS = ("classic", "consumer")
#: Records a second each producer offers (Kafka's replication test offers 1,000 from one
#: producer; two routes of three JVMs each share two cores with three brokers here).
THROUGHPUT = 200
PRODUCER_PROPERTIES = {
    "enable.idempotence": "true",
    "retries": 1_000_000,
    "max.in.flight.requests.per.connection": 5,
    "request.timeout.ms": 30_000,
    "partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner",
}
CLASSIC_SESSION_TIMEOUT_MS = 30_000
START_TIMEOUT_S = 90.0
FINISH_TIMEOUT_S = 90.0


@dataclass
class Route:
    """One way to the cluster and the clients that take it."""

    name: str
    bootstrap: str
    topic: str
    producer: KafkaTool
    consumers: dict[str, KafkaTool]

    def tools(self) -> list[KafkaTool]:
        return [*self.consumers.values(), self.producer]


def make_route(
    name: str,
    bootstrap: str,
    topic: str,
    directory: Path,
    *,
    prefix: int,
    protocols: Sequence[str] = PROTOCOLS,
    throughput: int = THROUGHPUT,
) -> Route:
    """The clients of route ``name`` (not started): a producer of ``prefix``.N values to
    ``topic`` and one consumer per group protocol, all on ``bootstrap``."""
    producer = verifiable_producer(
        f"{name}-producer", bootstrap, topic, directory, throughput=throughput,
        value_prefix=prefix, properties=PRODUCER_PROPERTIES,
    )  # fmt: skip
    consumers = {
        protocol: verifiable_consumer(
            f"{name}-{protocol}",
            bootstrap,
            topic,
            f"{topic}-{protocol}",
            directory,
            protocol=protocol,
            extra=(
                ["--session-timeout", str(CLASSIC_SESSION_TIMEOUT_MS)]
                if protocol == "classic"
                else []
            ),
        )
        for protocol in protocols
    }
    return Route(name, bootstrap, topic, producer, consumers)


@contextlib.contextmanager
def running_routes(routes: Sequence[Route]) -> Iterator[None]:
    """Every route's consumers, then producers, running for the block (killed by PID after)."""
    with contextlib.ExitStack() as stack:
        consumers = [c for route in routes for c in route.consumers.values()]
        for consumer in consumers:
            stack.enter_context(running_tool(consumer))
        for consumer in consumers:
            consumer.wait_for_events("partitions_assigned", timeout_s=START_TIMEOUT_S)
        for route in routes:
            stack.enter_context(running_tool(route.producer))
        for route in routes:
            route.producer.wait_for_events("producer_send_success", 5, START_TIMEOUT_S)
        for consumer in consumers:
            consumer.wait_for_events("record_data", timeout_s=START_TIMEOUT_S)
        yield


def finish(routes: Sequence[Route], timeout_s: float = FINISH_TIMEOUT_S) -> dict[str, float | None]:
    """Stop the producers, then wait (bounded) until every consumer committed past each
    partition's last acknowledged offset, then stop the consumers. Per "route/protocol", the
    seconds that took, or None if it never did (consumption did not resume)."""
    for route in routes:
        route.producer.stop()
    stopped_s = time.monotonic()
    caught_up: dict[str, float | None] = {}
    for route in routes:
        last: dict[int, int] = {}
        for ack in acks_of(route.producer):
            last[ack.partition] = max(last.get(ack.partition, -1), ack.offset)
        for protocol, consumer in route.consumers.items():

            def done(consumer: KafkaTool = consumer, last: dict[int, int] = last) -> bool:
                committed = committed_of(consumer)
                return all(committed.get(p, -1) >= offset + 1 for p, offset in last.items())

            deadline = stopped_s + timeout_s
            while not done() and time.monotonic() < deadline:
                time.sleep(0.1)
            took = time.monotonic() - stopped_s
            caught_up[f"{route.name}/{protocol}"] = took if done() else None
    for route in routes:
        for consumer in route.consumers.values():
            consumer.stop()
    return caught_up
