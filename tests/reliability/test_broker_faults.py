# Strategy: issue 9, scenarios 1 and 2 - real broker faults under real client traffic.
#
# Both scenarios put a real Tansu broker behind a real proxy process, run an idempotent
# producer and a consumer group (confluent-kafka, i.e. librdkafka) through the proxy, hurt the
# broker with a real signal, and then hold what the clients were told against what is true
# (tests/support/broker_faults_ledger.py):
#
#   broker-restart  durable `s3://` storage on moto; kill -9 mid-stream, restart on the same
#                   port with the same storage. The proxy must keep its PID and answer /healthz
#                   throughout; clients must be working again within 10 s of the restart.
#   broker-hang     SIGSTOP for longer than the clients' timeouts, then SIGCONT. Clients get
#                   timeouts or retriable errors, no call into a client library outlasts a
#                   stated bound, traffic resumes, and the proxy's memory pool drains to 0 when
#                   idle. A raw Produce with timeout_ms=1000 sent while the broker is frozen
#                   must be answered REQUEST_TIMED_OUT by the proxy itself, not early and
#                   before SIGCONT (issue 6), and the produce purgatory's expirations grow.
#
# In both, every acknowledgement must be one the broker gave (a passive tap in front of the
# broker records its Produce answers), every acknowledged record must be in the topic read
# back without the proxy and must be consumed with the exact key and value acknowledged.
# Records the broker itself acknowledged as "already have it" and does not have are Tansu's
# losses: counted and shown in the verdict, not blamed on the proxy (see the ledger module).
#
# Each scenario prints one verdict line and its section of docs/reliability.md, also when it
# fails (the section then lists what did not hold), before asserting; the section is written
# into the file only under `make soak` (PURGATORY_WRITE_DOCS=1, tests/support/load_scenario).
# The time bounds below are hang guards with wide margins, stated once here, not speed
# targets. Soak variants (`make soak`): three restarts in 20,000 records, and a 15 s hang;
# each has its own section (broker-restart-soak, broker-hang-soak).
"""Broker restart and broker hang behind the proxy: nothing lost, nothing hung (issue 9)."""

from __future__ import annotations

import functools
import json
import os
import socket
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kafka.protocol.old.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from testbed.processes import free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.report import machine_line
from tests.support.broker_faults import ProxyHttp, faulty_broker
from tests.support.broker_faults_ledger import DUPLICATE_SEQUENCE_NUMBER, Ledger, reconcile
from tests.support.broker_faults_tap import ProduceAnswer
from tests.support.broker_faults_traffic import (
    Acked,
    Consumed,
    GroupConsumer,
    PacedProducer,
    read_back,
)
from tests.support.load_scenario import publish_section
from tests.support.s3_server import running_s3

#: The issue's promise: clients are working again this soon after the broker is back.
RECOVERY_BOUND_S = 10.0
#: Reconnect backoff cap for the clients. librdkafka's default (10 s) alone could exceed the
#: recovery bound after a few failed attempts; 500 ms is an ordinary production setting.
RECONNECT_BACKOFF_MAX_MS = 500
#: How long the consumer may take to catch up once the producer is done (hang guard).
CATCH_UP_S = 30.0

RESTART_RECORDS = 5000
RESTART_PARTITIONS = 3
RESTART_INTERVAL_S = 0.001  # ~1,000 records/s offered
RESTART_KILL_AFTER_ACKED = 2000
RESTART_DOWN_S = 1.0
#: A kill waits until the consumer is at most this many records behind the acks (2 s of the
#: offered rate: through the proxy a keeping-up consumer trails by up to ~1 s, measured).
RESTART_STEADY_LAG = 2000

HANG_S = 4.0
#: Produce timeout_ms (librdkafka request.timeout.ms) and the probe's timeout_ms.
HANG_REQUEST_TIMEOUT_MS = 1000
#: librdkafka's own network timeout; longer than the produce timeout so that the answer to a
#: held produce comes from whoever holds it (the proxy, with issue 6), not from the client.
HANG_SOCKET_TIMEOUT_MS = 3000
HANG_MESSAGE_TIMEOUT_MS = 20000
HANG_FETCH_WAIT_MS = 1000  # the consumer's long poll
HANG_INTERVAL_S = 0.01  # ~100 records/s
HANG_RUN_AFTER_THAW_S = 3.0


