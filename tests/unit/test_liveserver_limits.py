"""The live page's server (testbed/report/live/liveserver.py) shares the measuring process's file descriptors with
any local user who connects: connections past its cap are closed at once, an idle one after its timeout,
and a viewer's stream of events, a request being answered, is not idle however quiet it is."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest

from testbed.report.live.liveserver import LiveServer

CAP = 4
TIMEOUT_S = 0.5


@pytest.fixture
def server(tmp_path):
    """The real server on 127.0.0.1, on an empty folder (it waits for a session), with a small cap and timeout."""
    live = LiveServer(tmp_path, max_connections=CAP, idle_timeout_s=TIMEOUT_S)
    live.start()
    yield live
    live.stop(drain_s=0)


def _connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (end of file, or a reset) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _page_status(server: LiveServer, within_s: float = 5.0) -> int:
    """The page's status, asked again while connections being closed still count against the cap."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with urllib.request.urlopen(server.url, timeout=5) as response:
                return response.status
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_connections_past_the_cap_are_closed_and_the_page_answers_after(tmp_path):
    live = LiveServer(tmp_path, max_connections=CAP, idle_timeout_s=30)  # only the cap closes them here
    live.start()
    try:
        held = [_connect(live) for _ in range(CAP)]
        extra = [_connect(live) for _ in range(3)]
        assert all(_closed_within(sock, 2) for sock in extra)
        assert not any(_closed_within(sock, 0.1) for sock in held)
        for sock in held + extra:
            sock.close()
        assert _page_status(live) == 200
    finally:
        live.stop(drain_s=0)


def test_a_connection_that_sends_nothing_is_closed_after_the_timeout(server):
    sock = _connect(server)
    started = time.monotonic()
    assert _closed_within(sock, 5)
    assert TIMEOUT_S * 0.8 <= time.monotonic() - started < 4
    sock.close()
    assert _page_status(server) == 200


def test_a_half_sent_request_is_closed_after_the_timeout(server):
    sock = _connect(server)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line that ends it
    assert _closed_within(sock, 5)
    sock.close()


def test_a_quiet_stream_of_events_is_not_idle(server):
    """The stream of an empty folder sends nothing for a long while: it stays open past the timeout."""
    sock = _connect(server)
    sock.sendall(f"GET /events?token={server.token} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    assert not _closed_within(sock, 4 * TIMEOUT_S)
    sock.close()


def test_a_viewers_stream_gets_the_end_though_the_feed_never_settles(tmp_path):
    """The session's end (stop's last read) reaches an open stream even when the feed is not settled
    (a run's host check still awaited): a periodic read after the last one must not take the end back."""
    live = LiveServer(tmp_path, idle_timeout_s=30)
    live.start()
    sock = _connect(live)
    sock.sendall(f"GET /events?token={live.token} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    time.sleep(0.5)  # the stream is open and waiting
    live.stop(drain_s=5)
    received = b""
    sock.settimeout(2)
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except TimeoutError:
        pass
    sock.close()
    assert b"event: end" in received, received
    live._poll()  # a periodic read after the last: the end stays
    assert live.history.finished
