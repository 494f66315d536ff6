"""A pass-through in front of the demo's server that stops answering after N rows.

The demo proves resume-after-SIGKILL, so the kill has to land while the job is
unfinished. Racing a ledger poll against a fast CPU engine does not guarantee that
(50 short answers can all finish between two polls), so the first run talks to the
engine through this gate: it forwards the first `answer_first` successful chat
completions, then holds every later request unanswered. The job then has exactly
that many rows done and requests in flight, whatever the machine's speed; the demo
SIGKILLs it there, opens the gate and runs the same command again. The held
requests belong to the killed job, so opening the gate drops them unanswered.

Everything else (model list, health, failed answers) passes through untouched.
"""

from __future__ import annotations

import http.client
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

COMPLETIONS_PATH = "/v1/chat/completions"
UPSTREAM_TIMEOUT_S = 600.0
# Headers that describe one hop's connection, not the answer (RFC 9110 section 7.6.1).
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client killed mid-answer is the point of the demo, not an error to print."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class HoldingGate:
    """Forwards to `upstream`; holds chat completions beyond the first `answer_first`."""

    def __init__(self, upstream: str, answer_first: int) -> None:
        parts = urlsplit(upstream)
        self._upstream_host, self._upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self._limit: int | None = answer_first
        self._admitted = 0
        self._lock = threading.Lock()
        self._opened = threading.Event()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def open(self) -> None:
        """Answer every new request; the held ones end unanswered (their job is dead)."""
        with self._lock:
            self._limit = None
        self._opened.set()

    @contextmanager
    def serving(self) -> Iterator[HoldingGate]:
        thread = threading.Thread(target=self._server.serve_forever, name="demo-gate", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._opened.set()  # held requests end unanswered
            self._server.shutdown()
            self._server.server_close()
            thread.join()

    def _admit(self) -> bool:
        """True to forward now; False once a held request is let go unanswered."""
        with self._lock:
            if self._limit is None or self._admitted < self._limit:
                self._admitted += 1
                return True
        self._opened.wait()
        return False

    def _unadmit(self) -> None:
        """A failed answer does not count: the row is retried and needs its own slot."""
        with self._lock:
            self._admitted -= 1

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection(
            self._upstream_host, self._upstream_port, timeout=UPSTREAM_TIMEOUT_S
        )
        try:
            upstream.request(method, path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            upstream.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the job's client expects

            def do_GET(self) -> None:
                self._relay(counted=False)

            def do_POST(self) -> None:
                self._relay(counted=self.path.startswith(COMPLETIONS_PATH))

            def _relay(self, *, counted: bool) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if counted and not gate._admit():
                    self.close_connection = True
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS | {"host"}}
                try:
                    status, answer_headers, answer = gate._forward(self.command, self.path, headers, body)
                except OSError as err:
                    status, answer_headers = HTTPStatus.BAD_GATEWAY, []
                    answer = f"demo gate: upstream unreachable: {err}".encode()
                if counted and status != HTTPStatus.OK:
                    gate._unadmit()
                self.send_response(status)
                for name, value in answer_headers:
                    if name.lower() not in HOP_HEADERS:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: object) -> None:
                """The job's own log says what happened; the gate stays quiet."""

        return Handler
