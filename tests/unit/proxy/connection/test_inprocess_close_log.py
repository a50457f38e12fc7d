"""The level of a client connection's closing line: a client that goes away is INFO (its own
business), a connection the proxy ends for bad input is WARNING."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from tests.support.inprocess import proxy_in_process
from tests.support.one_partition import broker_with_topic

_LOGGER = "purgatory_proxy.connection.client"


def _closing_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if record.name == _LOGGER and "closed client connection" in record.getMessage()
    ]


async def test_a_client_leaving_mid_frame_is_logged_at_info(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=_LOGGER)
    async with proxy_in_process(broker_with_topic()) as proxy:
        client = await proxy.client()
        await client.stream.send_all((100).to_bytes(4, "big") + b"x" * 10)
        await client.stream.aclose()
        await trio.sleep(1)
    [(level, message)] = _closing_lines(caplog)
    assert level == logging.INFO
    assert "after 10 of 100 bytes" in message


async def test_bad_input_is_logged_at_warning(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=_LOGGER)
    async with proxy_in_process(broker_with_topic()) as proxy:
        client = await proxy.client()
        await client.stream.send_all((2).to_bytes(4, "big") + b"xx")  # shorter than a header
        assert await client.closed()
    [(level, message)] = _closing_lines(caplog)
    assert level == logging.WARNING
    assert "too short to hold a request header" in message
