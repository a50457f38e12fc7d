# Strategy: the response side of one client connection, as a thin pump: for each owed slot in
# request order, answer it by its kind (Local, Forwarded, HeldProduce, HeldFetch, HeldRepeat)
# and write the answer. Kafka answers one connection's requests in order, so client order is
# kept without re-sequencing.
#
# A held produce waits in the produce purgatory (proxy/held/produce.py), whose wheel owns its
# deadline: the pump awaits the broker's answer in a scope without a deadline, which the
# produce's expiry cancels after making the REQUEST_TIMED_OUT answer; the late answer is then
# skipped (Connection.give_up). A write defers while the next answer is already in hand, so a
# pipelined batch goes out in one writev.
"""A client connection's response pump."""

from __future__ import annotations

from dataclasses import dataclass

import trio

from proxy.connection.client_auth import ClientAuthentication
from proxy.connection.fetches import ClientFetches
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
    HeldRepeat,
    Local,
)
from proxy.connection.upstream_link import UpstreamLink, answered_id
from proxy.errors import AuthenticationFailed, SendTimeout
from proxy.held.decision import produce_hold_ms
from proxy.held.delayed import DelayedProduce
from proxy.observability.error_peek import peek_error_code
from proxy.observability.outcomes import Outcome
from proxy.primitives.stream_writer import StreamWriter
from proxy.routing.rewrite import rewrite_response
from wire.apis import ApiKey
from wire.framing import size_prefix

__all__ = ["ResponsePump"]

_SIZE_BYTES = 4
_API_VERSIONS = int(ApiKey.API_VERSIONS)


@dataclass(slots=True)
class _HeldAnswer:
    """The produce whose answer the pump awaits until the purgatory expires it (see
    ``run``); ``frame`` is the broker's, when it came as the produce expired."""

    slot: HeldProduce
    operation: DelayedProduce
    frame: bytearray | None = None


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
        fetches: the fetches the proxy answers (None: on a bootstrap port or without holding).
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
        fetches: ClientFetches | None,
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
        self._fetches = fetches
        self._recorder = recorder
        self._held = services.held
        self._answer_wait = trio.CancelScope()
        self._held_answer: _HeldAnswer | None = None

    async def run(self) -> None:
        """Answer every owed slot in order until the request side has ended.

        A held produce's answer is awaited under ``self._answer_wait``, a scope with no
        deadline: the produce purgatory's wheel expires the produce, and its ``on_expiration``
        cancels the scope and makes the REQUEST_TIMED_OUT answer (proxy/held/delayed.py). One
        scope serves every produce until one expires (a scope per produce cost ~15 us in
        profiles); leaving it lands here, where the answer is sent and a fresh scope opened.
        Around it all, the send scope: its deadline stands only while a write waits for the
        client (connections.send_timeout_ms).
        """
        with self._send_scope:
            while True:
                self._answer_wait = trio.CancelScope()
                with self._answer_wait:
                    await self._answer_in_order()
                    if self._held_answer is None:
                        return  # the request side ended; every response was sent
                held = self._held_answer
                assert held is not None and held.operation.answer is not None
                self._held_answer = None
                slot, timed_out = held.slot, held.operation.answer
                if held.frame is not None:  # the broker's answer is the truth: it is sent
                    await self._send_produce_answer(slot, held.frame)
                    continue
                self._conn.give_up(slot.plan.header.correlation_id)  # its answer may still come
                self._upstream.expect_late_answer()  # ... and must, unless the broker hangs
                await self._out.send_all(timed_out)
                self._handoff.processing(-slot.arrival.request_bytes)
                self._recorder.report(slot, None, len(timed_out), trio.current_time(), "timeout")
        timeout_s = self._services.settings.send_timeout_s
        raise SendTimeout(
            f"client did not take its answer within {timeout_s:g} s "
            "(connections.send_timeout_ms); its memory is released"
        )

    def abandon(self) -> None:
        """The connection ended: a produce still held leaves the purgatory."""
        held, self._held_answer = self._held_answer, None
        if held is not None:
            held.operation.force_complete()

    async def _answer_in_order(self) -> None:
        """Answer slots in order; return when the request side has ended, or when a held
        produce expired as its answer came (``self._held_answer.frame`` set; otherwise its
        expiry cancels ``self._answer_wait``)."""
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
                if not await self._answer_produce(slot):
                    return
            else:
                assert isinstance(slot, HeldFetch | HeldRepeat)
                await out.flush()  # it may wait in the purgatory
                await self._answer_fetch(slot)

    async def _wait_for_request(self) -> None:
        """Wait until a slot is owed. While a read-ahead is out, only until its time to be
        claimed has passed: then it is given up (proxy/connection/fetches.py)."""
        fetches, owed = self._fetches, self._handoff.owed
        if fetches is None or fetches.ahead_expires_s is None:
            await owed.park()
            return
        with trio.move_on_at(fetches.ahead_expires_s):
            await owed.park()
        fetches.expire_ahead()

    async def _send_forwarded(self, slot: Forwarded | HeldProduce, frame: bytearray) -> None:
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

    async def _answer_produce(self, slot: HeldProduce) -> bool:
        """Hold a produce in the purgatory until its answer, and send it (True). Its expiry
        cancels ``self._answer_wait``, and ``run`` sends the timeout's answer; if the broker's
        came as it expired, False: that one is sent there, outside the scope."""
        assert self._held is not None
        correlation_id = slot.plan.header.correlation_id
        ready = self._upstream.peek()
        answered = ready is not None and answered_id(ready) == correlation_id
        # (no clock read for an answer in hand: pipelined answers come in batches)
        waited_ms = 0 if answered else int((trio.current_time() - slot.arrival.sent_s) * 1000)
        hold_ms = produce_hold_ms(slot.produced.timeout_ms, waited_ms, answered)
        if hold_ms is None:  # answered already, or it may not wait
            await self._send_produce_answer(slot, await self._upstream.answer(correlation_id))
            return True
        operation = self._held.produce.hold(hold_ms, slot.plan, self._answer_wait)
        self._held_answer = held = _HeldAnswer(slot, operation)
        frame = await self._upstream.answer(correlation_id)  # Cancelled: it expired
        if not operation.answered(frame):  # it expired as the answer came
            held.frame = frame
            return False
        self._held_answer = None
        await self._send_produce_answer(slot, frame)
        return True

    async def _send_produce_answer(self, slot: HeldProduce, frame: bytearray) -> None:
        """Send an answered produce and wake the fetches held on its partitions."""
        held = self._held
        assert held is not None
        await self._send_forwarded(slot, frame)
        names = held.names
        held.produce.produced(
            [names.key(name, topic_id, index)
             for name, topic_id, indexes in slot.produced.topics for index in indexes]
        )  # fmt: skip

    async def _answer_fetch(self, slot: HeldFetch | HeldRepeat) -> None:
        """Build, hold and send the response to a fetch the proxy terminates."""
        fetches = self._fetches
        assert fetches is not None
        if isinstance(slot, HeldRepeat):
            answer = await fetches.answer_repeat(slot)
        else:
            answer = await fetches.answer(slot)
        # No copy: the records go from the upstream frame to the client's socket (writev);
        # joining them was a quarter of the proxy's CPU consuming 1 KiB records.
        await self._out.send_parts(answer.parts)
        fetches.finish(slot.ticket if isinstance(slot, HeldFetch) else None)
        self._recorder.report(slot, answer.error_code, answer.frame_bytes,
                              answer.upstream_done_s, answer.outcome, answer.held_ms)  # fmt: skip