def _call_bound_s(hang_s: float) -> float:
    """No call into a client library may take longer than this.

    consume(0.5 s) and flush(0.2 s) return on their own timeouts. A synchronous commit sent
    into the hang does not: librdkafka re-queues the OffsetCommit after each socket timeout
    and returns only once the coordinator answers (measured without the proxy as well: a
    commit into an 8 s freeze had not returned when the freeze ended; through the proxy 4.2 s
    for a 4 s hang, 14.7 s for 15 s). So the bound is the hang plus one socket timeout plus
    1 s of slack: a call still blocked after that is a client the proxy left hanging.
    """
    return hang_s + HANG_SOCKET_TIMEOUT_MS / 1000 + 1.0


#: SIGSTOP is delivered asynchronously; the probe waits this long so that it surely meets a
#: stopped broker (the tap's "answers while frozen" row shows that it did).
_STOP_SETTLE_S = 0.2
REQUEST_TIMED_OUT = 7
_EXPIRATIONS = "purgatory_proxy_purgatory_expirations_total"
_POOL_USED = "purgatory_proxy_memory_pool_used_bytes"
#: How long a consumer may take to get its partitions before the producer starts anyway.
_ASSIGN_TIMEOUT_S = 30.0
#: Pool samples taken while the consumer long-polls an idle topic (reported, not asserted: a
#: held fetch may own its request's bytes while it waits).
_IDLE_SAMPLES = 10


@dataclass
class _Outcome:
    """What one scenario found: figures for the report, problems for the assertion."""

    name: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def row(self, name: str, value: object) -> None:
        self.rows.append((name, _fmt(value)))

    def check(self, held: bool, problem: str) -> None:
        if not held:
            self.problems.append(problem)

    def report(self, summary: str, setup: str) -> None:
        """Print the verdict line and this scenario's docs/reliability.md section (written
        only when asked: ``publish_section``)."""
        line = f"{self.name}: {'ok' if not self.problems else 'FAILED'} — {summary}"
        print(line)
        md = [
            f"## {self.name}",
            "",
            machine_line(),
            "",
            setup,
            "",
            f"**Verdict:** `{line}`",
            "",
            "| figure | value |",
            "| --- | --- |",
            *(f"| {name} | {value} |" for name, value in self.rows),
        ]
        if self.problems:
            md += ["", "**Did not hold:**", "", *(f"- {p}" for p in self.problems)]
        publish_section(self.name, "\n".join(md))


# --- scenario 1 --------------------------------------------------------------------------


@dataclass(frozen=True)
class _RestartPlan:
    """How many records, after how many acks each kill -9 comes, and how long it stays down."""

    section: str
    test: str
    records: int
    kills_after_acked: tuple[int, ...]
    down_s: float


def test_broker_restart_loses_nothing() -> None:
    _broker_restart(
        _RestartPlan(
            "broker-restart",
            "test_broker_restart_loses_nothing",
            RESTART_RECORDS,
            (RESTART_KILL_AFTER_ACKED,),
            RESTART_DOWN_S,
        )
    )


@pytest.mark.soak
def test_broker_restart_loses_nothing_soak() -> None:
    """Three kill -9s, 3 s down each, in a 30,000-record stream (about 45 s)."""
    _broker_restart(
        _RestartPlan(
            "broker-restart-soak",
            "test_broker_restart_loses_nothing_soak",
            30_000,
            (4_000, 10_000, 16_000),
            3.0,
        )
    )


