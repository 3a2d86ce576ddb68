"""`return` locations, core headers, keep-alive, pipelining, request bodies, limits."""

import email.utils
import http.client

import pytest

from conftest import free_port, runtime_section
from util_http import Conn, request, roundtrip

CONFIG = """
[http]
client_max_body_size = "1k"
max_uri_size = "1k"
max_header_size = "4k"
max_headers = 20
keepalive_timeout = "30s"

[[server]]
listen = ["127.0.0.1:$PORT"]
  [[server.location]]
  path = "/"
  return = { status = 200, body = "hello\\n", content_type = "text/plain" }
  [[server.location]]
  path = "/created"
  return = { status = 201, body = "made it", content_type = "application/json", headers = { "X-A" = "b", "X-Other" = "two words" } }
  [[server.location]]
  path = "/redir"
  return = { status = 302, location = "http://x/" }
  [[server.location]]
  path = "/a/"
  return = { status = 200, body = "prefix-a" }
  [[server.location]]
  path = "/a/b/"
  return = { status = 200, body = "prefix-ab" }
  [[server.location]]
  path = "/exact"
  exact = true
  return = { status = 200, body = "exact" }
  [[server.location]]
  path = "/empty"
  return = { status = 204 }

# second server on its own port: no "/" location -> 404 for unmatched paths
[[server]]
listen = ["127.0.0.1:$PORT2"]
  [[server.location]]
  path = "/only"
  return = { status = 200, body = "only" }
"""


@pytest.fixture(scope="module")
def srv(engine, ringx_module):
    p1, p2 = free_port(), free_port()
    cfg = runtime_section(engine) + CONFIG.replace("$PORT2", str(p2)).replace("$PORT", str(p1))
    r = ringx_module.make(cfg, engine=engine, name=f"basic-{engine}")
    r.port, r.port2 = p1, p2
    yield r
    r.stop()


@pytest.fixture(scope="module")
def srv_keepalive3(engine, ringx_module):
    p = free_port()
    cfg = runtime_section(engine) + """
[http]
keepalive_requests = 3
server_tokens = false
[[server]]
listen = ["127.0.0.1:%d"]
  [[server.location]]
  path = "/"
  return = { status = 200, body = "k" }
""" % p
    r = ringx_module.make(cfg, engine=engine, name=f"ka3-{engine}")
    r.port = p
    yield r
    r.stop()


# --------------------------------------------------------------------------- return

def test_return_status_body_type_headers(srv):
    resp, _ = roundtrip(srv.port, request("GET", "/created"))
    assert resp.status == 201, resp
    assert resp.body == b"made it"
    assert resp.header("Content-Type") == "application/json"
    assert resp.header("Content-Length") == "7"
    assert resp.header("X-A") == "b"
    assert resp.header("X-Other") == "two words"


def test_return_default_content_type_and_body(srv):
    resp, _ = roundtrip(srv.port, request("GET", "/anything/here?q=1"))
    assert resp.status == 200, resp
    assert resp.body == b"hello\n"
    assert resp.header("Content-Type") == "text/plain"


def test_return_redirect_location(srv):
    resp, _ = roundtrip(srv.port, request("GET", "/redir"))
    assert resp.status == 302, resp
    assert resp.header("Location") == "http://x/"


def test_return_204_has_no_body(srv):
    with Conn(srv.port) as c:
        c.send(request("GET", "/empty") + request("GET", "/exact"))
        r1 = c.read_response()
        assert r1.status == 204, r1
        assert r1.header("Content-Length") in (None, "0")
        r2 = c.read_response()
        assert (r2.status, r2.body) == (200, b"exact"), "bytes after the 204 head were not the next response"


def test_date_and_server_headers(srv):
    resp, _ = roundtrip(srv.port, request("GET", "/"))
    assert resp.header("Server") == "ringx/0.1.0"
    date = resp.header("Date")
    assert date is not None
    parsed = email.utils.parsedate_to_datetime(date)  # raises if not an HTTP date
    assert date.endswith(" GMT") and parsed is not None


def test_server_tokens_false(srv_keepalive3):
    resp, _ = roundtrip(srv_keepalive3.port, request("GET", "/"))
    assert resp.header("Server") == "ringx"


