"""A minimal keep-alive HTTP/1.1 stand-in OpenAI server for benchmarks (fixed answers, no parsing
of bodies): fast enough that the client under measurement, not the server, is what is timed."""

from __future__ import annotations

import asyncio
import socket

NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


def reply(body: bytes) -> bytes:
    """A complete 200 response carrying `body` as JSON."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: keep-alive\r\n\r\n"
        + body
    )


#: (path suffix, full response) pairs; the first suffix the request path ends with answers
Routes = tuple[tuple[str, bytes], ...]


def next_request(buffer: bytes) -> tuple[str, bytes, bytes] | None:
    """(path, body, what follows) of the first whole HTTP/1.1 request in `buffer`, or None
    until all of it has arrived."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].decode("latin-1")
    length = 0
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if len(buffer) < end + 4 + length:
        return None
    return head.split(" ", 2)[1], buffer[end + 4 : end + 4 + length], buffer[end + 4 + length :]


class _Http(asyncio.Protocol):
    def __init__(self, routes: Routes) -> None:
        self.routes = routes
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (request := next_request(self.buffer)) is not None:
            path, _, self.buffer = request
            answer = next((body for suffix, body in self.routes if path.endswith(suffix)), NOT_FOUND)
            self.transport.write(answer)  # type: ignore[attr-defined]


def serve(port: int, routes: Routes) -> None:
    """Serve `routes` on 127.0.0.1:`port` until the process is stopped (a process target)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Http(routes), "127.0.0.1", port, reuse_address=True)
        await server.serve_forever()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