def _broker_restart(plan: _RestartPlan) -> None:
    topic, group = f"restart-{uuid.uuid4().hex[:8]}", f"restart-{uuid.uuid4().hex[:8]}"
    clients = {"reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS}
    metrics_port = free_port()
    kills: list[tuple[float, float]] = []  # (killed_s, restarted_s)
    healthy_while_down = True
    streaming = True  # the producer was still sending at every restart
    with (
        running_s3() as s3,
        faulty_broker(s3.storage_url, s3.client_env()) as broker,
        running_proxy(broker.bootstrap, "--metrics", f"127.0.0.1:{metrics_port}") as proxy,
    ):
        http = ProxyHttp(metrics_port)
        proxy_pid = proxy.pid
        _create_topic(proxy.bootstrap, topic, RESTART_PARTITIONS)
        producer = PacedProducer(
            proxy.bootstrap, topic, plan.records, RESTART_INTERVAL_S,
            config={**clients, "message.timeout.ms": 30000},
        )  # fmt: skip
        consumer = GroupConsumer(proxy.bootstrap, topic, group, config=clients)
        with _running(consumer, producer):
            for after in plan.kills_after_acked:
                _wait_for(functools.partial(_steady, producer, consumer, after), 60, "steady")
                killed_s = time.monotonic()
                broker.kill()
                time.sleep(plan.down_s / 2)
                healthy_while_down &= proxy.alive() and http.healthy()
                time.sleep(plan.down_s / 2)
                broker.start()
                kills.append((killed_s, time.monotonic()))
                streaming &= producer.is_alive() and producer.sent < plan.records
            producer.join(timeout=plan.records * RESTART_INTERVAL_S + 90)
            stored = read_back(broker.bootstrap, topic, RESTART_PARTITIONS, _last(producer.acked))
            _wait_for_catch_up(producer.acked, stored.records, consumer)
        same_proxy = proxy.alive() and proxy.pid == proxy_pid and http.healthy()
        answers = broker.tap.answers
        tap_errors = broker.tap.errors
    ledger = reconcile(producer.acked, answers, stored.records, consumer.consumed, topic)
    recoveries = [_recovery(producer, consumer, kills, i) for i in range(len(kills))]
    out = _Outcome(plan.section)
    _check_threads(out, producer, consumer)
    out.check(healthy_while_down, "proxy not alive or /healthz not ok while the broker was down")
    out.check(same_proxy, "proxy restarted, died or unhealthy after the broker restart")
    for i, recovery in enumerate(recoveries, start=1):
        for side, seconds in recovery.items():
            out.check(
                seconds is not None and seconds <= RECOVERY_BOUND_S,
                f"restart {i}: {side} recovery {_fmt(seconds)} (bound {RECOVERY_BOUND_S:g} s)",
            )
    out.check(not producer.failed, f"{len(producer.failed)} failed: {producer.failed[:2]}")
    out.check(streaming, "the stream ended before a restart: the plan has too few records")
    out.check(stored.complete, "the read-back did not reach every acked offset")
    out.check(not tap_errors, f"the tap dropped connections: {tap_errors[:2]}")
    out.problems += ledger.problems
    acked_before = sum(a.acked_s <= kills[0][0] for a in producer.acked) if kills else 0
    worst = {
        side: max((s for r in recoveries if (s := r[side]) is not None), default=None)
        for side in ("producer", "consumer")
    }
    out.row("records offered / acknowledged", f"{producer.sent:,} / {ledger.acked:,}")
    out.row("... acknowledged before the kill -9", acked_before)
    out.row("delivery failures", len(producer.failed))
    _ledger_rows(out, ledger, producer, consumer)
    out.row("kill -9 / restart cycles", len(kills))
    out.row("producer recovery after each restart (first ack)",
            " / ".join(_fmt(r["producer"]) for r in recoveries))  # fmt: skip
    out.row("consumer recovery (first record sent after the restart consumed)",
            " / ".join(_fmt(r["consumer"]) for r in recoveries))  # fmt: skip
    out.row("proxy alive and /healthz ok while the broker was down", healthy_while_down)
    out.row("proxy same PID and /healthz ok after", same_proxy)
    out.report(
        f"{ledger.acked:,} acked ({acked_before:,} before the kill -9), "
        f"{ledger.consumed:,} consumed ({ledger.redelivered:,} redelivered), "
        f"{ledger.stored:,} read back; unbacked acks {ledger.unbacked}, missing "
        f"{ledger.missing}, not consumed {ledger.not_consumed}; Tansu: "
        f"{ledger.broker_reused_offset_answers} answers with reused offsets, "
        f"{ledger.lost_by_broker} acked records it does not have; worst recovery producer "
        f"{_fmt(worst['producer'])} / consumer {_fmt(worst['consumer'])}; "
        f"proxy same PID, /healthz ok: {healthy_while_down and same_proxy}",
        "Tansu with durable `s3://` storage on moto behind the proxy; an idempotent "
        f"confluent-kafka producer ({plan.records:,} records, acks=all, ~1,000/s offered, "
        f"{RESTART_PARTITIONS} partitions) and a consumer group (commit after processing) "
        f"through the proxy. After {', '.join(f'{n:,}' for n in plan.kills_after_acked)} "
        f"acks, each time once the consumer is within {RESTART_STEADY_LAG:,} records of the "
        f"acks, the broker is killed with SIGKILL and restarted {plan.down_s:g} s later on the "
        "same port with the same storage. Clients use "
        f"`reconnect.backoff.max.ms={RECONNECT_BACKOFF_MAX_MS}`. Recovery is measured from "
        "the moment the restarted broker accepts connections. "
        + _LEDGER_NOTE
        + _proxy_config_note()
        + f" Run by `tests/reliability/test_broker_faults.py::{plan.test}`.",
    )
    assert not out.problems, out.problems


# --- scenario 2 --------------------------------------------------------------------------


def test_broker_hang_times_out_and_recovers(tmp_path: Path) -> None:
    _broker_hang(tmp_path, "broker-hang", "test_broker_hang_times_out_and_recovers", HANG_S)


@pytest.mark.soak
def test_broker_hang_times_out_and_recovers_soak(tmp_path: Path) -> None:
    """A 15 s hang: five times the clients' socket timeout, so they give up and reconnect
    to a proxy whose broker still does not answer, several times over (about 30 s)."""
    _broker_hang(tmp_path, "broker-hang-soak", "test_broker_hang_times_out_and_recovers_soak", 15.0)


def _broker_hang(tmp_path: Path, section: str, test: str, hang_s: float) -> None:
    call_bound_s = _call_bound_s(hang_s)
    topic, group = f"hang-{uuid.uuid4().hex[:8]}", f"hang-{uuid.uuid4().hex[:8]}"
    clients = {
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        "socket.timeout.ms": HANG_SOCKET_TIMEOUT_MS,
    }
    metrics_port, request_log = free_port(), tmp_path / "requests.jsonl"
    with (
        faulty_broker() as broker,
        running_proxy(
            broker.bootstrap,
            "--metrics", f"127.0.0.1:{metrics_port}",
            "--request-log", str(request_log),
        ) as proxy,
    ):  # fmt: skip
        http = ProxyHttp(metrics_port)
        _create_topic(proxy.bootstrap, topic, 1)
        broker_port = _proxy_broker_port(proxy)
        producer = PacedProducer(
            proxy.bootstrap, topic, 1_000_000, HANG_INTERVAL_S,
            config={
                **clients,
                "request.timeout.ms": HANG_REQUEST_TIMEOUT_MS,
                "message.timeout.ms": HANG_MESSAGE_TIMEOUT_MS,
            },
        )  # fmt: skip
        consumer = GroupConsumer(
            proxy.bootstrap, topic, group,
            config={**clients, "fetch.wait.max.ms": HANG_FETCH_WAIT_MS},
        )  # fmt: skip
        with _running(consumer, producer):
            _wait_for(lambda: len(consumer.consumed) >= 100, 60, "steady traffic")
            before = http.scrape()
            frozen_s = time.monotonic()
            broker.freeze()
            time.sleep(_STOP_SETTLE_S)
            probe_s = time.monotonic()
            probe = _produce_probe(broker_port, topic, HANG_REQUEST_TIMEOUT_MS, hang_s - 1.0)
            time.sleep(max(0.0, frozen_s + hang_s - time.monotonic()))
            broker.thaw()
            thawed_s = time.monotonic()
            during = http.scrape()
            time.sleep(HANG_RUN_AFTER_THAW_S)
            producer.stop.set()
            producer.join(timeout=HANG_MESSAGE_TIMEOUT_MS / 1000 + 10)
            stored = read_back(broker.bootstrap, topic, 1, _last(producer.acked))
            _wait_for_catch_up(producer.acked, stored.records, consumer)
            pool_while_polling = _pool_samples(http, _IDLE_SAMPLES)
        pool_used, _ = http.wait_until(_POOL_USED, 0.0, timeout_s=15)
        alive = proxy.alive()
        answers = broker.tap.answers
        tap_errors = broker.tap.errors
    ledger = reconcile(producer.acked, answers, stored.records, consumer.consumed, topic)
    frozen_answers = sum(probe_s <= a.answered_s < thawed_s for a in answers)
    expired = _grew(before, during, _EXPIRATIONS, 'operation="produce"')
    waits = [a.acked_s - a.sent_s for a in producer.acked]
    resumed = _first(a.acked_s for a in producer.acked if a.sent_s > thawed_s)
    produce_outcomes = _produce_outcomes(request_log)
    signals = producer.request_timeouts + producer.retries + producer.resent
    signals += len(producer.errors)
    signals += consumer.request_timeouts + len(consumer.errors) + len(producer.failed)
    out = _Outcome(section)
    _check_threads(out, producer, consumer)
    for name, calls in (("producer", producer.calls), ("consumer", consumer.calls)):
        out.check(
            calls.longest_s <= call_bound_s,
            f"{name} call {calls.what} took {calls.longest_s:.1f} s (bound {call_bound_s:g} s)",
        )
    out.check(signals > 0, "no client saw a timeout or a retriable error while the broker hung")
    out.check(resumed is not None, "no record sent after SIGCONT was acknowledged")
    out.check(alive, "the proxy died")
    out.check(pool_used == 0, f"memory pool used {pool_used:.0f} bytes when idle, not 0")
    out.check(stored.complete, "the read-back did not reach every acked offset")
    out.check(not tap_errors, f"the tap dropped connections: {tap_errors[:2]}")
    out.problems += ledger.problems
    out.check(frozen_answers == 0, f"the broker answered {frozen_answers} produces while frozen")
    out.problems += _probe_problems(probe)
    out.check(
        expired,
        f'{_EXPIRATIONS}{{operation="produce"}} did not grow while the broker hung '
        "(held produce: issue 6)",
    )
    hung = sum(frozen_s <= a.sent_s <= thawed_s for a in producer.acked)
    out.row("records acknowledged / failed", f"{ledger.acked:,} / {len(producer.failed):,}")
    out.row("... acknowledged that were sent while the broker was frozen", hung)
    _ledger_rows(out, ledger, producer, consumer)
    out.row("producer: messages sent again after a retriable answer (librdkafka stats)",
            producer.resent)  # fmt: skip
    out.row("Produce outcomes in the proxy's request log",
            ", ".join(f"{k} {v:,}" for k, v in sorted(produce_outcomes.items())))  # fmt: skip
    out.row("consumer: requests timed out (librdkafka stats)", consumer.request_timeouts)
    out.row("client error events (producer / consumer)",
            f"{len(producer.errors):,} / {len(consumer.errors):,}")  # fmt: skip
    out.row("longest client call, producer", f"{producer.calls.longest_s:.2f} s "
            f"({producer.calls.what})")  # fmt: skip
    out.row("longest client call, consumer", f"{consumer.calls.longest_s:.2f} s "
            f"({consumer.calls.what})")  # fmt: skip
    out.row("bound on any client call", f"{call_bound_s:g} s")
    out.row("longest wait for an acknowledgement", max(waits, default=0.0))
    out.row("first ack of a record sent after SIGCONT",
            None if resumed is None else resumed - thawed_s)  # fmt: skip
    out.row(f"raw Produce (timeout_ms={HANG_REQUEST_TIMEOUT_MS}) sent to the frozen broker",
            _probe_text(probe))  # fmt: skip
    out.row("Produce answers from the broker between the probe and SIGCONT (tap)", frozen_answers)
    out.row("produce purgatory expirations grew during the hang", expired)
    out.row("memory pool used when idle (clients closed)", f"{pool_used:.0f} B")
    out.row(f"... while only the consumer long-polls (max of {_IDLE_SAMPLES} samples, 0.1 s apart)",
            f"{max(pool_while_polling):.0f} B")  # fmt: skip
    out.row("proxy alive", alive)
    out.report(
        f"SIGSTOP {hang_s:g} s; {ledger.acked:,} acked ({hung:,} sent while frozen), "
        f"{len(producer.failed)} failed; unbacked acks {ledger.unbacked}, missing "
        f"{ledger.missing}, not consumed {ledger.not_consumed}; producer timeouts/retries/"
        f"re-sent messages {producer.request_timeouts}/{producer.retries}/{producer.resent}; "
        f"proxy Produce outcomes {dict(sorted(produce_outcomes.items()))}; longest call "
        f"{max(producer.calls.longest_s, consumer.calls.longest_s):.2f} s (bound "
        f"{call_bound_s:g} s); longest wait for an ack {max(waits, default=0.0):.2f} s; "
        f"probe: {_probe_text(probe)}; produce expirations grew: {expired}; pool used "
        f"{pool_used:.0f} B when idle",
        f"Tansu (memory storage) behind the proxy is frozen with SIGSTOP for {hang_s:g} s, "
        "then SIGCONT, while an idempotent confluent-kafka producer (acks=all, ~100 records/s, "
        f"`request.timeout.ms={HANG_REQUEST_TIMEOUT_MS}`, "
        f"`socket.timeout.ms={HANG_SOCKET_TIMEOUT_MS}`, "
        f"`message.timeout.ms={HANG_MESSAGE_TIMEOUT_MS}`) and a long-polling group consumer "
        f"(`fetch.wait.max.ms={HANG_FETCH_WAIT_MS}`, commit after processing) run through the "
        "proxy. While frozen, one raw Produce v3 (acks=-1, "
        f"`timeout_ms={HANG_REQUEST_TIMEOUT_MS}`) is sent to the proxy's broker port: the "
        "proxy's purgatory must answer it REQUEST_TIMED_OUT by itself, no earlier than its "
        "timeout and before SIGCONT (issue 6). After the clients close, /metrics is polled "
        "until the memory pool is back to 0 bytes used. "
        + _LEDGER_NOTE
        + _proxy_config_note()
        + f" Run by `tests/reliability/test_broker_faults.py::{test}`.",
    )
    assert not out.problems, out.problems


def _steady(producer: PacedProducer, consumer: GroupConsumer, acked: int) -> bool:
    """``acked`` records acknowledged and the consumer within RESTART_STEADY_LAG of them.

    Killing the broker only once the consumer keeps up makes "consumer recovery" measure the
    fault, not the time to read a backlog the consumer had before it (a group join through
    Tansu takes ~3 s, so without this the first kill can land before the first assignment).
    """
    done = len(producer.acked)
    return done >= acked and len(consumer.consumed) >= done - RESTART_STEADY_LAG


def _recovery(
    producer: PacedProducer,
    consumer: GroupConsumer,
    kills: list[tuple[float, float]],
    i: int,
) -> dict[str, float | None]:
    """Seconds from restart ``i`` to the first ack, and to the first consumption of a record
    sent after it (both before the next kill); None if that never happened."""
    restarted_s = kills[i][1]
    until_s = kills[i + 1][0] if i + 1 < len(kills) else float("inf")
    first_ack = _first(a.acked_s for a in producer.acked if restarted_s < a.acked_s < until_s)
    sent_after = {(a.key, a.value) for a in producer.acked if restarted_s < a.sent_s < until_s}
    first_seen = _first(c.received_s for c in consumer.consumed if (c.key, c.value) in sent_after)
    return {
        "producer": None if first_ack is None else first_ack - restarted_s,
        "consumer": None if first_seen is None else first_seen - restarted_s,
    }


def _produce_probe(
    port: int, topic: str, timeout_ms: int, wait_s: float
) -> tuple[list[int], float] | str:
    """Send one acks=-1 Produce v3 with ``timeout_ms`` to the proxy's broker port.

    Returns the partitions' error codes and the seconds until the answer, or why there was
    none within ``wait_s`` (which the caller keeps shorter than the hang, so an answer can
    only have come from the proxy).
    """
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=None, key=b"probe", value=b"held", headers=[])
    request = ProduceRequest[3](
        transactional_id=None, acks=-1, timeout_ms=timeout_ms,
        topic_data=[(topic, [(0, bytes(builder.build()))])],
    )  # fmt: skip
    request.with_header(correlation_id=7, client_id="hang-probe")
    frame: bytes = request.encode(header=True, framed=True)
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        started = time.monotonic()
        sock.sendall(frame)
        try:
            sock.settimeout(max(0.1, started + wait_s - time.monotonic()))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            body = _recv_exactly(sock, size)
        except TimeoutError:
            return f"no answer within {wait_s:g} s"
        except ConnectionError as exc:
            return f"connection closed ({exc})"
        took = time.monotonic() - started
    response = ProduceResponse[3].decode(body[4:])  # after the correlation id
    codes = [partition[1] for _, partitions in response.responses for partition in partitions]
    return codes, took


