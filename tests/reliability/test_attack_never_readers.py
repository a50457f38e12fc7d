# Strategy: issue 29's "readers that never read hold the pool", against Apache Kafka. Sockets with
# a small receive buffer ask for 16 MiB of records and never read a byte of the answer; what the
# proxy holds for them must be what it really holds, within the pool, and given back at
# connections.send_timeout_ms (SEND_TIMEOUT_S here), one log line each.
#
#   shared read   60 of them on the partition leader's port send the same Fetch at once: the
#                 proxy answers them from shared upstream reads (held fetches), which main
#                 charged once per client: 60 x 16 MiB against a 256 MiB pool, so the pool sat
#                 empty and a new client's produce waited for the idle timeout (10 minutes).
#                 Asserted: the pool holds a few reads' worth (not 60), a new client's produce
#                 is answered within NEW_CLIENT_BOUND_S, the non-readers are cut at the send
#                 timeout with one line each and the pool is empty again.
#   bootstrap     12 of them on the bootstrap port, where a Fetch is forwarded as it is: main
#                 read each 16 MiB answer outside the pool, uncapped. Here the pool is 64 MiB
#                 (largest allocation 16 MiB): the answers are read within it, so the proxy's
#                 resident memory grows by less than RSS_BOUND_BYTES (main: 12 x 16 MiB), and
#                 the non-readers are cut at the send timeout, which gives the memory to the
#                 next in turn (KIP-72's random order): a new client's Metadata on the same port
#                 waits for pool memory like everyone (KIP-72 mutes readers while the pool is
#                 out), so it is answered within the rounds of the send timeout that takes
#                 (BOOTSTRAP_CLIENT_BOUND_S).
"""Attack: clients that never read what they asked for (issue 29)."""

from __future__ import annotations

import re
import socket

import trio

from testbed.processes import Broker, free_port
from testbed.proxy_process import ProxyProcess, running_proxy
from testbed.topics import create_topic
from tests.support.load_proc import MetricsSampler, peak_rss_bytes, reset_peak_rss, rss_bytes
from tests.support.load_wire import (
    FETCH_VERSION,
    METADATA_VERSION,
    PRODUCE_VERSION,
    KafkaWire,
    fetch_request,
    leader_address,
    produce_request,
    record_batch,
    request_frame,
)
from wire.messages.metadata_request import MetadataRequest
from wire.messages.produce_response import ProduceResponse

MIB = 1024 * 1024
#: Kafka's default message.max.bytes is 1 MiB + 12: records of 1,000,000 bytes fit.
RECORD_BYTES = 1_000_000
RECORDS = 17
FETCH_BYTES = 16 * MIB
SEND_TIMEOUT_S = 5
SHARED_READERS = 60
BOOTSTRAP_READERS = 12
#: A small request on a busy machine; far below the send timeout (the non-readers' end).
NEW_CLIENT_BOUND_S = 3.0
#: The non-readers of the bootstrap run are cut in rounds: the pool of 64 MiB holds four of
#: their 16 MiB answers at a time (the others wait for the pool), so three rounds; a new
#: client's request waits among them, in random order, at worst for all three.
CUT_WITHIN_S = BOOTSTRAP_CLIENT_BOUND_S = 4 * SEND_TIMEOUT_S + 5
#: The bootstrap run's pool and largest allocation, and what the process may grow by: the
#: pool's bound (limit + largest allocation) plus 10 % and 16 MiB for the interpreter.
BOOTSTRAP_LIMIT = 64 * MIB
BOOTSTRAP_MAX_REQUEST = 16 * MIB
RSS_BOUND_BYTES = 1.1 * (BOOTSTRAP_LIMIT + BOOTSTRAP_MAX_REQUEST) + 16 * MIB
POOL_USED = "purgatory_proxy_memory_pool_used_bytes"
CUT = r"did not take its answer within 5 s"


async def _topic_with_records(proxy: ProxyProcess) -> str:
    """A fresh topic holding RECORDS records of RECORD_BYTES (written through the proxy)."""
    topic = create_topic(proxy.bootstrap, "never-read")
    address = await leader_address(proxy.host, proxy.port, topic)
    writer = await KafkaWire.connect(*address, "writer")
    try:
        for _ in range(RECORDS):
            await writer.send(produce_request(topic, record_batch(RECORD_BYTES)), PRODUCE_VERSION)
            _, response = await writer.receive()
            assert isinstance(response, ProduceResponse)
            codes = [p.error_code for t in response.responses for p in t.partition_responses]
            assert codes == [0], codes
    finally:
        await writer.aclose()
    return topic


async def _never_reader(address: tuple[str, int], frame: bytes) -> trio.SocketStream:
    """A connection with a 4 KiB receive buffer that sends ``frame`` and reads nothing."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(address)
    stream = trio.SocketStream(sock)
    await stream.send_all(frame)
    return stream


async def _timed_produce(address: tuple[str, int], topic: str) -> float:
    """Seconds until a new client's small produce is acknowledged (error NONE)."""
    client = await KafkaWire.connect(*address, "newcomer")
    started = trio.current_time()
    try:
        with trio.move_on_after(60):
            await client.send(produce_request(topic, record_batch(100)), PRODUCE_VERSION)
            _, response = await client.receive()
        waited_s = trio.current_time() - started
        assert waited_s < 60, "a new client's produce was not answered in a minute"
    finally:
        await client.aclose()
    assert isinstance(response, ProduceResponse)
    assert [p.error_code for t in response.responses for p in t.partition_responses] == [0]
    return waited_s


