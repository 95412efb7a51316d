"""A response leaves ``aioge serve`` in one transport write (``server.OneWrite``): uvicorn's
protocol, as ``uvicorn_config`` sets it up, driven with a transport that records its writes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("httptools")

from aioge.server import uvicorn_config  # noqa: E402


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body) + 3).encode())]})
    await send({"type": "http.response.body", "body": b"ok:" + body})


async def _exchange(request: bytes, *, more: bytes = b"") -> list[bytes]:
    from uvicorn.server import ServerState

    config = uvicorn_config(_app, "127.0.0.1", 8000)
    config.load()
    transport = _Transport()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(transport)
    protocol.data_received(request)
    for _ in range(20):
        await asyncio.sleep(0)
    if more:  # the body after an Expect: 100-continue, once the 100 is out
        protocol.data_received(more)
        for _ in range(20):
            await asyncio.sleep(0)
    protocol.connection_lost(None)
    return transport.writes


def test_a_response_goes_out_in_one_write() -> None:
    writes = asyncio.run(_exchange(b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\nhi"))
    assert len(writes) == 1, writes  # head and body together: uvicorn alone writes them apart
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\nok:hi")


def test_two_pipelined_requests_get_one_write_each_in_order() -> None:
    one = b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\n\r\n"
    writes = asyncio.run(_exchange(one + b"a" + one + b"b"))
    assert [w[-4:] for w in writes] == [b"ok:a", b"ok:b"]


def test_a_100_continue_is_not_held_back() -> None:
    head = b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n"
    writes = asyncio.run(_exchange(head, more=b"yo"))
    assert writes[0] == b"HTTP/1.1 100 Continue\r\n\r\n"  # sent before the body came, on its own
    assert len(writes) == 2 and writes[1].endswith(b"ok:yo")
