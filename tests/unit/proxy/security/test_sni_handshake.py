"""SNI mode's handshake on loopback: ServerTls.accept_named reads the server name of a real
client's TLS hello, and refuses a hello that names no host of the proxy's, before any
certificate is shown (the callback ends the handshake while the hello is read)."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable

import pytest
import trio

from proxy.security.security_config import ClientTlsSection
from proxy.security.server_names import ServerNames
from proxy.security.tls import ServerTls, TlsHandshakeFailed
from testbed.certs import SNI_BOOTSTRAP, SNI_BROKERS, SNI_DOMAIN, Pki, make_pki

TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server(pki: Pki, failures: list[tuple[str, str]]) -> ServerTls:
    section = ClientTlsSection(cert_file=str(pki.wildcard.cert), key_file=str(pki.wildcard.key))
    return ServerTls(
        section,
        on_failure=lambda listener, reason: failures.append((listener, reason)),
        names=ServerNames(SNI_BOOTSTRAP, SNI_BROKERS),
    )


async def _exchange(
    pki: Pki, server_name: str | None, accept: Callable[[trio.SocketStream], Awaitable[object]]
) -> tuple[object, BaseException | None]:
    """One connection on loopback: what ``accept`` made of it on the server's side, and how
    the client's handshake naming ``server_name`` (None: no SNI) ended (None: completed)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client_context = ssl.create_default_context(cafile=str(pki.ca))
    if server_name is None:
        client_context.check_hostname = False
    outcome: list[object] = []
    client_error: list[BaseException | None] = []

    async def serve_one() -> None:
        stream = await listeners[0].accept()
        outcome.append(await accept(stream))
        await stream.aclose()

    async def client() -> None:
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        tls = trio.SSLStream(tcp, client_context, server_hostname=server_name)
        try:
            await tls.do_handshake()
            client_error.append(None)
        except trio.BrokenResourceError as error:
            client_error.append(error.__cause__ or error)
        await trio.aclose_forcefully(tls)

    with trio.fail_after(TIMEOUT_S * 2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_one)
            nursery.start_soon(client)
    await listeners[0].aclose()
    return outcome[0], client_error[0]


async def _handshake(
    pki: Pki, server_name: str | None
) -> tuple[int | TlsHandshakeFailed | None, BaseException | None]:
    """What accept_named made of a client's hello naming ``server_name`` (None: no SNI),
    and how the client's own handshake ended (None: it completed)."""
    failures: list[tuple[str, str]] = []
    server = _server(pki, failures)

    async def accept(stream: trio.SocketStream) -> int | TlsHandshakeFailed | None:
        try:
            secured, node_id = await server.accept_named(stream, TIMEOUT_S)
        except TlsHandshakeFailed as error:
            return error
        await secured.aclose()
        return node_id

    routed, client_error = await _exchange(pki, server_name, accept)
    assert isinstance(routed, int | TlsHandshakeFailed | None)
    if isinstance(routed, TlsHandshakeFailed):
        assert failures == [("sni", "server_name")]
    else:
        assert failures == []
    return routed, client_error


async def test_a_brokers_name_routes_the_connection_to_that_broker(pki: Pki) -> None:
    for node_id in (1, 2, 104):
        routed, client_error = await _handshake(pki, SNI_BROKERS.format(node_id=node_id))
        assert (routed, client_error) == (node_id, None)


async def test_the_bootstrap_name_routes_to_the_bootstrap(pki: Pki) -> None:
    assert await _handshake(pki, SNI_BOOTSTRAP) == (None, None)


@pytest.mark.parametrize("name", [f"nobody.{SNI_DOMAIN}", f"broker-x.{SNI_DOMAIN}", None])
async def test_any_other_name_or_none_is_refused_at_the_handshake(
    pki: Pki, name: str | None
) -> None:
    refused, client_error = await _handshake(pki, name)
    assert isinstance(refused, TlsHandshakeFailed)
    assert str(refused).startswith("TLS handshake refused: the TLS hello named")
    if name is not None:
        assert repr(name) in str(refused)
    # The client's handshake fails too: OpenSSL's unrecognized_name alert, or (trio's
    # SSLStream raises before sending what OpenSSL wrote) the connection closed under it.
    assert isinstance(client_error, ssl.SSLError)
    assert client_error.reason in {"TLSV1_UNRECOGNIZED_NAME", "UNEXPECTED_EOF_WHILE_READING"}


async def test_a_handshake_that_expects_no_name_is_refused_in_sni_mode(pki: Pki) -> None:
    """A context with the callback but no handshake expecting a name refuses: nothing in SNI
    mode may accept a connection without routing it."""
    server = _server(pki, [])

    async def accept(stream: trio.SocketStream) -> object:
        try:
            return await server.accept(stream, TIMEOUT_S, "bootstrap")
        except TlsHandshakeFailed as error:
            return error

    refused, client_error = await _exchange(pki, SNI_BOOTSTRAP, accept)
    assert isinstance(refused, TlsHandshakeFailed)
    assert client_error is not None
