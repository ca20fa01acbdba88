"""The live page's server: ``testbed watch DIR`` and ``--live``.

It listens on loopback only (a remote host or the lab VM is reached through the ``ssh -L`` line it
prints), and answers only requests that carry the random token of the URL it prints: the page and
its stream are refused without it (HTTP 403). One feed (testbed/report/live/livefeed.py) reads the session
folder four times a second whatever the number of viewers; each viewer gets every record from the
start (a tab opened late draws the whole run) and then each new one, as Server-Sent Events whose
data are the records as JSON, one per line. A viewer that closes its tab ends its own stream only.
A finished session is replayed at ``speed`` times the pace it ran at (each run's records released by
their time on the run's clock); a running one is streamed as it grows.

Tornado serves it (already a dependency through Dask and Jupyter): an event loop that holds many
long-lived streams on one thread, in a daemon thread beside the session it watches. Any local user can
connect to the port, and the server shares the measuring process's file descriptors: it holds at most
:data:`MAX_CONNECTIONS` connections at once (one more is closed as soon as it is accepted) and closes a
connection that has not sent a whole request within :data:`IDLE_TIMEOUT_S` (a keep-alive one between
requests too). A stream of events is a request being answered, not an idle connection: it counts
against the cap but lasts as long as its viewer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import tornado.httpserver
import tornado.ioloop
import tornado.iostream
import tornado.netutil
import tornado.web

from testbed.guest import shelllive
from testbed.report.live.livefeed import SessionFeed, finished, newest_session

STATIC = Path(__file__).with_name("page")
#: how often the feed reads the session folder, and a stream sends what is new
POLL_S = 0.25
#: a replayed run's first records wait this long after the run before it (the page shows the change)
RUN_GAP_S = 0.5
#: how long a live session's end waits for its viewers' streams to send their last records
DRAIN_S = 10.0
#: connections held at once (a browser opens about 6 to a host; every viewer's stream is one of them)
MAX_CONNECTIONS = 64
#: a connection that has not sent a whole request's headers (or body) within this long is closed
IDLE_TIMEOUT_S = 5.0
#: the most a request may send (the page takes only GETs), and a connection's read buffer
MAX_REQUEST_BYTES = 64 << 10
MAX_BUFFER_BYTES = 1 << 20


@dataclass
class _History:
    """Every record so far, in order, and whether the session has finished."""

    records: list
    finished: bool = False
    #: the streams still sending (a session's end waits for them to send their last records)
    streaming: int = 0


class _Authorized(tornado.web.RequestHandler):
    def prepare(self) -> None:
        given = self.get_query_argument("token", "")
        if not hmac.compare_digest(given.encode(), self.application.settings["token"].encode()):
            raise tornado.web.HTTPError(403, reason="wrong or missing token: open the URL testbed printed")


class _Page(_Authorized):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.write((STATIC / "live.html").read_text())


class _NoIcon(tornado.web.RequestHandler):
    def get(self) -> None:
        self.set_status(204)  # no favicon: a browser asks for one


class _Events(_Authorized):
    async def get(self) -> None:
        history: _History = self.application.settings["history"]
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-store")
        history.streaming += 1
        try:
            async for batch in _batches(history, self.application.settings["speed"]):
                self.write("".join(f"data: {_json(r)}\n\n" for r in batch))
                await self.flush()
            self.write("event: end\ndata: {}\n\n")
            await self.flush()
        except tornado.iostream.StreamClosedError:
            return  # the viewer closed its tab: only its own stream ends
        finally:
            history.streaming -= 1


def _json(record: dict) -> str:
    """A record as one line of JSON; a number that is not one (NaN, infinity) as null, which JSON has."""
    try:
        return json.dumps(record, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(record), separators=(",", ":"))


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


async def _batches(history: _History, speed: float | None):
    """The records for one viewer, from the first, in batches as they are due: as soon as they are
    read from a running session; at ``speed`` times their pace from a finished one (each run's flow
    and queue records by their time on the run's clock, a run :data:`RUN_GAP_S` after the one before)."""
    index, run, base = 0, None, 0.0
    while True:
        batch = []
        while index < len(history.records):
            record = history.records[index]
            t = record.get("t") if speed else None
            if t is not None:
                if record.get("run") != run:
                    run, base = record.get("run"), time.monotonic() + RUN_GAP_S
                due = base + t / speed
                if due > time.monotonic():
                    break
            batch.append(record)
            index += 1
        if batch:
            yield batch
        elif history.finished and index >= len(history.records):
            return
        await asyncio.sleep(POLL_S / 2 if speed else POLL_S)


class _CappedServer(tornado.httpserver.HTTPServer):
    """An HTTP server that holds at most ``max_connections`` connections: the next is closed when accepted."""

    def initialize(self, *args, max_connections: int = MAX_CONNECTIONS, **kwargs) -> None:
        super().initialize(*args, **kwargs)
        self.max_connections = max_connections
        self.connections_open = 0

    def handle_stream(self, stream: tornado.iostream.IOStream, address: tuple) -> None:
        if self.connections_open >= self.max_connections:
            stream.close()
            return
        self.connections_open += 1
        super().handle_stream(stream, address)

    def on_close(self, server_conn: object) -> None:
        self.connections_open -= 1
        super().on_close(server_conn)


class LiveServer:
    """The page for ``folder`` (a session, or a results folder whose newest session is followed), served
    on 127.0.0.1 from a thread until :meth:`stop`; at most ``max_connections`` at once, an idle one closed
    after ``idle_timeout_s``."""

    def __init__(
        self,
        folder: Path,
        speed: float | None = None,
        port: int = 0,
        since: float | None = None,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ):
        self.feed = SessionFeed(folder, since=since)
        self.history = _History([])
        self.token = secrets.token_urlsafe(16)
        self.speed = speed
        self.port = port
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self._loop: tornado.ioloop.IOLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def tunnel_hint(self) -> str:
        """How to open the page from another machine: the ssh line for this host."""
        return (
            f"from another machine: ssh -N -L {self.port}:127.0.0.1:{self.port} {socket.gethostname()}, "
            "then open the same URL there"
        )

    def start(self) -> str:
        self._thread = threading.Thread(target=self._serve, name="live-page", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10)
        return self.url

    def _serve(self) -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        app = tornado.web.Application(
            [
                (r"/", _Page),
                (r"/events", _Events),
                (r"/favicon.ico", _NoIcon),
                (r"/static/(.*)", tornado.web.StaticFileHandler, {"path": str(STATIC)}),
            ],
            token=self.token,
            history=self.history,
            speed=self.speed,
        )
        # idle_connection_timeout bounds the wait for a request's headers only: a stream being sent is not idle
        server = _CappedServer(
            app,
            max_connections=self.max_connections,
            idle_connection_timeout=self.idle_timeout_s,
            body_timeout=self.idle_timeout_s,
            max_buffer_size=MAX_BUFFER_BYTES,
            max_header_size=MAX_REQUEST_BYTES,
            max_body_size=MAX_REQUEST_BYTES,
        )
        sockets = tornado.netutil.bind_sockets(self.port, address="127.0.0.1")
        self.port = sockets[0].getsockname()[1]
        server.add_sockets(sockets)
        self._loop = tornado.ioloop.IOLoop.current()
        tornado.ioloop.PeriodicCallback(self._poll, POLL_S * 1000).start()
        self._poll()
        self._ready.set()
        self._loop.start()
        server.stop()

    def _poll(self, last: bool = False) -> None:
        self.history.records += self.feed.poll()
        # once finished, finished for good: a periodic poll after stop's last one found the feed not yet
        # settled (a run's host check still awaited) and took the end back, so a stream never sent it
        self.history.finished = self.history.finished or self.feed.settled or last

    def stop(self, drain_s: float = DRAIN_S) -> None:
        """A last read of the folder (the session's end), up to ``drain_s`` for every viewer's stream to
        send it and the stream's end (a loaded host may take more than a poll), then the server's end."""
        if self._loop is None:
            return
        self._loop.add_callback(self._poll, True)
        deadline = time.monotonic() + max(drain_s, 3 * POLL_S)
        time.sleep(3 * POLL_S)
        while self.history.streaming and time.monotonic() < deadline:
            time.sleep(POLL_S / 2)
        self._loop.add_callback(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)


@contextlib.contextmanager
def serving(results: Path, since: float):
    """``--live``: the page of the sessions a command makes under ``results`` while it runs."""
    server = LiveServer(results, since=since)
    url = server.start()
    print(f"live page: {url}\n{server.tunnel_hint()}", flush=True)
    try:
        yield server
    finally:
        server.stop()
        print("live page closed (the session's report has the same numbers)", flush=True)


@contextlib.contextmanager
def shell_page(folder: Path):
    """``testbed shell``'s page, served on the shell's plan folder while the shell is open; its URL left
    in the folder, where the shell's ``live`` command reads it (testbed.guest.shelllive)."""
    server = LiveServer(folder)
    url = server.start()
    (folder / shelllive.URL_FILE).write_text(f"{url}\n{server.tunnel_hint()}\n")
    try:
        yield server
    finally:
        server.stop(drain_s=0)


def watch(folder: Path, speed: float, port: int = 0) -> int:
    """``testbed watch FOLDER``: its page until Ctrl-C; a finished session replayed at ``speed``."""
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder: give a session folder or a results folder (testbed watch DIR)")
    if speed < 0:
        raise ValueError(f"--speed {speed}: give 0 (all at once) or a positive factor (1: as it ran)")
    session = newest_session(folder)
    replay = session is not None and finished(session)
    server = LiveServer(folder, speed=(speed or None) if replay else None, port=port)
    url = server.start()
    what = f"{session.name}, replayed at {speed:g}x" if replay else "live" if session else "waiting for a session"
    print(f"live page ({what}): {url}\n{server.tunnel_hint()}\nCtrl-C stops it", flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        server.stop(drain_s=0)  # a replay still pacing is not waited for
    return 0
