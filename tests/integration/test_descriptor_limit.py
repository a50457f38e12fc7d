"""Out of file descriptors, the proxy stops accepting for a moment instead of dying.

The proxy needs two descriptors per client connection (the client's and its upstream
connection). A proxy started under a tiny RLIMIT_NOFILE is flooded with raw connections until
accept() fails with EMFILE; it must log it, keep running, and serve a real client once the flood
has closed.
"""

from __future__ import annotations

import os
import resource
import socket
import time
import uuid

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from testbed.processes import Broker
from testbed.proxy_process import running_proxy

#: Enough for the proxy's own files, sockets and a real client; far below the flood's needs.
NOFILE = 64
FLOOD = 80


def _open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_running_out_of_descriptors_does_not_stop_the_proxy(kafka_broker: Broker) -> None:
    with running_proxy(kafka_broker.bootstrap) as proxy:
        resource.prlimit(proxy.pid, resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
        flood = []
        try:
            for _ in range(FLOOD):  # the kernel completes handshakes into the backlog
                flood.append(socket.create_connection((proxy.host, proxy.port), timeout=5))
            proxy.wait_for_log(r"cannot accept a connection \(Too many open files\)")
            assert proxy.alive()
            assert _open_descriptors(proxy.pid) <= NOFILE
        finally:
            for sock in flood:
                sock.close()

        topic = f"fd-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + 30  # a hang guard: the backlog drains as flood sockets go
        while True:
            try:
                admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
                break
            except Exception:
                assert time.monotonic() < deadline, proxy.log_text()[-3000:]
                time.sleep(0.5)
        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, acks="all")
        metadata = producer.send(topic, b"after the flood").get(timeout=30)
        producer.close()
        assert metadata.offset == 0
        assert proxy.alive()
