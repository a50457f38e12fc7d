# Strategy: wire/ decodes a few (message, version) pairs that neither independent Python codec
# knows (kafka-python 3.0.12 and kio 0.6.5 predate them: ApiVersions v5, KIP-1242). For those
# the reference is Kafka itself, in two parts: requests are encoded by Kafka's own generated
# classes (tests/support/KafkaMessageJson.java over the kafka-clients jar, from field values
# given as Kafka's JSON), and responses are what a real broker of the pinned line answered to
# those very bytes. Every body is also decoded by Kafka's classes into Kafka's JSON, which the
# unit test compares field by field with wire's decode (tests/unit/wire/test_kafka_bytes.py).
#
# The output is a checked-in fixture, so the unit suite needs no JVM and no broker; rerun this
# after a Kafka upgrade adds versions the Python codecs do not know yet:
#   python -m tests.support.kafka_bytes_capture
"""Capture message bodies as Kafka's own code writes them into tests/unit/wire/kafka_bytes.json."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.kafka_cluster import running_kafka
from testbed.kafka_install import KAFKA_LINES, ensure_kafka
from tests.support.raw_tls_client import RawKafka
from wire.apis import ApiKey
from wire.headers import RequestHeader, encode_request_header
from wire.messages import MetadataRequest, MetadataResponse

__all__ = ["FIXTURE", "main"]

FIXTURE = Path(__file__).resolve().parents[1] / "unit" / "wire" / "kafka_bytes.json"
_JAVA_TOOL = Path(__file__).resolve().parent / "KafkaMessageJson.java"
_KAFKA = KAFKA_LINES[0]
_CLIENT = {"clientSoftwareName": "apache-kafka-java", "clientSoftwareVersion": _KAFKA}
_BOOTSTRAP = {**_CLIENT, "clusterId": None, "nodeId": -1}


class KafkaCodec:
    """Kafka's generated message classes in one JVM (KafkaMessageJson.java), line by line."""

    def __init__(self, version: str) -> None:
        command = ["java", "-cp", f"{ensure_kafka(version)}/*", str(_JAVA_TOOL)]
        self._jvm = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def _ask(self, line: str) -> str:
        assert self._jvm.stdin is not None and self._jvm.stdout is not None
        self._jvm.stdin.write(line + "\n")
        self._jvm.stdin.flush()
        answer = self._jvm.stdout.readline().strip()
        if not answer:
            raise RuntimeError(f"KafkaMessageJson failed on {line!r} (see its stderr)")
        return answer

    def encode(self, message: str, version: int, fields: dict[str, Any]) -> bytes:
        return bytes.fromhex(self._ask(f"encode {message} {version} {json.dumps(fields)}"))

    def decode(self, message: str, version: int, body: bytes) -> Any:
        return json.loads(self._ask(f"decode {message} {version} {body.hex()}"))

    def close(self) -> None:
        assert self._jvm.stdin is not None
        self._jvm.stdin.close()
        self._jvm.wait(timeout=30)


def _sample(codec: KafkaCodec, message: str, version: int, body: bytes, source: str) -> Any:
    return {
        "message": message,
        "version": version,
        "source": source,
        "hex": body.hex(),
        "kafka_json": codec.decode(message, version, body),
    }


@contextlib.contextmanager
def _connected(address: str) -> Iterator[RawKafka]:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        yield RawKafka(sock)


def _ask_broker(raw: RawKafka, version: int, body: bytes) -> bytes:
    """Send an ApiVersions request body of ``version`` as it is; the response body."""
    head = encode_request_header(RequestHeader(ApiKey.API_VERSIONS, version, 1, "capture"))
    raw.sock.sendall((len(head) + len(body)).to_bytes(4, "big") + head + body)
    frame = raw.read_frame()
    assert frame is not None, "the broker closed the connection"
    return frame[4:]  # ApiVersions responses use header v0 (KIP-511): the correlation id


def capture() -> dict[str, Any]:
    """Run a broker of the pinned line and collect the samples."""
    codec = KafkaCodec(_KAFKA)
    samples = []
    try:
        with running_kafka(1, version=_KAFKA) as cluster:
            address = cluster.node(1).address()
            with _connected(address) as raw:
                metadata = raw.call(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
                assert isinstance(metadata, MetadataResponse)
                cluster_id = metadata.cluster_id
            requests = {
                "a bootstrap connection (no cluster or node known yet)": _BOOTSTRAP,
                "a connection to node 1 of this cluster": {
                    **_CLIENT, "clusterId": cluster_id, "nodeId": 1},
                "a connection meant for another cluster (KIP-1242)": {
                    **_CLIENT, "clusterId": "another-cluster-id0000", "nodeId": 1},
            }  # fmt: skip
            for why, fields in requests.items():
                body = codec.encode("ApiVersionsRequest", 5, fields)
                source = f"kafka-clients {_KAFKA} encoding, {why}"
                samples.append(_sample(codec, "ApiVersionsRequest", 5, body, source))
                with _connected(address) as raw:
                    answer = _ask_broker(raw, 5, body)
                source = f"Kafka {_KAFKA} broker's answer to {why}"
                samples.append(_sample(codec, "ApiVersionsResponse", 5, answer, source))
            # A version the broker does not know yet: its v0 UNSUPPORTED_VERSION answer.
            with _connected(address) as raw:
                answer = _ask_broker(raw, 6, codec.encode("ApiVersionsRequest", 5, _BOOTSTRAP))
            source = f"Kafka {_KAFKA} broker's answer to ApiVersions v6 (a v0 body, KIP-511)"
            samples.append(_sample(codec, "ApiVersionsResponse", 0, answer, source))
    finally:
        codec.close()
    return {"kafka": _KAFKA, "samples": samples}


def main() -> int:
    FIXTURE.write_text(json.dumps(capture(), indent=1) + "\n")
    print(f"wrote {FIXTURE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
