"""The client connection after a proxied request failed, against nginx beside ringx.

nginx keeps a keep-alive connection after a 502 or 504 page (its own, or an `error_page`
file replacing it) once nothing of the request is left to read; ringx does the same:
- an upstream that refuses the connection: 502, and the next request on the connection is
  served (also pipelined: both requests in one write, both answered in order);
- an `error_page` file page for the 502: the same;
- a request with a body that all arrived: kept; HTTP/1.0 with `Connection: keep-alive`:
  kept, and said so; `Connection: close` or HTTP/1.0 without keep-alive: closed;
- an upstream's error taken by `proxy_intercept_errors`: kept after its page for a 502 or
  503, closed after a 500's (nginx never keeps a connection after a 400, 413, 414, 500 or
  501, whatever page replaces it);
- a failure met while the request's input is still being processed (no connection to the
  upstream could even start): the connection closes after the answer, and never stalls.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_upstream_failure_keepalive.py
"""

from __future__ import annotations

import os
import socket

import pytest

from conftest import free_port, runtime_section
from nginx_peer import NginxPeer
from origin_server import Origin


def _dead_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def origin():
    o = Origin()
    for code in (500, 502, 503):
        o.route(f"/icpt/{code}", status=code, body=b"origin says %d\n" % code)
    yield o
    o.close()


