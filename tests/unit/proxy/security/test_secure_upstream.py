"""The proxy's SASL client and KIP-368 re-authentication, in-process under trio's MockClock.

The broker side is testbed/sasl_server.SaslSession (scramp's SCRAM server, PLAIN against a
known password, OAUTHBEARER against a known token), which enforces the session lifetime the way
Kafka's SocketServer does: a request after expiry closes the connection.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing
from pydantic import SecretStr

from proxy.address import Address
from proxy.primitives.framed import FrameReader
from proxy.security.sasl_client import SaslAuthenticationFailed, reauthentication_delay_ms
from proxy.security.secure_upstream import UpstreamSecurity, keep_authenticated
from proxy.security.secured_stream import SecuredStream
from proxy.security.security_config import UpstreamSaslSection
from testbed.sasl_front import read_frame
from testbed.sasl_server import CloseConnection, SaslPolicy, SaslSession
from wire.apis import ApiKey

ADDRESS = Address("broker", 9092)
LIFETIME_MS = 10_000


def _security(mechanism: str, tmp_path: Path, password: str = "proxy-secret") -> UpstreamSecurity:
    token = tmp_path / "token"
    token.write_text("proxy-token\n")
    if mechanism == "OAUTHBEARER":
        sasl = UpstreamSaslSection(mechanism=mechanism, token_file=str(token))
    else:
        sasl = UpstreamSaslSection(
            mechanism=mechanism, username="proxy", password=SecretStr(password)
        )
    return UpstreamSecurity(None, sasl, random.Random(7))


async def _broker(stream: trio.abc.Stream, session: SaslSession, closes: list[str]) -> None:
    """Answers SASL itself and any other request with its correlation id and b"ok"."""
    async with stream:
        while True:
            body = await read_frame(stream)
            if body is None:
                return
            api_key = int.from_bytes(body[:2], "big")
            try:
                if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                    await stream.send_all(session.handle(body))
                    continue
                session.check(api_key)
            except CloseConnection as reason:
                closes.append(str(reason))
                if reason.answer:
                    await stream.send_all(reason.answer)
                return
            answer = body[4:8] + b"ok"
            await stream.send_all(len(answer).to_bytes(4, "big") + answer)


def _request(correlation_id: int) -> bytes:
    body = int(ApiKey.METADATA).to_bytes(2, "big") + b"\0\0" + correlation_id.to_bytes(4, "big")
    return len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
async def test_each_mechanism_authenticates(
    mechanism: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    policy = SaslPolicy(session_lifetime_ms=LIFETIME_MS)
    ours, theirs = trio.testing.memory_stream_pair()
    closes: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_broker, theirs, SaslSession(policy, trio.current_time), closes)
        stream = SecuredStream(ours, ADDRESS, _security(mechanism, tmp_path), 5.0)
        await stream.authenticate()
        assert stream.session_lifetime_ms == LIFETIME_MS
        assert stream.reauthenticate_at is not None
        assert 8.5 <= stream.reauthenticate_at - trio.current_time() <= 9.5
        await stream.send_all(_request(1))
        assert await FrameReader(stream).next_frame() == b"\0\0\0\x06\0\0\0\x01ok"
        await stream.aclose()
    assert [m for m, _ in policy.log] == [mechanism]
    assert closes == []


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_wrong_password_fails_without_naming_it(
    mechanism: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    policy = SaslPolicy()
    ours, theirs = trio.testing.memory_stream_pair()
    closes: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_broker, theirs, SaslSession(policy, trio.current_time), closes)
        stream = SecuredStream(ours, ADDRESS, _security(mechanism, tmp_path, "WrongPa55"), 5.0)
        with pytest.raises(SaslAuthenticationFailed) as caught:
            await stream.authenticate()
        await stream.aclose()
    assert "WrongPa55" not in str(caught.value)
    assert f"SASL {mechanism} authentication as 'proxy' failed" in str(caught.value)


async def test_unsupported_mechanism_names_what_the_broker_offers(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    policy = SaslPolicy(mechanisms=("SCRAM-SHA-512",))
    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_broker, theirs, SaslSession(policy, trio.current_time), [])
        stream = SecuredStream(ours, ADDRESS, _security("PLAIN", tmp_path), 5.0)
        with pytest.raises(SaslAuthenticationFailed, match="offers: SCRAM-SHA-512"):
            await stream.authenticate()
        await stream.aclose()


async def _traffic(stream: SecuredStream, until_s: float, every_s: float) -> int:
    """Owner traffic: one request at a time, each answer read, until virtual ``until_s``."""
    reader = FrameReader(stream)
    sent = 0
    while trio.current_time() < until_s:
        sent += 1
        await stream.send_all(_request(sent))
        frame = await reader.next_frame()
        assert frame[4:8] == sent.to_bytes(4, "big")
        await trio.sleep(every_s)
    return sent


@pytest.mark.parametrize("idle_gap_s", [0.3, 30.0])
async def test_reauthenticates_before_every_expiry_without_dropping_the_connection(
    idle_gap_s: float, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Busy (a request every 0.3 s) and idle (one every 30 s, three lifetimes): either way
    the keeper re-authenticates at 85-95 % of each session and the broker never closes."""
    policy = SaslPolicy(session_lifetime_ms=LIFETIME_MS)
    ours, theirs = trio.testing.memory_stream_pair()
    closes: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_broker, theirs, SaslSession(policy, trio.current_time), closes)
        stream = SecuredStream(ours, ADDRESS, _security("SCRAM-SHA-256", tmp_path), 5.0)
        await stream.authenticate()
        start = trio.current_time()
        nursery.start_soon(keep_authenticated, stream)
        sent = await _traffic(stream, start + 100, idle_gap_s)
        elapsed_s = trio.current_time() - start
        await stream.aclose()
    assert closes == []
    assert sent >= 3
    # One session every 8.5-9.5 s of virtual time, plus the first authentication.
    reauthentications = stream.authentications - 1
    assert elapsed_s / 9.5 - 1 <= reauthentications <= elapsed_s / 8.5