def _pool_samples(http: ProxyHttp, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        samples.append(http.scrape().get(_POOL_USED, float("nan")))
        time.sleep(0.1)
    return samples


def _produce_outcomes(request_log: Path) -> Counter[str]:
    """Produce requests by outcome in the proxy's request log (docs/request-log.md)."""
    outcomes: Counter[str] = Counter()
    with suppress(FileNotFoundError), request_log.open() as lines:
        for line in lines:
            record = json.loads(line)
            if record["api"] == "Produce":
                outcomes[record["outcome"]] += 1
    return outcomes


def _probe_problems(probe: tuple[list[int], float] | str) -> list[str]:
    if not isinstance(probe, tuple) or set(probe[0]) != {REQUEST_TIMED_OUT}:
        return [
            f"a Produce with timeout_ms={HANG_REQUEST_TIMEOUT_MS} sent while the broker was "
            f"frozen got {_probe_text(probe)}, not REQUEST_TIMED_OUT from the proxy before "
            "SIGCONT (held produce: issue 6)"
        ]
    if probe[1] < HANG_REQUEST_TIMEOUT_MS / 1000:
        return [f"the held produce was answered REQUEST_TIMED_OUT early, after {probe[1]:.3f} s"]
    return []


def _probe_text(probe: tuple[list[int], float] | str) -> str:
    if isinstance(probe, str):
        return probe
    return f"error codes {sorted(set(probe[0]))} after {probe[1]:.3f} s"


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, have = [], 0
    while have < size:
        chunk = sock.recv(size - have)
        if not chunk:
            raise ConnectionError(f"closed after {have} of {size} bytes")
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)


