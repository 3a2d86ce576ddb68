"""Header, body, and keep-alive timeouts (short values, bounded waits)."""

import time

import pytest

from conftest import free_port, runtime_section
from util_http import Closed, Conn, request


@pytest.fixture(scope="module")
def srv(engine, ringx_module):
    p = free_port()
    cfg = runtime_section(engine) + f"""
[http]
client_header_timeout = "1s"
client_body_timeout = "1s"
keepalive_timeout = "1s"
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok" }}
"""
    r = ringx_module.make(cfg, engine=engine, name=f"timeouts-{engine}")
    r.port = p
    yield r
    r.stop()


def test_partial_head_408_then_close(srv):
    with Conn(srv.port, timeout=6) as c:
        t0 = time.monotonic()
        c.send(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Partial: yes")
        try:
            r = c.read_response(timeout=3.5)
        except TimeoutError:
            pytest.fail("no 408 within 3.5 s of a partial head (client_header_timeout=1s)")
        elapsed = time.monotonic() - t0
        assert r.status == 408, r
        assert 0.5 <= elapsed <= 3.5, f"408 after {elapsed:.2f}s with client_header_timeout=1s"
        assert c.wait_closed(2), "connection not closed after 408"


def test_slow_head_trickle_still_times_out(srv):
    """Sending a byte every 0.3 s must not extend the header timeout forever."""
    with Conn(srv.port, timeout=6) as c:
        t0 = time.monotonic()
        closed_or_408 = False
        for i in range(13):  # at most ~4 s
            try:
                c.send(b"X")
            except OSError:
                closed_or_408 = True
                break
            time.sleep(0.3)
            if c.wait_closed(0.01) or c.buf:
                closed_or_408 = True
                break
        elapsed = time.monotonic() - t0
        assert closed_or_408, "trickled request head was never timed out"
        assert elapsed <= 4.0, f"header timeout took {elapsed:.1f}s"


def test_partial_body_times_out(srv):
    with Conn(srv.port, timeout=6) as c:
        c.send(request("POST", "/", headers={"Content-Length": "100"}) + b"only-part")
        t0 = time.monotonic()
        try:
            r = c.read_response(timeout=3.5)
            assert r.status in (408, 400), r
        except Closed:
            pass  # closing without a response is acceptable for a body timeout
        except TimeoutError:
            pytest.fail("no response and no close 3.5 s after a stalled body (client_body_timeout=1s)")
        assert c.wait_closed(3)
        assert time.monotonic() - t0 <= 4.0


def test_idle_keepalive_closed(srv):
    with Conn(srv.port, timeout=6) as c:
        c.send(request("GET", "/"))
        assert c.read_response().status == 200
        t0 = time.monotonic()
        assert c.wait_closed(3.0), "idle keep-alive connection not closed within keepalive_timeout + 2s"
        assert time.monotonic() - t0 >= 0.5, "idle connection closed much earlier than keepalive_timeout"
        assert c.buf == b"", f"server sent bytes on idle close: {c.buf!r}"


def test_idle_connection_without_request_closed(srv):
    with Conn(srv.port, timeout=6) as c:
        assert c.wait_closed(3.0), "connection that never sent a byte was never closed"


def test_keepalive_activity_resets_timer(srv):
    with Conn(srv.port, timeout=6) as c:
        for _ in range(4):  # 4 x 0.6 s > 1 s total, but each gap < keepalive_timeout
            c.send(request("GET", "/"))
            assert c.read_response().status == 200
            time.sleep(0.6)
        c.send(request("GET", "/"))
        assert c.read_response().status == 200
