"""Trailer sections through the proxy (issue 36, point 5): fields that may never be trailers
(RFC 9110 §6.5.1: framing, routing, authentication, request modifiers, controls, content
format, and what the proxy alone writes) are dropped in both directions, over HTTP/2 and
HTTP/1.1; other fields (`x-checksum`, `grpc-status`) pass. Beside nginx 1.22, which passes no
request trailer on at all: an HTTP/2 request with trailers gets GOAWAY PROTOCOL_ERROR ("client
sent HEADERS frame with incorrect identifier"), an HTTP/1.1 chunked request reaches the
upstream de-chunked (Content-Length), its trailer section dropped.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_trailers.py
"""

from __future__ import annotations

import socket
import time

import pytest

from conftest import free_port, runtime_section
from nginx_peer import NginxPeer
from upstream_server import UpstreamServer

h2 = pytest.importorskip("h2", reason="Python h2 is not installed (tests/requirements.txt)")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402

# Sent as request trailers: each may not be a trailer, but x-checksum and grpc-status.
FORBIDDEN = [("host", "evil.test"), ("authorization", "Basic eDp5"),
             ("x-forwarded-for", "6.6.6.6"), ("content-length", "99"), ("te", "trailers"),
             ("cookie", "s=1"), ("expect", "100-continue"), ("trailer", "x-checksum"),
             ("x-real-ip", "6.6.6.6"), ("forwarded", "for=6.6.6.6"),
             ("x-ssl-client-verify", "SUCCESS"), ("if-none-match", "*"), ("range", "bytes=0-1")]
ALLOWED = [("x-checksum", "c1"), ("grpc-status", "0")]
ALLOWED_NAMES = {n for n, _ in ALLOWED}


class Site:
    pass


@pytest.fixture(scope="module")
def site(ringx_module, tmp_path_factory):
    up = UpstreamServer("up")
    s = Site()
    s.up, s.port = up, free_port()
    s.srv = ringx_module.make(runtime_section(None) + f"""
[[server]]
listen = ["127.0.0.1:{s.port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "http://{up.addr}"
""", name="trailers")
    s.n1, s.n2 = free_port(), free_port()
    s.nginx = NginxPeer(tmp_path_factory.mktemp("nginx"), f"""
server {{ listen 127.0.0.1:{s.n1}; listen 127.0.0.1:{s.n2} http2;
  location / {{ proxy_pass http://{up.addr}; proxy_http_version 1.1;
               proxy_request_buffering off; }} }}
""", s.n1)
    yield s
    s.nginx.stop()
    up.close()


def upstream_got(up: UpstreamServer, before: int, target: str, timeout: float = 10) -> dict | None:
    """The request for `target` the upstream recorded after its first `before` ones (None:
    none came)."""
    deadline = time.monotonic() + timeout
    while True:
        got = [r for r in up.requests[before:] if r["target"] == target]
        if got:
            return got[0]
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def h2_post(port: int, path: str, trailers) -> dict:
    """An h2c POST whose body ends with `trailers`: the response's status and trailers, or
    how the connection ended (GOAWAY, reset)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True,
                                                                    header_encoding="utf-8"))
    c.initiate_connection()
    c.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", path),
                       (":authority", "a.test"), ("te", "trailers")])
    c.send_data(1, b"body")
    c.send_headers(1, trailers, end_stream=True)
    s.sendall(c.data_to_send())
    out: dict = {"status": None, "trailers": None, "ended": None}
    deadline = time.monotonic() + 10
    try:
        while out["ended"] is None and time.monotonic() < deadline:
            data = s.recv(65536)
            if not data:
                out["ended"] = "closed"
                break
            for ev in c.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    out["status"] = int(dict(ev.headers)[":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.TrailersReceived):
                    out["trailers"] = list(ev.headers)
                elif isinstance(ev, h2.events.StreamEnded):
                    out["ended"] = "end"
                elif isinstance(ev, h2.events.StreamReset):
                    out["ended"] = f"reset {ev.error_code}"
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    out["ended"] = f"goaway {ev.error_code}"
            s.sendall(c.data_to_send())
    finally:
        s.close()
    return out


def chunked_exchange(port: int, request: bytes) -> bytes:
    """Sends a raw HTTP/1.1 request (Connection: close) and reads the response to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        out = b""
        while d := s.recv(65536):
            out += d
    return out