# --- shared ------------------------------------------------------------------------------

_LEDGER_NOTE = (
    "A passive tap in front of Tansu (its advertised address) records every Produce answer; "
    "every acknowledgement must be covered by one (else the proxy made it up). The topic is "
    "read back through the tap, not the proxy. Content (key and value) must be in the topic "
    "and consumed; records Tansu acknowledged with reused offsets or DUPLICATE_SEQUENCE_NUMBER "
    '("already have it") and does not have are counted as Tansu\'s losses. Redelivery to the '
    "consumer is allowed (at-least-once: it commits after processing)."
)


def _proxy_config_note() -> str:
    """The proxy setting that changes the fetch path most, as this run had it."""
    hold = os.environ.get("PURGATORY_PROXY_FETCH__HOLD", "true (default)")
    return f" Proxy `[fetch] hold = {hold}`."


def _ledger_rows(
    out: _Outcome, ledger: Ledger, producer: PacedProducer, consumer: GroupConsumer
) -> None:
    out.row("... of which without an offset (librdkafka: duplicate sequence)",
            ledger.acked_without_offset)  # fmt: skip
    out.row("producer: requests timed out / retried (librdkafka stats)",
            f"{producer.request_timeouts:,} / {producer.retries:,}")  # fmt: skip
    out.row("Produce answers from the broker (tap)", ledger.broker_answers)
    out.row("... success with offsets the broker had already given out",
            ledger.broker_reused_offset_answers)  # fmt: skip
    out.row("... DUPLICATE_SEQUENCE_NUMBER", ledger.broker_duplicate_answers)
    out.row("acks no broker answer covers (the proxy's fault)", ledger.unbacked)
    out.row("acked records at the acknowledged partition/offset", ledger.at_acked_slot)
    out.row("acked records in the topic at another offset (duplicate or reused-offset acks)",
            ledger.elsewhere_in_topic)  # fmt: skip
    out.row("acked records Tansu vouched for and does not have", ledger.lost_by_broker)
    out.row("acked records missing otherwise", ledger.missing)
    out.row("read back without the proxy", ledger.stored)
    out.row("... duplicate keys in the topic", ledger.stored_duplicate_keys)
    out.row("... at offsets no acknowledgement named", ledger.stored_never_acked)
    out.row("consumed through the group (redelivered)",
            f"{ledger.consumed:,} ({ledger.redelivered:,})")  # fmt: skip
    out.row("acked records in the topic never consumed", ledger.not_consumed)
    out.row("consumer commit failures", len(consumer.commit_errors))


