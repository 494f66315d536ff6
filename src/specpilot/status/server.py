"""Serving the status page and `/metrics`: inside `generate --serve-status`, or by `specpilot view`.

The socket is bound before the job starts, so an address in use is a one-line error
before anything is sent or written. Ledger reads run in a worker thread (a full scan
of a 900k-row ledger takes a while and must not stall the dispatcher's event loop) and
are shared by requests arriving within `LEDGER_REFRESH_S` of each other (or within
`READ_COST_FACTOR` times the last read's duration, so a huge ledger is not scanned
back to back while the job runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import socket
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from aiohttp import web

from specpilot.errors import UserError
from specpilot.status import DEFAULT_ADDR
from specpilot.status.ledger_view import LedgerSnapshot, read_snapshot
from specpilot.status.live import SAMPLE_INTERVAL_S, LiveJob, LiveRecorder, LiveView
from specpilot.status.metrics import CONTENT_TYPE, exposition
from specpilot.status.page import PageInput, render_page
from specpilot.taskgroup import beside

LEDGER_REFRESH_S = 2.0
READ_COST_FACTOR = 5.0


def parse_addr(addr: str, flag: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (127.0.0.1) or `PORT`; IPv6 as `[::1]:PORT`."""
    host, sep, port_text = addr.rpartition(":")
    if not sep:
        host, port_text = "", addr
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        raise UserError(
            f"{addr!r} is not an address",
            field=flag,
            fix=f"give HOST:PORT with a port up to 65535, e.g. {DEFAULT_ADDR}",
        ) from None
    return host, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(addr: str, *, public: bool, flag: str) -> socket.socket:
    """A listening socket on `addr`; anything but loopback needs `public` (and warns)."""
    host, port = parse_addr(addr, flag)
    if not _is_loopback(host):
        if not public:
            raise UserError(
                f"{host} is reachable from other machines, and the page shows prompt ids and errors",
                field=flag,
                fix=f"bind 127.0.0.1 (the default), or add --status-public to serve on {host}",
            )
        print(
            f"warning: serving job status on {host}:{port}: anyone who can reach it sees prompt ids "
            "and error texts",
            file=sys.stderr,
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        sock.listen(64)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise UserError(
                f"{host}:{port} is already in use",
                field=flag,
                fix=f"pick a free port, e.g. {flag} {host}:{port + 1}, or stop what listens there",
            ) from None
        raise UserError(
            f"cannot listen on {host}:{port}: {err.strerror}",
            field=flag,
            fix=f"give another address to {flag}",
        ) from None
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


class StatusSource:
    """The page's data: a cached ledger snapshot, plus the live job's view if there is one."""

    def __init__(self, directory: Path, recorder: LiveRecorder | None = None) -> None:
        self.directory = directory
        self.recorder = recorder
        self._snapshot: LedgerSnapshot | None = None
        self._read_at = 0.0
        self._reuse_s = LEDGER_REFRESH_S
        self._lock = asyncio.Lock()

    async def read(self) -> tuple[LedgerSnapshot, LiveView | None]:
        async with self._lock:
            if self._snapshot is None or time.monotonic() - self._read_at >= self._reuse_s:
                started = time.monotonic()
                self._snapshot = await asyncio.to_thread(read_snapshot, self.directory)
                self._read_at = time.monotonic()
                self._reuse_s = max(LEDGER_REFRESH_S, READ_COST_FACTOR * (self._read_at - started))
            snapshot = self._snapshot
        return snapshot, self.recorder.view() if self.recorder is not None else None


def host_names_bound_address(
    host_header: str | None, bound: tuple[str, int], names: Sequence[str] = ()
) -> bool:
    """Whether a request's `Host` names the address the page is bound to.

    A page a browser loads from elsewhere can point its own name at 127.0.0.1 (DNS
    rebinding); its requests then carry that name, never the bound address. So `Host`
    must be the bound IP (any IP literal when bound to all addresses), `localhost` on
    loopback, or one of `names` (`--status-host`), with the bound port.
    """
    split = _host_and_port(host_header)
    if split is None:
        return False
    name, port = split
    bound_host, bound_port = bound
    if (port or 80) != bound_port:
        return False
    return _names_host(name, bound_host, names)


def _host_and_port(host_header: str | None) -> tuple[str, int | None] | None:
    """A `Host` header's name (lower case) and port; None for no header or one that is no host."""
    if not host_header:
        return None
    try:
        parts = urllib.parse.urlsplit(f"//{host_header}")
        port = parts.port
    except ValueError:
        return None
    return parts.hostname or "", port


def _names_host(name: str, bound_host: str, names: Sequence[str]) -> bool:
    """Whether `name` is one of `names`, `localhost` on loopback, or the bound IP (any IP
    literal when bound to all addresses)."""
    if name in (n.lower() for n in names):
        return True
    if name == "localhost":
        return _is_loopback(bound_host)
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    wildcard = ipaddress.ip_address(bound_host).is_unspecified
    return wildcard or address == ipaddress.ip_address(bound_host)


def make_app(
    source: StatusSource, bound: tuple[str, int] | None = None, names: Sequence[str] = ()
) -> web.Application:
    """The page and /metrics; with `bound`, only for requests whose Host names that address (421)."""

    @web.middleware
    async def check_host(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if bound is not None and not host_names_bound_address(request.headers.get("Host"), bound, names):
            return web.Response(status=421, text="Host does not name this server's address\n")
        return await handler(request)

    async def page(request: web.Request) -> web.Response:
        try:
            snapshot, live = await source.read()
        except UserError as err:  # e.g. a writer holds the ledger exclusively for now
            return web.Response(status=503, text=str(err))
        body = render_page(PageInput(source.directory.name or str(source.directory), snapshot, live))
        return web.Response(text=body, content_type="text/html")

    async def metrics(request: web.Request) -> web.Response:
        try:
            snapshot, live = await source.read()
        except UserError as err:
            return web.Response(status=503, text=str(err))
        return web.Response(body=exposition(snapshot, live), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application(middlewares=[check_host])
    app.router.add_get("/", page)
    app.router.add_get("/metrics", metrics)
    return app


@contextlib.asynccontextmanager
async def serving(
    sock: socket.socket, source: StatusSource, names: Sequence[str] = ()
) -> AsyncIterator[None]:
    host, port = sock.getsockname()[:2]
    runner = web.AppRunner(make_app(source, (host, port), names), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield
    finally:
        await runner.cleanup()


def watch_job(
    sock: socket.socket, directory: Path, names: Sequence[str] = ()
) -> Callable[[LiveJob], contextlib.AbstractAsyncContextManager[object]]:
    """A `JobWatcher` for run_generate: serves the page while the job runs."""

    @contextlib.asynccontextmanager
    async def watch(job: LiveJob) -> AsyncIterator[object]:
        recorder = LiveRecorder(job)

        async def sample_forever() -> None:
            while True:
                recorder.sample()
                await asyncio.sleep(SAMPLE_INTERVAL_S)

        # a sampler that fails would leave the page's numbers frozen: it stops the job instead
        async with (
            beside(sample_forever, "the live page's sampler"),
            serving(sock, StatusSource(directory, recorder), names),
        ):
            yield None

    return watch


async def serve_view(sock: socket.socket, directory: Path, names: Sequence[str] = ()) -> None:
    """`specpilot view`: serve the ledger's numbers until interrupted."""
    async with serving(sock, StatusSource(directory), names):
        await asyncio.Event().wait()
