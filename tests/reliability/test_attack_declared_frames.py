# Strategy: issue 29's "memory reserved for bytes nobody sent", against Apache Kafka. Three raw
# connections each send a 4-byte size prefix declaring 100 MiB (the largest request the proxy
# accepts by default) and nothing else. KIP-72 as main had it reserved a frame's whole size as
# soon as the prefix was read: the three put the 256 MiB pool at 300 MiB, allocated 300 MiB of
# buffers, and every other client waited, muted, until the frame timeout ended them. With honest
# memory a declared frame holds what arrived (its first piece), so:
#
#   * a new client's produce is acknowledged within NEW_CLIENT_BOUND_S (the frame timeout is
#     set to FRAME_TIMEOUT_S, well above it, so waiting for the attackers' end cannot pass);
#   * the pool's used bytes (/metrics) stay below a first piece per attacker plus a margin, and
#     the proxy's resident memory grows by less than RSS_GROWTH_BOUND;
#   * each attacker, once it gives up, is one log line; the proxy is still up.
"""Attack: frames declared at 100 MiB and never sent hold next to nothing (issue 29)."""

from __future__ import annotations

import re

import trio

from testbed.processes import Broker, free_port
from testbed.proxy_process import running_proxy
from testbed.topics import create_topic
from tests.support.load_proc import rss_bytes, scrape
from tests.support.load_wire import (
    PRODUCE_VERSION,
    KafkaWire,
    leader_address,
    produce_request,
    record_batch,
)
from wire.messages.produce_response import ProduceResponse

MIB = 1024 * 1024
DECLARED_BYTES = 100 * MIB
ATTACKERS = 3
FRAME_TIMEOUT_S = 20
#: Generous for one small produce on a busy shared machine, far below the frame timeout.
NEW_CLIENT_BOUND_S = 5.0
#: Three first pieces (64 KiB each) are 192 KiB; a 1 MiB margin for everything else.
POOL_USED_BOUND = ATTACKERS * 64 * 1024 + MIB
RSS_GROWTH_BOUND = 32 * MIB
POOL_USED = "purgatory_proxy_memory_pool_used_bytes"


async def test_declared_frames_that_never_come_do_not_hold_the_pool(kafka_broker: Broker) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    env = {"PURGATORY_PROXY_CONNECTIONS__FRAME_TIMEOUT_MS": str(FRAME_TIMEOUT_S * 1000)}
    with running_proxy(kafka_broker.bootstrap, "--metrics", metrics, env=env) as proxy:
        topic = create_topic(proxy.bootstrap, "declared")
        address = await leader_address(proxy.host, proxy.port, topic)
        before_rss = rss_bytes(proxy.pid)
        attackers = [await trio.open_tcp_stream(*address) for _ in range(ATTACKERS)]
        for stream in attackers:
            await stream.send_all(DECLARED_BYTES.to_bytes(4, "big"))
        await trio.sleep(1)  # the proxy reads the prefixes and reserves what it reserves
        used = scrape(metrics)[POOL_USED]
        grown = rss_bytes(proxy.pid) - before_rss

        client = await KafkaWire.connect(*address, "newcomer")
        started = trio.current_time()
        with trio.move_on_after(FRAME_TIMEOUT_S * 2):
            await client.send(produce_request(topic, record_batch(100)), PRODUCE_VERSION)
            _, response = await client.receive()
        waited_s = trio.current_time() - started
        await client.aclose()
        print(
            f"declared-frames: {ATTACKERS} x {DECLARED_BYTES // MIB} MiB declared: pool used "
            f"{used / MIB:.2f} MiB, RSS +{grown / MIB:.1f} MiB; a new client's produce "
            f"answered in {waited_s:.2f} s"
        )
        assert used <= POOL_USED_BOUND, f"pool used {used / MIB:.1f} MiB for unsent frames"
        assert grown <= RSS_GROWTH_BOUND, f"RSS grew {grown / MIB:.1f} MiB for unsent frames"
        assert waited_s <= NEW_CLIENT_BOUND_S, f"a new client waited {waited_s:.1f} s"
        assert isinstance(response, ProduceResponse)
        codes = [p.error_code for t in response.responses for p in t.partition_responses]
        assert codes == [0]

        for stream in attackers:
            await stream.aclose()
        pattern = rf"client closed the connection after 0 of {DECLARED_BYTES} bytes"
        with trio.fail_after(10):
            while len(re.findall(pattern, proxy.log_text())) < ATTACKERS:
                await trio.sleep(0.05)
        assert len(re.findall(pattern, proxy.log_text())) == ATTACKERS, proxy.log_text()
        assert proxy.alive()
