# Strategy: the response side of one client connection, as a thin pump: for each owed slot in
# request order, answer it by its kind (Local, Forwarded, HeldProduce, HeldFetch) and write the
# answer. Kafka answers one connection's requests in order, so client order is kept without
# re-sequencing. What a held produce or fetch waits for, and how long, is the held path's
# (proxy/held/holds.py): the pump asks for the answer and writes it. A write defers while the
# next answer is already in hand, so a pipelined batch goes out in one writev.
"""A client connection's response pump."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import trio

from proxy.connection.client_auth import ClientAuthentication
from proxy.connection.handoff import Handoff
from proxy.connection.records import Recorder
from proxy.connection.services import ConnectionServices
from proxy.connection.state import (
    NEED_REQUEST,
    REQUESTS_DONE,
    Connection,
    Forwarded,
    HeldFetch,
    HeldProduce,
    Local,
)
from proxy.connection.upstream_link import UpstreamLink
from proxy.errors import AuthenticationFailed, SendTimeout
from proxy.held.holds import ConnectionHolds, ProduceAnswer
from proxy.observability.error_peek import peek_error_code
from proxy.observability.outcomes import Outcome
from proxy.primitives.stream_writer import StreamWriter
from proxy.routing.rewrite import rewrite_response
from wire.apis import ApiKey
from wire.framing import size_prefix

__all__ = ["ResponsePump"]

_SIZE_BYTES = 4
_API_VERSIONS = int(ApiKey.API_VERSIONS)


class ResponsePump:
    """Answers one client's owed slots in order.

    Args:
        services: the broker directory, known ApiVersions, held requests, settings.
        out: the client's writer (its scope, ``send_scope``, times a client that does not
            take an answer: connections.send_timeout_ms).
        node_id: the broker whose port it is on (None: bootstrap).
        conn, handoff: the connection's state, and what the pumps share.
        upstream: the connection's upstream link.
        auth: what the cluster said of the client's authentication (passthrough);
            ``auth_scope`` ends the connection unless the cluster accepts it in time.
        holds: the connection's held requests (None: ``[fetch] hold = false``).
        recorder: where each finished request is reported.
    """

    def __init__(
        self,
        services: ConnectionServices,
        out: StreamWriter,
        send_scope: trio.CancelScope,
        node_id: int | None,
        conn: Connection,
        handoff: Handoff,
        upstream: UpstreamLink,
        auth: ClientAuthentication,
        auth_scope: trio.CancelScope,
        holds: ConnectionHolds | None,
        recorder: Recorder,
    ) -> None:
        self._services = services
        self._out = out
        self._send_scope = send_scope
        self._node_id = node_id
        self._conn = conn
        self._handoff = handoff
        self._upstream = upstream
        self._auth = auth
        self._auth_scope = auth_scope
        self._holds = holds
        self._recorder = recorder

    async def run(self) -> None:
        """Answer every owed slot in order until the request side has ended.

        A held produce's expiry ends the held path's interruptible block (one for every
        produce until one expires: proxy/held/produce.py); its answer is written here and the
        answers go on in a new block. Around it all, the send scope: its deadline stands only
        while a write waits for the client (connections.send_timeout_ms).
        """
        holds = self._holds
        with self._send_scope:
            while True:
                interruptible: AbstractContextManager[None] = (
                    nullcontext() if holds is None else holds.interruptible()
                )
                with interruptible:
                    await self._answer_in_order()
                    return  # the request side ended; every response was sent
                assert holds is not None
                slot, answer = holds.interrupted()
                assert isinstance(slot, HeldProduce)
                await self._send_produce(slot, answer)
        timeout_s = self._services.settings.send_timeout_s
        raise SendTimeout(
            f"client did not take its answer within {timeout_s:g} s "
            "(connections.send_timeout_ms); its memory is released"
        )

    async def _answer_in_order(self) -> None:
        """Answer slots in order; return when the request side has ended (a held produce's
        expiry leaves by the held path's interruptible block instead)."""
        conn, out, handoff = self._conn, self._out, self._handoff
        while True:
            slot = conn.next_owed()
            if slot is NEED_REQUEST:
                await out.flush()
                if handoff.answered:  # the request pump waits for this (memory is short)
                    handoff.answered.unpark_all()
                await self._wait_for_request()
                continue
            if slot is REQUESTS_DONE:
                await out.flush()
                return
            if handoff.room:
                handoff.room.unpark()
            if isinstance(slot, Forwarded):
                frame = await self._upstream.answer(slot.plan.header.correlation_id)
                await self._send_forwarded(slot, frame)
            elif isinstance(slot, Local):
                await out.send_all(slot.response)
                # The proxy's own refusals (UNSUPPORTED_VERSION to a client newer than the
                # proxy, UNSUPPORTED_SASL_MECHANISM to one that tries SASL) count as errors.
                error = peek_error_code(*slot.api, memoryview(slot.response)[_SIZE_BYTES:])
                outcome: Outcome = "error" if error else "ok"
                self._recorder.report(slot, error, len(slot.response), trio.current_time(),
                                      outcome)  # fmt: skip
            elif isinstance(slot, HeldProduce):
                assert self._holds is not None
                await self._send_produce(slot, await self._holds.answer_produce(slot))
            else:
                assert isinstance(slot, HeldFetch)
                await out.flush()  # it may wait in the purgatory
                await self._answer_fetch(slot)

    async def _wait_for_request(self) -> None:
        """Wait until a slot is owed (the held path's while it holds for this connection: a
        read-ahead out is given up at its time)."""
        holds, owed = self._holds, self._handoff.owed
        if holds is None:
            await owed.park()
        else:
            await holds.idle(owed)

    async def _send_forwarded(
        self, slot: Forwarded | HeldProduce, frame: bytes | bytearray
    ) -> None:
        """Write an upstream answer to the client: deferred while the next one is already in
        hand (the next write or wait of this pump writes it; its record counts it as written
        now, microseconds early)."""
        received_s = trio.current_time()
        plan = slot.plan
        header = plan.header
        body = memoryview(frame)[_SIZE_BYTES:]
        error_code = peek_error_code(header.api_key, header.api_version, body)
        auth = self._auth
        if auth.passthrough:
            auth.learn(header.api_key, header.api_version, body, error_code, received_s)
            if auth.accepted_once:
                self._auth_scope.deadline = float("inf")
        out: bytes | bytearray = frame
        if plan.rewrite:
            rewritten = rewrite_response(plan, body, self._services.brokers)
            if rewritten is not body:  # re-encoded: the only case that copies
                out = size_prefix(len(rewritten)) + rewritten
        if header.api_key == _API_VERSIONS and not error_code and not auth.passthrough:
            # For this port's next clients (proxy/connection/api_versions.py).
            self._services.api_versions.keep(self._node_id, out, header.api_version, received_s)
        writer = self._out
        if writer.has_room_for(out) and self._upstream.frame_in_hand():
            writer.defer(out)
        else:
            await writer.send_all(out)
        self._upstream.release_answer()  # written (or, small, deferred: DEFER_MAX_BYTES)
        self._handoff.processing(-slot.arrival.request_bytes)
        outcome: Outcome = "error" if error_code else "ok"
        self._recorder.report(slot, error_code, len(out), received_s, outcome)
        if error_code and header.api_key == ApiKey.SASL_AUTHENTICATE:
            raise AuthenticationFailed(
                f"the cluster refused the client's SASL authentication (error {error_code}); "
                "it closes such connections, and so does the proxy"
            )

    async def _send_produce(self, slot: HeldProduce, answer: ProduceAnswer) -> None:
        """Write a held produce's answer: the broker's (and wake the fetches held on its
        partitions), or the proxy's REQUEST_TIMED_OUT."""
        holds = self._holds
        assert holds is not None
        if not answer.timed_out:
            await self._send_forwarded(slot, answer.frame)
            holds.produced(slot)
            return
        frame = answer.frame
        await self._out.send_all(frame)
        self._handoff.processing(-slot.arrival.request_bytes)
        self._recorder.report(slot, None, len(frame), trio.current_time(), "timeout")

    async def _answer_fetch(self, slot: HeldFetch) -> None:
        """Ask the held path for a fetch's answer (it may be held) and write it."""
        holds, fetch = self._holds, slot.fetch
        assert holds is not None
        answer = await holds.answer(fetch)
        # No copy: the records go from the upstream frame to the client's socket (writev);
        # joining them was a quarter of the proxy's CPU consuming 1 KiB records.
        await self._out.send_parts(answer.parts)
        holds.finish(fetch)
        self._recorder.report(slot, answer.error_code, answer.frame_bytes,
                              answer.upstream_done_s, answer.outcome, answer.held_ms)  # fmt: skip