def names(fields) -> set[str]:
    return {n.lower() for n, _ in fields}


def test_h2_request_trailers_reach_the_upstream_without_forbidden_fields(site):
    before = len(site.up.requests)
    r = h2_post(site.port, "/h2/echo", ALLOWED[:1] + FORBIDDEN + ALLOWED[1:])
    assert (r["status"], r["ended"]) == (200, "end"), r
    got = upstream_got(site.up, before, "/h2/echo")
    assert got is not None, "the request reached the upstream"
    assert got["body_len"] == 4
    assert names(got["trailers"]) == ALLOWED_NAMES, got["trailers"]
    # nginx refuses the request (the connection) instead; nothing with trailers reaches the
    # upstream.
    before = len(site.up.requests)
    n = h2_post(site.n2, "/h2n/echo", ALLOWED[:1] + FORBIDDEN + ALLOWED[1:])
    assert n["ended"] == "goaway 1" or n["status"] is not None, n
    # Refused: nothing more to wait for; answered: the upstream has recorded it.
    got = upstream_got(site.up, before, "/h2n/echo", timeout=0 if n["status"] is None else 10)
    assert got is None or not names(got["trailers"]) - ALLOWED_NAMES, got


def test_http1_chunked_request_trailers_lose_forbidden_fields(site):
    section = "".join(f"{k}: {v}\r\n" for k, v in ALLOWED[:1] + FORBIDDEN + ALLOWED[1:])
    req = (b"POST /h1/echo HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n" + section.encode() + b"\r\n")
    for name, port in (("ringx", site.port), ("nginx", site.n1)):
        before = len(site.up.requests)
        resp = chunked_exchange(port, req)
        assert resp.startswith(b"HTTP/1.1 200"), (name, resp[:200])
        got = upstream_got(site.up, before, "/h1/echo")
        assert got is not None and got["body_len"] == 4, (name, got)
        sent = names(got["trailers"])
        assert not sent - ALLOWED_NAMES, (name, got["trailers"])
        if name == "ringx":
            assert sent == ALLOWED_NAMES, got["trailers"]


def test_response_trailers_lose_forbidden_fields(site):
    # HTTP/1.1 client: the chunked body as it came, its trailer section less what may not be
    # a trailer.
    resp = chunked_exchange(site.port, b"GET /x/bad-trailers HTTP/1.1\r\nHost: a.test\r\n"
                                       b"TE: trailers\r\nConnection: close\r\n\r\n")
    head, _, body = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" in head.lower(), resp
    assert body == b"5\r\nhello\r\n0\r\nX-Checksum: abc123\r\ngrpc-status: 0\r\n\r\n", body
    # HTTP/2 client: the same two as trailers.
    s = socket.create_connection(("127.0.0.1", site.port), timeout=10)
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True,
                                                                    header_encoding="utf-8"))
    c.initiate_connection()
    c.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":path", "/x/bad-trailers"),
                       (":authority", "a.test")], end_stream=True)
    s.sendall(c.data_to_send())
    trailers, ended = None, False
    deadline = time.monotonic() + 10
    while not ended and time.monotonic() < deadline:
        data = s.recv(65536)
        assert data, "closed"
        for ev in c.receive_data(data):
            if isinstance(ev, h2.events.TrailersReceived):
                trailers = list(ev.headers)
            elif isinstance(ev, h2.events.StreamEnded):
                ended = True
        s.sendall(c.data_to_send())
    s.close()
    assert trailers == [("x-checksum", "abc123"), ("grpc-status", "0")], trailers
    # nginx (proxy_http_version 1.1) passes no upstream trailer to an HTTP/1.1 client.
    resp = chunked_exchange(site.n1, b"GET /x/bad-trailers HTTP/1.1\r\nHost: a.test\r\n"
                                     b"TE: trailers\r\nConnection: close\r\n\r\n")
    tail = resp.partition(b"\r\n\r\n")[2].lower()
    assert b"host: evil" not in tail and b"authorization" not in tail, resp
