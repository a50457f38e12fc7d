"""How the proxy's broker channel ends with a request out (a scripted broker, virtual time):
the broker going away is worth a warning; the proxy stopping its own channel is not."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from proxy.address import Address
from proxy.errors import UpstreamUnavailable
from proxy.upstream.broker_channel import BrokerChannel
from tests.support.one_partition import broker_with_topic, fetch
from tests.support.scripted_broker import ScriptedDialer
from wire.apis import ApiKey

_LOGGER = "purgatory_proxy.upstream.broker_channel"


async def _poll_and_end(
    broker_closes: bool, caplog: pytest.LogCaptureFixture
) -> list[UpstreamUnavailable]:
    """Send a long poll (max wait 500 ms); 0.1 s later the broker closes the connection or
    the proxy cancels the channel's reader. The errors the poll got."""
    broker = broker_with_topic()
    if broker_closes:
        broker.break_on[ApiKey.FETCH] = 1
    caplog.set_level(logging.DEBUG, logger=_LOGGER)
    errors: list[UpstreamUnavailable] = []
    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as readers:
            channel = BrokerChannel(
                Address("broker-1", 9092), readers, dialer=ScriptedDialer(broker, outer)
            )

            async def poll() -> None:
                try:
                    await channel.request(fetch(max_wait_ms=500), 12)
                except UpstreamUnavailable as error:
                    errors.append(error)

            outer.start_soon(poll)
            await trio.sleep(0.1)
            readers.cancel_scope.cancel()  # the proxy stops (a no-op if the reader is done)
        await trio.testing.wait_all_tasks_blocked()
        outer.cancel_scope.cancel()
    return errors


@pytest.mark.parametrize(
    ("broker_closes", "level", "says"),
    [(False, logging.DEBUG, "closed by the proxy"), (True, logging.WARNING, "connection lost")],
    ids=["the proxy stopping its channel: quiet", "the broker going away: a warning"],
)
async def test_a_poll_out_fails_when_the_channel_ends(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    broker_closes: bool,
    level: int,
    says: str,
) -> None:
    errors = await _poll_and_end(broker_closes, caplog)
    assert len(errors) == 1
    records = [r for r in caplog.records if r.name == _LOGGER]
    assert [(r.levelno, says in r.getMessage()) for r in records] == [(level, True)]