class _running:
    """Start the consumer, and the producer once the consumer has its partitions; on leaving,
    stop both and wait (bounded) for them to end.

    Why this order: a group join through Tansu takes ~3 s (JoinGroup is held half the session
    timeout), and a producer started first would build a backlog the consumer must read before
    the scenario's fault, blurring what the fault costs.
    """

    def __init__(self, consumer: GroupConsumer, producer: PacedProducer) -> None:
        self.consumer, self.producer = consumer, producer

    def __enter__(self) -> None:
        self.consumer.start()
        self.consumer.assigned.wait(_ASSIGN_TIMEOUT_S)  # a consumer that never joins shows up
        self.producer.start()  # in the ledger (nothing consumed), not as a stuck fixture

    def __exit__(self, *exc: object) -> None:
        threads = (self.producer, self.consumer)
        for thread in threads:
            thread.stop.set()
        for thread in threads:
            if thread.ident is not None:
                thread.join(timeout=60)


def _check_threads(out: _Outcome, *threads: PacedProducer | GroupConsumer) -> None:
    for thread in threads:
        out.check(thread.failure is None, f"{thread.name} failed: {thread.failure!r}")
        out.check(not thread.is_alive(), f"{thread.name} did not stop (a client call hung)")


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def _proxy_broker_port(proxy: ProxyProcess) -> int:
    """The proxy's port for the (only) broker, as Metadata through the proxy names it."""
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    brokers = list(admin.list_topics(timeout=30).brokers.values())
    assert len(brokers) == 1, brokers
    return int(brokers[0].port)


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Hang guard: poll ``condition`` every 50 ms; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s} s")
        time.sleep(0.05)