async def test_reauthentication_at_send_when_no_keeper_runs(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A client connection's upstream has no keeper task: the first send after the
    re-authentication time re-authenticates first (between two requests)."""
    policy = SaslPolicy(session_lifetime_ms=LIFETIME_MS)
    ours, theirs = trio.testing.memory_stream_pair()
    closes: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_broker, theirs, SaslSession(policy, trio.current_time), closes)
        stream = SecuredStream(ours, ADDRESS, _security("PLAIN", tmp_path), 5.0)
        await stream.authenticate()
        sent = await _traffic(stream, trio.current_time() + 50, 1.0)
        await stream.aclose()
    assert closes == []
    assert sent == 50
    assert 5 <= stream.authentications <= 7


async def test_reauthentication_while_the_owner_waits_on_a_read(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The owner's reader sits in receive_some when the keeper re-authenticates: the SASL
    answers are routed to the keeper, the owner gets only its own frames."""
    policy = SaslPolicy(session_lifetime_ms=LIFETIME_MS)
    ours, theirs = trio.testing.memory_stream_pair()
    closes: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_broker, theirs, SaslSession(policy, trio.current_time), closes)
        stream = SecuredStream(ours, ADDRESS, _security("SCRAM-SHA-512", tmp_path), 5.0)
        await stream.authenticate()
        nursery.start_soon(keep_authenticated, stream)
        reader = FrameReader(stream)
        got: list[bytes] = []

        async def read_forever() -> None:
            while True:
                got.append(bytes(await reader.next_frame()))

        nursery.start_soon(read_forever)
        for correlation_id in range(1, 31):
            await stream.send_all(_request(correlation_id))
            await trio.sleep(2)
        nursery.cancel_scope.cancel()
    assert closes == []
    assert got == [b"\0\0\0\x06" + i.to_bytes(4, "big") + b"ok" for i in range(1, 31)]
    assert stream.authentications >= 6


async def test_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    security = _security("OAUTHBEARER", tmp_path)
    assert security.credentials().secret == "proxy-token"
    token = tmp_path / "token"
    token.write_text("rotated-token\n")
    stat = token.stat()
    os.utime(token, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert security.credentials().secret == "rotated-token"
    assert "rotated-token" not in repr(security.credentials())


def test_reauthentication_delay_follows_kafka() -> None:
    rng = random.Random(1)
    delays = [reauthentication_delay_ms(10_000, rng) for _ in range(1000)]
    assert all(d is not None and 8_500 <= d <= 9_500 for d in delays)
    assert reauthentication_delay_ms(0, rng) is None


def test_a_proxy_out_of_descriptors_says_so_rather_than_blaming_the_broker() -> None:
    # A real connect with no descriptor left (in a child: it lowers its own limit).
    script = """
import resource, trio
from proxy.routing.table import Address
from proxy.security.secure_upstream import UpstreamSecurity, open_upstream
from proxy.errors import UpstreamUnavailable

async def main():
    hold = []
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    try:
        while True:
            hold.append(open("/dev/null"))
    except OSError:
        pass
    try:
        await open_upstream(Address("127.0.0.1", 9), UpstreamSecurity(None, None), 5.0)
    except UpstreamUnavailable as error:
        print(error)

trio.run(main)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert "the proxy is out of file descriptors" in done.stdout, done.stdout + done.stderr
    assert "ulimit -n" in done.stdout