async def _cut_lines(proxy: ProxyProcess, expected: int, within_s: float) -> int:
    with trio.move_on_after(within_s):
        while len(re.findall(CUT, proxy.log_text())) < expected:
            await trio.sleep(0.1)
    return len(re.findall(CUT, proxy.log_text()))


def _env(**settings: str) -> dict[str, str]:
    return {
        "PURGATORY_PROXY_CONNECTIONS__SEND_TIMEOUT_MS": str(SEND_TIMEOUT_S * 1000),
        "PURGATORY_PROXY_FETCH__RESPONSE_MAX_BYTES": "16MiB",
        **settings,
    }


async def test_never_readers_of_one_shared_read_hold_it_once(kafka_broker: Broker) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics, env=_env()) as proxy:
        topic = await _topic_with_records(proxy)
        address = await leader_address(proxy.host, proxy.port, topic)
        request = fetch_request(topic, 0, max_bytes=FETCH_BYTES, max_wait_ms=500)
        frame = request_frame(request, FETCH_VERSION, 1, "never-reader")
        sampler = MetricsSampler(metrics, (POOL_USED,))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sampler.run)
            async with trio.open_nursery() as openers:
                readers: list[trio.SocketStream] = []

                async def open_one() -> None:
                    readers.append(await _never_reader(address, frame))

                for _ in range(SHARED_READERS):
                    openers.start_soon(open_one)
            await trio.sleep(2)
            held = sampler.maxima[POOL_USED]
            waited_s = await _timed_produce(address, topic)
            cut = await _cut_lines(proxy, SHARED_READERS, SEND_TIMEOUT_S * 4)
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
        after = MetricsSampler(metrics, (POOL_USED,))
        with trio.move_on_after(0.5):
            await after.run()
        for stream in readers:
            await stream.aclose()
        print(
            f"shared-read never-readers: {SHARED_READERS} x {FETCH_BYTES // MIB} MiB asked: pool "
            f"held at most {held / MIB:.1f} MiB; a new client's produce answered in "
            f"{waited_s:.2f} s; {cut} cut at the send timeout; pool after "
            f"{after.maxima[POOL_USED] / MIB:.2f} MiB"
        )
        assert held <= 4 * FETCH_BYTES, f"pool held {held / MIB:.0f} MiB for shared reads"
        assert waited_s <= NEW_CLIENT_BOUND_S, f"a new client waited {waited_s:.1f} s"
        assert cut == SHARED_READERS, proxy.log_text()[-3000:]
        assert after.maxima[POOL_USED] < MIB
        assert proxy.alive()


async def test_never_readers_on_the_bootstrap_port_read_within_the_pool(
    kafka_broker: Broker,
) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    env = _env(
        PURGATORY_PROXY_MEMORY__LIMIT="64MiB",
        PURGATORY_PROXY_MEMORY__SOCKET_REQUEST_MAX_BYTES="16MiB",
    )
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics, env=env) as proxy:
        topic = await _topic_with_records(proxy)
        bootstrap = (proxy.host, proxy.port)
        request = fetch_request(topic, 0, max_bytes=FETCH_BYTES, max_wait_ms=500)
        frame = request_frame(request, FETCH_VERSION, 1, "never-reader")
        baseline = rss_bytes(proxy.pid)
        reset_peak_rss(proxy.pid)
        readers = [await _never_reader(bootstrap, frame) for _ in range(BOOTSTRAP_READERS)]
        await trio.sleep(2)
        client = await KafkaWire.connect(*bootstrap, "newcomer")
        started = trio.current_time()
        await client.send(MetadataRequest(topics=None), METADATA_VERSION)
        with trio.move_on_after(CUT_WITHIN_S):
            await client.receive()
        waited_s = trio.current_time() - started
        await client.aclose()
        cut = await _cut_lines(proxy, BOOTSTRAP_READERS, CUT_WITHIN_S)
        grown = peak_rss_bytes(proxy.pid) - baseline
        for stream in readers:
            await stream.aclose()
        print(
            f"bootstrap never-readers: {BOOTSTRAP_READERS} x {FETCH_BYTES // MIB} MiB answers "
            f"with a 64 MiB pool: peak RSS +{grown / MIB:.0f} MiB (bound "
            f"{RSS_BOUND_BYTES / MIB:.0f}); a new client's Metadata answered in {waited_s:.2f} "
            f"s; {cut} cut at the send timeout"
        )
        assert grown <= RSS_BOUND_BYTES, f"RSS grew {grown / MIB:.0f} MiB"
        assert waited_s <= BOOTSTRAP_CLIENT_BOUND_S, f"a new client waited {waited_s:.1f} s"
        assert cut == BOOTSTRAP_READERS, proxy.log_text()[-3000:]
        assert proxy.alive()