@pytest.fixture(scope="module", params=["nginx", "ringx"])
def peer(request, origin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"ka-{request.param}")
    (tmp / "www").mkdir()
    (tmp / "www" / "down.html").write_text("we are down\n")
    dead = _dead_port()
    port = free_port()
    if request.param == "nginx":
        n = NginxPeer(tmp, f"""
    server {{
        listen 127.0.0.1:{port};
        location /plain/ {{ proxy_pass http://127.0.0.1:{dead}; }}
        location /paged/ {{ proxy_pass http://127.0.0.1:{dead}; error_page 502 /down.html; }}
        location = /down.html {{ root {tmp}/www; }}
        location /icpt/ {{
            proxy_pass http://{origin.addr}; proxy_intercept_errors on;
            error_page 500 502 503 /down.html;
        }}
    }}
""", port)
        yield port
        n.stop()
        return
    r = request.getfixturevalue("ringx_module").make(runtime_section(None) + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/plain/"
  proxy_pass = "http://127.0.0.1:{dead}"
  [[server.location]]
  path = "/paged/"
  proxy_pass = "http://127.0.0.1:{dead}"
  error_page = {{ "502" = "/down.html" }}
  [[server.location]]
  path = "/down.html"
  exact = true
  root = "{tmp}/www"
  [[server.location]]
  path = "/icpt/"
  proxy_pass = "http://{origin.addr}"
  proxy_intercept_errors = true
  error_page = {{ "500 502 503" = "/down.html" }}
""", name="keepalive")
    yield port
    r.stop()


def _responses(sock: socket.socket, n: int) -> list[tuple[int, dict, bytes]]:
    """Reads `n` responses (Content-Length framed) from `sock`; then whether it closed."""
    f = sock.makefile("rb")
    out = []
    for _ in range(n):
        status = int(f.readline().split()[1])
        headers = {}
        while (line := f.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        out.append((status, headers, f.read(int(headers.get("content-length", 0)))))
    return out


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(1)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def _ask(port: int, data: bytes, n: int):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        got = _responses(s, n)
        return got, _closed(s)


def _get(path: str, extra: str = "", version: str = "1.1") -> bytes:
    return f"GET {path} HTTP/{version}\r\nHost: x\r\n{extra}\r\n".encode()


@pytest.mark.parametrize("path,body", [("/plain/x", None), ("/paged/x", b"we are down\n")])
def test_the_connection_goes_on_after_a_502(peer, path, body):
    got, closed = _ask(peer, _get(path), 1)
    assert got[0][0] == 502 and got[0][1].get("connection") != "close", got
    if body is not None:
        assert got[0][2] == body
    # The same connection serves the next request.
    with socket.create_connection(("127.0.0.1", peer), timeout=10) as s:
        for _ in range(3):
            s.sendall(_get(path))
            (status, headers, page), = _responses(s, 1)
            assert status == 502 and headers.get("connection") != "close", headers
        assert not _closed(s)


def test_pipelined_requests_after_a_502_are_answered_in_order(peer):
    got, closed = _ask(peer, _get("/plain/a") + _get("/paged/b") + _get("/plain/c"), 3)
    assert [g[0] for g in got] == [502, 502, 502]
    assert got[1][2] == b"we are down\n"
    assert not closed


def test_a_request_whose_body_all_arrived_keeps_the_connection(peer):
    post = (b"POST /plain/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    got, closed = _ask(peer, post + _get("/paged/y"), 2)
    assert [g[0] for g in got] == [502, 502] and not closed, got


@pytest.mark.parametrize("data,kept", [
    (_get("/plain/x", "Connection: close\r\n"), False),
    (_get("/plain/x", version="1.0"), False),
    (_get("/plain/x", "Connection: keep-alive\r\n", version="1.0"), True),
])
def test_the_client_decides_whether_the_connection_stays(peer, data, kept):
    got, closed = _ask(peer, data, 1)
    assert got[0][0] == 502
    assert closed == (not kept), got
    if kept:
        assert got[0][1].get("connection", "").lower() == "keep-alive", got


@pytest.mark.parametrize("code,kept", [(502, True), (503, True), (500, False)])
def test_an_intercepted_error_keeps_the_connection_unless_it_is_a_500(peer, code, kept):
    got, closed = _ask(peer, _get(f"/icpt/{code}"), 1)
    assert (got[0][0], got[0][2]) == (code, b"we are down\n"), got
    assert closed == (not kept), got
    assert (got[0][1].get("connection") == "close") == (not kept), got


@pytest.fixture(scope="module")
def at_once(ringx_module, origin, tmp_path_factory):
    """A ringx whose upstream fails while the request is still being read: `bind = "client"`
    with a client on ::1 and a server on 127.0.0.1 (no connection can even start)."""
    if os.geteuid() != 0:
        pytest.skip('bind = "client" needs CAP_NET_ADMIN (IP_TRANSPARENT): run as root')
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here ({e})")
    www = tmp_path_factory.mktemp("ka-at-once")
    (www / "ok.html").write_text("ok\n")
    port = free_port()
    r = ringx_module.make(runtime_section(None) + f"""
[[upstream]]
name = "far"
servers = ["{origin.addr}"]
bind = "client"

[[server]]
listen = ["[::1]:{port}"]
  [[server.location]]
  path = "/plain/"
  proxy_pass = "far"
  [[server.location]]
  path = "/paged/"
  proxy_pass = "far"
  error_page = {{ "502" = "/ok.html" }}
  [[server.location]]
  path = "/fb/"
  proxy_pass = "far"
  error_page = {{ "502" = "= @denied" }}
  [[server.location]]
  path = "@denied"
  proxy_pass = "http://{origin.addr}"
  access = ["deny all"]
  [[server.location]]
  path = "/ok.html"
  exact = true
  root = "{www}"
""", name="at-once")
    yield port
    r.stop()


@pytest.mark.parametrize("path,status", [("/plain/x", 502), ("/paged/x", 502), ("/fb/x", 403)])
def test_a_failure_met_while_the_input_is_read_closes_and_never_stalls(at_once, path, status):
    """Two pipelined requests whose upstream fails at once (inside the input's processing):
    the first is answered with `Connection: close` (a 502, its page, or the fallback's own
    answer written at once) and the connection closes; nothing waits for a timeout."""
    with socket.create_connection(("::1", at_once), timeout=5) as s:
        s.sendall(_get(path) * 2)
        got = _responses(s, 1)
        assert got[0][0] == status and got[0][1].get("connection") == "close", got
        assert _closed(s), got