def _wait_for_catch_up(
    acked: list[Acked],
    stored: dict[tuple[int, int], tuple[bytes, bytes]],
    consumer: GroupConsumer,
) -> None:
    """Wait (at most CATCH_UP_S) until the consumer has every acked record the topic holds.

    No failure here: if it never catches up, the ledger says which records are missing.
    """
    in_topic = set(stored.values())
    wanted = {(a.key, a.value) for a in acked} & in_topic
    deadline = time.monotonic() + CATCH_UP_S
    while time.monotonic() < deadline:
        if wanted <= {(c.key, c.value) for c in list(consumer.consumed)}:
            return
        time.sleep(0.1)


def _last(acked: Iterable[Acked]) -> dict[int, int]:
    """The highest acknowledged offset of each partition (where the read-back must reach)."""
    last: dict[int, int] = {}
    for a in acked:
        if a.offset is not None:
            last[a.partition] = max(last.get(a.partition, -1), a.offset)
    return last


def _first(times: Iterable[float]) -> float | None:
    return min(times, default=None)


def _grew(before: dict[str, float], after: dict[str, float], name: str, labels: str) -> bool:
    key = f"{name}{{{labels}}}"
    return after.get(key, 0.0) > before.get(key, 0.0)


def _fmt(value: object) -> str:
    if value is None:
        return "never"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f} s"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# --- the ledger's blame rules, on hand-built accounts (no processes) ----------------------


