"""A plain HTTP/1.1 client (h11) for the operators' endpoint in tests."""

from __future__ import annotations

import h11
import trio

__all__ = ["exchange", "get"]


async def exchange(
    port: int, requests: list[h11.Request], raw: bytes = b""
) -> list[tuple[int, dict[bytes, bytes], bytes]]:
    """Send ``requests`` (or ``raw`` bytes) on one connection; return every response."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    conn = h11.Connection(h11.CLIENT)
    answers = []
    async with stream:
        if raw:
            await stream.send_all(raw)
        for request in requests or [None]:
            if request is not None:
                await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
            status, headers, body = 0, {}, b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    status, headers = event.status_code, dict(event.headers)
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
            answers.append((status, headers, body))
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
    return answers


def get(target: str, method: str = "GET") -> h11.Request:
    return h11.Request(method=method, target=target, headers=[("Host", "proxy")])
