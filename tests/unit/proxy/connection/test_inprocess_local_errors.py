"""Requests the proxy answers itself with an error are counted as errors, like the cluster's:
a client newer than the proxy (ApiVersions at a version it does not know: UNSUPPORTED_VERSION,
35) and a client that tries SASL with the proxy's own identity (SaslHandshake:
UNSUPPORTED_SASL_MECHANISM, 33). docs/operations.md tells operators to read 35 in
request_errors_total; the dashboard's error panel and the request log show it."""

from __future__ import annotations

import trio
import trio.testing
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import broker_with_topic
from wire.headers import RequestHeader, encode_request_header
from wire.messages import SaslHandshakeRequest

UNSUPPORTED_VERSION = 35
UNSUPPORTED_SASL_MECHANISM = 33


def _samples(registry: object, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(registry).decode()  # type: ignore[arg-type]
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


async def test_the_proxys_own_error_answers_are_counted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with proxy_in_process(broker_with_topic()) as proxy:
        future = await proxy.client()
        # ApiVersions v99, as a client from the future sends it first (no body it could
        # know); the answer is v0: size, correlation id, error code.
        head = encode_request_header(RequestHeader(18, 99, 7, "future-client"))
        await future.stream.send_all(len(head).to_bytes(4, "big") + head)
        answer_head = await future.stream.receive_some(10)
        assert int.from_bytes(answer_head[4:8], "big") == 7
        assert int.from_bytes(answer_head[8:10], "big") == UNSUPPORTED_VERSION
        client = await proxy.client()
        await client.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        _, answer, _ = await client.receive()
        assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
        registry = proxy.running.services.metrics.registry
        errors = _samples(registry, "purgatory_proxy_request_errors_total")
        requests = _samples(registry, "purgatory_proxy_requests_total")
    assert errors == {
        (("api", "ApiVersions"), ("error_code", "35")): 1,
        (("api", "SaslHandshake"), ("error_code", "33")): 1,
    }
    assert requests[(("api", "ApiVersions"), ("outcome", "error"))] == 1
    assert requests[(("api", "SaslHandshake"), ("outcome", "error"))] == 1