def test_head_same_headers_no_body(srv):
    with Conn(srv.port) as c:
        c.send(request("GET", "/created"))
        g = c.read_response()
        c.send(request("HEAD", "/created"))
        h = c.read_response(head=True)
        assert h.status == 201
        strip = lambda r: [(k.lower(), v) for k, v in r.headers if k.lower() != "date"]
        assert strip(h) == strip(g)
        # no body bytes may follow the HEAD response: the next response must parse cleanly
        c.send(request("GET", "/exact"))
        n = c.read_response()
        assert (n.status, n.body) == (200, b"exact")


@pytest.mark.parametrize("path,body", [
    ("/a/", b"prefix-a"), ("/a/x", b"prefix-a"), ("/a/b/", b"prefix-ab"), ("/a/b/c/d", b"prefix-ab"),
    ("/exact", b"exact"), ("/exact/", b"hello\n"), ("/exactly", b"hello\n"), ("/", b"hello\n"),
])
def test_longest_prefix_and_exact_match(srv, path, body):
    resp, _ = roundtrip(srv.port, request("GET", path))
    assert (resp.status, resp.body) == (200, body), path


def test_404_when_no_root_location(srv):
    resp, _ = roundtrip(srv.port2, request("GET", "/nothing"))
    assert resp.status == 404, resp
    resp, _ = roundtrip(srv.port2, request("GET", "/only"))
    assert (resp.status, resp.body) == (200, b"only")


# --------------------------------------------------------------------------- keep-alive

def test_keepalive_http_client_many_requests(srv):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        for i in range(10):
            conn.request("GET", f"/a/{i}")
            r = conn.getresponse()
            assert (r.status, r.read()) == (200, b"prefix-a")
            # the same socket is reused: http.client leaves sock set when kept alive
            assert conn.sock is not None, f"server closed after request {i}"
            if i == 0:
                first_sock = conn.sock
            assert conn.sock is first_sock
    finally:
        conn.close()


def test_connection_close_request(srv):
    with Conn(srv.port) as c:
        c.send(request("GET", "/", headers={"Connection": "close"}))
        r = c.read_response()
        assert r.status == 200
        assert "close" in r.connection_tokens(), r
        assert c.wait_closed(3), "server kept the connection open after Connection: close"


def test_http10_without_keepalive_closes(srv):
    with Conn(srv.port) as c:
        c.send(request("GET", "/", version="HTTP/1.0"))
        r = c.read_response()
        assert r.status == 200 and r.body == b"hello\n"
        assert "keep-alive" not in r.connection_tokens()
        assert c.wait_closed(3), "HTTP/1.0 connection without keep-alive stayed open"


def test_http10_with_keepalive_stays_open(srv):
    with Conn(srv.port) as c:
        for _ in range(3):
            c.send(request("GET", "/", version="HTTP/1.0", headers={"Connection": "keep-alive"}))
            r = c.read_response()
            assert r.status == 200 and r.body == b"hello\n"
            assert "keep-alive" in r.connection_tokens(), r
        assert c.still_open(0.3)


def test_keepalive_requests_limit(srv_keepalive3):
    with Conn(srv_keepalive3.port) as c:
        for i in range(3):
            c.send(request("GET", "/"))
            r = c.read_response()
            assert r.status == 200, r
            if i < 2:
                assert "close" not in r.connection_tokens(), f"closed early at response {i + 1}"
        assert "close" in r.connection_tokens(), "3rd response should say Connection: close"
        assert c.wait_closed(3), "connection not closed after keepalive_requests responses"


# --------------------------------------------------------------------------- pipelining

def test_pipelining_20_requests_in_order(srv):
    paths = ["/", "/a/1", "/a/b/2", "/exact", "/created", "/redir", "/empty", "/x"] * 3
    paths = paths[:20]
    head_index = 7
    expected = {"/": (200, b"hello\n"), "/a/1": (200, b"prefix-a"), "/a/b/2": (200, b"prefix-ab"),
                "/exact": (200, b"exact"), "/created": (201, b"made it"), "/redir": (302, None),
                "/empty": (204, b""), "/x": (200, b"hello\n")}
    blob = b"".join(request("HEAD" if i == head_index else "GET", p) for i, p in enumerate(paths))
    with Conn(srv.port) as c:
        c.send(blob)
        for i, p in enumerate(paths):
            r = c.read_response(head=(i == head_index))
            st, body = expected[p]
            assert r.status == st, (i, p, r)
            if i == head_index:
                assert r.body == b"" and r.header("Content-Length") == "6"
            elif body is not None:
                assert r.body == body, (i, p, r)
        assert c.still_open(0.2)


