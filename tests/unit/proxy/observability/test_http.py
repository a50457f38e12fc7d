"""The operators' HTTP endpoint over a real loopback socket, read with h11 as a client would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from proxy.observability.http import serve_http
from proxy.observability.readiness import Readiness
from tests.support.http_client import exchange, get


class _Endpoint:
    def __init__(self, port: int, registry: CollectorRegistry) -> None:
        self.port = port
        self.registry = registry
        self.readiness = Readiness()
        self.readiness.block("metadata", "waiting for upstream metadata")


@pytest.fixture
async def endpoint(nursery: trio.Nursery) -> AsyncIterator[_Endpoint]:
    registry = CollectorRegistry()
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    state = _Endpoint(listener.socket.getsockname()[1], registry)
    nursery.start_soon(serve_http, listener, registry, state.readiness, nursery)
    yield state


async def test_healthz_and_readyz_follow_readiness(endpoint: _Endpoint) -> None:
    [(status, _, body)] = await exchange(endpoint.port, [get("/healthz")])
    assert (status, body) == (200, b"ok\n")
    [(status, _, body)] = await exchange(endpoint.port, [get("/readyz")])
    assert (status, body) == (503, b"not ready: waiting for upstream metadata\n")
    endpoint.readiness.block("broker", "embedded broker exited with status 1")
    [(status, _, body)] = await exchange(endpoint.port, [get("/readyz")])
    assert (status, body) == (
        503,
        b"not ready: waiting for upstream metadata; embedded broker exited with status 1\n",
    )
    endpoint.readiness.clear("metadata")
    endpoint.readiness.clear("broker")
    [(status, _, body)] = await exchange(endpoint.port, [get("/readyz")])
    assert (status, body) == (200, b"ready\n")


async def test_metrics_is_the_registry_in_prometheus_text(endpoint: _Endpoint) -> None:
    hits = Counter("hits", "Hits.", registry=endpoint.registry)
    hits.inc(3)
    # Keep-alive: two scrapes on one connection, then a third after the counter moved.
    answers = await exchange(endpoint.port, [get("/metrics"), get("/metrics?x=1")])
    hits.inc()
    answers += await exchange(endpoint.port, [get("/metrics")])
    values = []
    for status, headers, body in answers:
        assert status == 200
        assert headers[b"content-type"].startswith(b"text/plain")
        samples = [s for f in text_string_to_metric_families(body.decode()) for s in f.samples]
        values.append(next(s.value for s in samples if s.name == "hits_total"))
    assert values == [3.0, 3.0, 4.0]


async def test_head_unknown_paths_methods_and_garbage(endpoint: _Endpoint) -> None:
    [(status, headers, body)] = await exchange(endpoint.port, [get("/healthz", "HEAD")])
    assert (status, headers[b"content-length"], body) == (200, b"3", b"")
    [(status, _, _)] = await exchange(endpoint.port, [get("/nope")])
    assert status == 404
    [(status, _, _)] = await exchange(endpoint.port, [get("/metrics", "POST")])
    assert status == 405
    [(status, _, _)] = await exchange(endpoint.port, [], raw=b"NOT HTTP AT ALL\r\n\r\n")
    assert status == 400
