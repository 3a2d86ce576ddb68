"""Malformed and request-smuggling-style requests over raw sockets.

Each row: the raw request, the accepted status code(s), and whether the
server must close the connection afterwards (True / False / None = either).
"""

import pytest

from conftest import free_port, runtime_section
from util_http import Conn, request

H = "Host: localhost\r\n"


def rq(start: str, headers: str = H, body: bytes = b"") -> bytes:
    return (start + "\r\n" + headers + "\r\n").encode("latin-1") + body


CASES = [
    # id, raw request, expected status(es), must close
    ("cl_and_te", rq("POST /ret HTTP/1.1", H + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"), 400, True),
    ("te_chunked_chunked", rq("POST /ret HTTP/1.1", H + "Transfer-Encoding: chunked, chunked\r\n", b"0\r\n\r\n"), 501, True),
    ("te_xchunked", rq("POST /ret HTTP/1.1", H + "Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n"), 400, True),
    ("te_gzip_chunked", rq("POST /ret HTTP/1.1", H + "Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"), 501, True),
    ("te_in_http10", rq("POST /ret HTTP/1.0", H + "Transfer-Encoding: chunked\r\n", b"0\r\n\r\n"), 400, True),
    ("two_content_length_same", rq("POST /ret HTTP/1.1", H + "Content-Length: 5\r\nContent-Length: 5\r\n", b"hello"), 400, True),
    ("two_content_length_diff", rq("POST /ret HTTP/1.1", H + "Content-Length: 5\r\nContent-Length: 6\r\n", b"hello!"), 400, True),
    ("cl_plus", rq("POST /ret HTTP/1.1", H + "Content-Length: +5\r\n", b"hello"), 400, True),
    ("cl_negative", rq("POST /ret HTTP/1.1", H + "Content-Length: -1\r\n"), 400, True),
    ("cl_space_inside", rq("POST /ret HTTP/1.1", H + "Content-Length: 1 2\r\n", b"x" * 12), 400, True),
    ("cl_hex", rq("POST /ret HTTP/1.1", H + "Content-Length: 0x5\r\n", b"hello"), 400, True),
    ("cl_empty", rq("POST /ret HTTP/1.1", H + "Content-Length: \r\n"), 400, True),
    ("cl_list", rq("POST /ret HTTP/1.1", H + "Content-Length: 5, 5\r\n", b"hello"), 400, True),
    ("space_before_colon", rq("GET /ret HTTP/1.1", H + "X-Foo : bar\r\n"), 400, True),
    ("obs_fold", rq("GET /ret HTTP/1.1", H + "X-Foo: a\r\n  b\r\n"), 400, True),
    ("bare_cr_in_header", rq("GET /ret HTTP/1.1", H + "X-Foo: a\rb\r\n"), 400, True),
    ("nul_in_header", rq("GET /ret HTTP/1.1", H + "X-Foo: a\x00b\r\n"), 400, True),
    ("missing_host_11", rq("GET /ret HTTP/1.1", ""), 400, True),
    ("two_hosts", rq("GET /ret HTTP/1.1", H + "Host: other\r\n"), 400, True),
    ("invalid_host_space", rq("GET /ret HTTP/1.1", "Host: bad host\r\n"), 400, True),
    ("invalid_host_slash", rq("GET /ret HTTP/1.1", "Host: foo/bar\r\n"), 400, True),
    ("invalid_host_userinfo", rq("GET /ret HTTP/1.1", "Host: user@foo\r\n"), 400, True),
    ("http_2_0", rq("GET /ret HTTP/2.0"), 505, True),
    ("http_1_2", rq("GET /ret HTTP/1.2"), 505, True),
    ("garbage_version", rq("GET /ret FOO/1.1"), 400, True),
    ("garbage_version_digits", rq("GET /ret HTTP/x.y"), 400, True),
    ("chunk_size_0x", rq("POST /ret HTTP/1.1", H + "Transfer-Encoding: chunked\r\n", b"0x10\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n"), 400, True),
    ("chunk_size_not_hex", rq("POST /ret HTTP/1.1", H + "Transfer-Encoding: chunked\r\n", b"zz\r\nab\r\n0\r\n\r\n"), 400, True),
    ("chunk_size_negative", rq("POST /ret HTTP/1.1", H + "Transfer-Encoding: chunked\r\n", b"-5\r\nhello\r\n0\r\n\r\n"), 400, True),
    ("chunk_data_no_crlf", rq("POST /ret HTTP/1.1", H + "Transfer-Encoding: chunked\r\n", b"5\r\nhelloXX0\r\n\r\n"), 400, True),
    ("chunk_bare_lf", rq("POST /ret HTTP/1.1", H + "Transfer-Encoding: chunked\r\n", b"5\nhello\r\n0\r\n\r\n"), 400, True),
    ("target_no_slash", rq("GET ret HTTP/1.1"), 400, True),
    ("absolute_form_userinfo", rq("GET http://user@localhost/ret HTTP/1.1"), 400, True),
    ("expect_unknown", rq("POST /ret HTTP/1.1", H + "Expect: foo\r\nContent-Length: 0\r\n"), 417, True),
    ("traversal_dotdot", rq("GET /../etc/passwd HTTP/1.1"), (400, 403, 404), None),
    ("traversal_encoded", rq("GET /%2e%2e/etc/passwd HTTP/1.1"), (400, 403, 404), None),
    ("traversal_nested", rq("GET /sub/../../etc/passwd HTTP/1.1"), (400, 403, 404), None),
    ("traversal_encoded_slash", rq("GET /..%2f..%2fetc/passwd HTTP/1.1"), (400, 403, 404), None),
    ("traversal_upper_encoded", rq("GET /%2E%2E/%2E%2E/etc/passwd HTTP/1.1"), (400, 403, 404), None),
    ("encoded_nul_in_path", rq("GET /index.html%00.txt HTTP/1.1"), (400, 404), None),
]


@pytest.fixture(scope="module")
def srv(engine, ringx_module, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"malformed-root-{engine}")
    (root / "index.html").write_text("INDEX\n")
    (root / "sub").mkdir()
    (root / "sub" / "x.txt").write_text("x\n")
    p = free_port()
    cfg = runtime_section(engine) + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
server_name = ["localhost"]
  [[server.location]]
  path = "/"
  root = "{root}"
  index = ["index.html"]
  [[server.location]]
  path = "/ret"
  return = {{ status = 200, body = "ret\\n" }}
"""
    r = ringx_module.make(cfg, engine=engine, name=f"malformed-{engine}")
    r.port = p
    yield r
    r.stop()


def _assert_alive(port):
    with Conn(port) as c:
        c.send(request("GET", "/ret"))
        r = c.read_response()
        assert (r.status, r.body) == (200, b"ret\n"), "server stopped answering after a malformed request"


@pytest.mark.parametrize("raw,expected,must_close", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed(srv, raw, expected, must_close):
    expected = (expected,) if isinstance(expected, int) else expected
    with Conn(srv.port, timeout=5) as c:
        c.send(raw)
        r = c.read_response(timeout=5)
        assert r.status in expected, f"request {raw!r}: expected {expected}, got {r}"
        assert b"root:" not in r.body and b"/bin/" not in r.body, "leaked a file outside the root"
        if must_close is True:
            assert c.wait_closed(3), f"server did not close the connection after {r.status} for {raw!r}"
        elif must_close is False:
            assert c.still_open(0.3)
    _assert_alive(srv.port)


def test_lowercase_method_gets_valid_response(srv):
    """httparse accepts any token as method: `get` must get a well-formed
    response (not a crash, not a hang), and the server keeps serving."""
    with Conn(srv.port) as c:
        c.send(rq("get /ret HTTP/1.1"))
        r = c.read_response()
        assert r.version == "HTTP/1.1"
        assert r.status in (200, 400, 404, 405, 501), r
    _assert_alive(srv.port)


def test_unknown_method_on_static_gets_valid_response(srv):
    with Conn(srv.port) as c:
        c.send(rq("BREW /index.html HTTP/1.1"))
        r = c.read_response()
        assert r.status in (400, 405, 501), r
    _assert_alive(srv.port)


@pytest.mark.parametrize("bad", [
    rq("GET /ret HTTP/1.1", H + "X-Foo : bar\r\n"),
    rq("POST /ret HTTP/1.1", H + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"),
    rq("GET /ret HTTP/1.1", ""),
], ids=["space_before_colon", "cl_and_te", "missing_host"])
def test_no_response_after_400_on_same_connection(srv, bad):
    with Conn(srv.port) as c:
        c.send(bad + request("GET", "/ret"))
        r = c.read_response()
        assert r.status == 400, r
        assert "close" in r.connection_tokens(), f"400 response should carry Connection: close: {r}"
        assert c.wait_closed(3), f"server answered or kept open after 400; extra bytes: {c.buf[:300]!r}"


def test_smuggled_request_in_body_not_executed(srv):
    """CL+TE: whatever the server does, a request hidden in the body must not be answered."""
    smuggled = b"GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n"
    body = b"0\r\n\r\n" + smuggled
    raw = rq("POST /ret HTTP/1.1", H + f"Content-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n", body)
    with Conn(srv.port) as c:
        c.send(raw)
        r = c.read_response()
        assert r.status == 400
        assert c.wait_closed(3)
        assert b"INDEX" not in c.buf