def _acked(partition: int, offset: int | None, n: int) -> Acked:
    return Acked(partition, offset, b"k%d" % n, b"v%d" % n, 0.0, 0.0)


def _answer(partition: int, error: int, base: int, count: int, at_s: float) -> ProduceAnswer:
    return ProduceAnswer("t", partition, error, base, count, at_s)


def _seen(records: Iterable[tuple[int, int, int]]) -> list[Consumed]:
    return [Consumed(p, o, b"k%d" % n, b"v%d" % n, 0.0) for p, o, n in records]


def _topic(records: Iterable[tuple[int, int, int]]) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    return {(p, o): (b"k%d" % n, b"v%d" % n) for p, o, n in records}


def test_reconcile_holds_when_every_ack_is_answered_stored_and_consumed() -> None:
    acked = [_acked(0, 0, 0), _acked(0, 1, 1)]
    there = [(0, 0, 0), (0, 1, 1)]
    ledger = reconcile(acked, [_answer(0, 0, 0, 2, 1.0)], _topic(there), _seen(there), "t")
    assert ledger.problems == []
    assert (ledger.at_acked_slot, ledger.lost_by_broker) == (2, 0)


def test_reconcile_blames_the_proxy_for_an_ack_no_broker_answer_covers() -> None:
    acked = [_acked(0, 0, 0), _acked(0, 1, 1)]
    there = [(0, 0, 0), (0, 1, 1)]
    ledger = reconcile(acked, [_answer(0, 0, 0, 1, 1.0)], _topic(there), _seen(there), "t")
    assert ledger.unbacked == 1
    assert len(ledger.problems) == 1


def test_reconcile_fails_a_record_missing_after_a_clean_broker_answer() -> None:
    acked = [_acked(0, 0, 0), _acked(0, 1, 1)]
    there = [(0, 0, 0)]
    ledger = reconcile(acked, [_answer(0, 0, 0, 2, 1.0)], _topic(there), _seen(there), "t")
    assert (ledger.missing, ledger.lost_by_broker) == (1, 0)
    assert ledger.problems


def test_reconcile_counts_a_duplicate_answer_for_a_missing_batch_as_the_brokers_loss() -> None:
    # Measured after a kill -9 on s3 storage: Tansu answers the re-sent batch of records 2-4
    # DUPLICATE_SEQUENCE_NUMBER with base offset -1, librdkafka numbers them -1 (no offset),
    # 0 and 1, and the topic has none of them.
    acked = [_acked(0, 0, 0), _acked(0, 1, 1), _acked(0, None, 2), _acked(0, 0, 3), _acked(0, 1, 4)]
    there = [(0, 0, 0), (0, 1, 1)]
    answers = [_answer(0, 0, 0, 2, 1.0), _answer(0, DUPLICATE_SEQUENCE_NUMBER, -1, 3, 2.0)]
    ledger = reconcile(acked, answers, _topic(there), _seen(there), "t")
    assert ledger.problems == []
    assert (ledger.lost_by_broker, ledger.acked_without_offset) == (3, 1)


def test_reconcile_accepts_a_reused_offset_ack_whose_record_is_elsewhere() -> None:
    # Measured during a hang: the first send of record 2 was stored at offset 2; its re-send
    # was answered with offset 0 again.
    acked = [_acked(0, 0, 0), _acked(0, 1, 1), _acked(0, 0, 2)]
    there = [(0, 0, 0), (0, 1, 1), (0, 2, 2)]
    answers = [_answer(0, 0, 0, 2, 1.0), _answer(0, 0, 2, 1, 2.0), _answer(0, 0, 0, 1, 3.0)]
    ledger = reconcile(acked, answers, _topic(there), _seen(there), "t")
    assert ledger.problems == []
    assert (ledger.broker_reused_offset_answers, ledger.elsewhere_in_topic) == (1, 1)


def test_reconcile_fails_a_stored_record_that_was_never_consumed() -> None:
    acked = [_acked(0, 0, 0), _acked(0, 1, 1)]
    there = [(0, 0, 0), (0, 1, 1)]
    ledger = reconcile(acked, [_answer(0, 0, 0, 2, 1.0)], _topic(there), _seen(there[:1]), "t")
    assert ledger.not_consumed == 1
    assert ledger.problems
