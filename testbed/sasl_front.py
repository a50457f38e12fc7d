# Strategy: Tansu 0.6.0 serves neither TLS nor (usable) SASL, so tests put a front before it
# that does what a secured Kafka listener does, then relays to Tansu. SecureFront is a
# RelayThread on one port: TLS (optionally requiring a client certificate), then the
# SaslSession (testbed/sasl_server.py), then one request at a time to Tansu and its answer back
# (Kafka handles one request per connection at a time too), with the broker addresses
# rewritten to the front (testbed/cluster_rewrite.py) so the proxy never learns Tansu's own
# port. SaslPolicy.fetch_denied principals' Fetch requests are answered by the front itself,
# TOPIC_AUTHORIZATION_FAILED for every requested partition (testbed/fetch_acl.py), never
# relayed. Every connection is audited (testbed/front_audit.py).
"""A TLS + SASL front for Tansu."""

from __future__ import annotations

import contextlib
import ssl

import trio

from testbed.cluster_rewrite import ClusterView, NodeAddress, rewrite_response
from testbed.fetch_acl import denied_fetch_answer, fetch_record_bytes
from testbed.front_audit import AuditEntry, FrontAudit
from testbed.relay_core import RelayThread
from testbed.sasl_server import CloseConnection, SaslPolicy, SaslSession
from wire.apis import ApiKey

__all__ = ["SecureFront", "read_frame"]


async def read_frame(stream: trio.abc.ReceiveStream) -> bytes | None:
    """One size-prefixed frame's body from ``stream``; None if it ends first."""
    head = b""
    while len(head) < 4:
        chunk = await stream.receive_some(4 - len(head))
        if not chunk:
            return None
        head += chunk
    size = int.from_bytes(head, "big")
    body = bytearray()
    while len(body) < size:
        chunk = await stream.receive_some(size - len(body))
        if not chunk:
            return None
        body += chunk
    return bytes(body)


class SecureFront(RelayThread):
    """TLS and/or SASL in front of one Tansu broker, shown as node 1 at the front's port."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        tls: ssl.SSLContext | None = None,
        sasl: SaslPolicy | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__("secure front", "secure-front")
        self._upstream = upstream
        self._tls = tls
        self.sasl = sasl
        self.host = host
        self.port = 0
        self.closes: list[str] = []
        #: Per connection: principal, requests, Fetch record bytes (see FrontAudit).
        self.audit = FrontAudit()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def _listen(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(0, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        self._view = ClusterView((NodeAddress(1, self.host, self.port),))
        nursery.start_soon(trio.serve_listeners, self._serve_one, listeners)

    async def _serve_one(self, client: trio.SocketStream) -> None:
        stream: trio.abc.Stream = client
        try:
            if self._tls is not None:
                stream = trio.SSLStream(client, self._tls, server_side=True)
                with trio.fail_after(5):
                    await stream.do_handshake()
            upstream = await trio.open_tcp_stream(*self._upstream)
        except (trio.BrokenResourceError, trio.TooSlowError, OSError) as error:
            self.closes.append(f"handshake: {error!r}")
            await trio.aclose_forcefully(client)
            return
        policy = self.sasl
        session = SaslSession(policy, trio.current_time) if policy is not None else None
        host, port, *_ = client.socket.getpeername()
        number = self.audit.open(f"{host}:{port}")
        try:
            while True:
                body = await read_frame(stream)
                if body is None:
                    return
                api_key = int.from_bytes(body[:2], "big")
                version = int.from_bytes(body[2:4], "big")
                user = session.username if session is not None else None
                if policy is not None and session is not None:
                    if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                        self.audit.record(number, AuditEntry(api_key, version, user), session)
                        answer_frame = session.handle(body)
                        self.audit.update(number, session)
                        await stream.send_all(answer_frame)
                        continue
                    session.check(api_key)
                    if api_key == ApiKey.FETCH and user in policy.fetch_denied:
                        entry = AuditEntry(api_key, version, user, record_bytes=0, denied=True)
                        self.audit.record(number, entry, session)
                        await stream.send_all(denied_fetch_answer(body))
                        continue
                await upstream.send_all(len(body).to_bytes(4, "big") + body)
                answer = await read_frame(upstream)
                if answer is None:
                    return
                record_bytes = None
                if api_key == ApiKey.FETCH:
                    record_bytes = fetch_record_bytes(version, answer)
                self.audit.record(number, AuditEntry(api_key, version, user, record_bytes), session)
                shown = rewrite_response(api_key, version, answer, self._view)
                await stream.send_all(len(shown).to_bytes(4, "big") + bytes(shown))
        except CloseConnection as reason:
            self.closes.append(str(reason))
            self.audit.update(number, session, closed_because=str(reason))
            if reason.answer:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(reason.answer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(upstream)
            await trio.aclose_forcefully(stream)
