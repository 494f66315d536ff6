"""The demo's gate answers exactly N completions, holds the rest, and forwards the rest."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specpilot.demo.gate import HoldingGate

HOLD_CHECK_S = 0.5


class Upstream(BaseHTTPRequestHandler):
    """An engine that answers 500 for a body asking to fail, else echoes the body."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(200, b'{"data": [{"id": "tiny"}]}')

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(500 if b"fail" in body else 200, body)

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def upstream_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def post(url: str, body: dict[str, str], timeout_s: float = 10.0) -> tuple[int, bytes]:
    port = int(url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("POST", "/v1/chat/completions", body=json.dumps(body))
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_answers_n_holds_the_rest_and_drops_them_on_open(upstream_url: str) -> None:
    with HoldingGate(upstream_url, answer_first=2).serving() as gate:
        assert [post(gate.url, {"row": str(i)})[0] for i in range(2)] == [200, 200]
        held: list[BaseException | tuple[int, bytes]] = []
        waiter = threading.Thread(target=lambda: _post_into(held, gate.url, {"row": "held"}))
        waiter.start()
        waiter.join(HOLD_CHECK_S)
        assert waiter.is_alive() and held == []  # no answer while the gate holds
        gate.open()
        waiter.join(10)
        assert not waiter.is_alive()
        assert isinstance(held[0], (http.client.RemoteDisconnected, ConnectionError))  # dropped
        assert post(gate.url, {"row": "after"}) == (200, b'{"row": "after"}')


def test_a_failed_answer_does_not_use_up_a_slot(upstream_url: str) -> None:
    with HoldingGate(upstream_url, answer_first=1).serving() as gate:
        assert post(gate.url, {"row": "fail"})[0] == 500
        assert post(gate.url, {"row": "ok"})[0] == 200


def test_model_list_is_never_held(upstream_url: str) -> None:
    with HoldingGate(upstream_url, answer_first=0).serving() as gate:
        port = int(gate.url.rsplit(":", 1)[1])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/v1/models")
        assert connection.getresponse().read() == b'{"data": [{"id": "tiny"}]}'
        connection.close()


def _post_into(out: list[BaseException | tuple[int, bytes]], url: str, body: dict[str, str]) -> None:
    try:
        out.append(post(url, body))
    except (http.client.HTTPException, OSError) as err:
        out.append(err)