# --------------------------------------------------------------------------- bodies

def test_content_length_body_consumed(srv):
    with Conn(srv.port) as c:
        c.send(request("POST", "/created", body=b"x" * 500) + request("GET", "/exact"))
        assert c.read_response().status == 201
        r = c.read_response()
        assert (r.status, r.body) == (200, b"exact")


def test_chunked_body_consumed(srv):
    body = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n"
    with Conn(srv.port) as c:
        c.send(request("POST", "/created", headers={"Transfer-Encoding": "chunked"}) + body
               + request("GET", "/exact"))
        assert c.read_response().status == 201
        r = c.read_response()
        assert (r.status, r.body) == (200, b"exact")


def test_expect_100_continue(srv):
    with Conn(srv.port) as c:
        c.send(request("POST", "/created", headers={"Content-Length": "10", "Expect": "100-continue"}))
        interim = c.read_response(skip_1xx=False, timeout=3)
        assert interim.status == 100, interim
        assert interim.raw_head.startswith(b"HTTP/1.1 100 Continue\r\n"), interim.raw_head
        c.send(b"0123456789")
        r = c.read_response()
        assert r.status == 201, r
        c.send(request("GET", "/exact"))
        assert c.read_response().body == b"exact"


def test_expect_100_over_limit_gets_413_without_100(srv):
    with Conn(srv.port) as c:
        c.send(request("POST", "/created", headers={"Content-Length": "5000", "Expect": "100-continue"}))
        r = c.read_response(skip_1xx=False, timeout=3)
        assert r.status == 413, f"expected 413 and no 100 Continue, got {r}"
        assert c.wait_closed(3), "connection not closed after 413"


def test_content_length_over_limit_413(srv):
    with Conn(srv.port) as c:
        c.send(request("POST", "/created", headers={"Content-Length": "2048"}) + b"x" * 2048)
        r = c.read_response()
        assert r.status == 413, r
        assert c.wait_closed(3)


def test_chunked_over_limit_413_and_close(srv):
    chunk = b"400\r\n" + b"y" * 0x400 + b"\r\n"  # 1024 bytes per chunk, limit is 1k total
    with Conn(srv.port) as c:
        c.send(request("POST", "/created", headers={"Transfer-Encoding": "chunked"}) + chunk * 3
               + b"0\r\n\r\n")
        r = c.read_response()
        assert r.status == 413, r
        assert c.wait_closed(3), "connection not closed after chunked 413"


def test_body_exactly_at_limit_ok(srv):
    resp, _ = roundtrip(srv.port, request("POST", "/created", body=b"z" * 1024))
    assert resp.status == 201, resp


# --------------------------------------------------------------------------- limits

def test_uri_too_long_414(srv):
    resp, closed = roundtrip(srv.port, request("GET", "/" + "u" * 1100), close_wait=3)
    assert resp.status == 414, resp


def test_uri_under_limit_ok(srv):
    resp, _ = roundtrip(srv.port, request("GET", "/" + "u" * 900))
    assert resp.status == 200, resp


def test_head_too_large_431(srv):
    resp, closed = roundtrip(srv.port, request("GET", "/", headers={"X-Big": "v" * 5000}), close_wait=3)
    assert resp.status == 431, resp
    assert closed


def test_too_many_headers_431(srv):
    hdrs = [(f"X-H{i}", "v") for i in range(30)]
    resp, closed = roundtrip(srv.port, request("GET", "/", headers=hdrs), close_wait=3)
    assert resp.status == 431, resp
    assert closed


def test_headers_at_limit_ok(srv):
    hdrs = [(f"X-H{i}", "v") for i in range(15)]  # + Host = 16 <= 20
    resp, _ = roundtrip(srv.port, request("GET", "/", headers=hdrs))
    assert resp.status == 200, resp
