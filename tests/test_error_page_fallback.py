"""error_page leading to a location that proxies (nginx's `error_page 502 = @fallback`):
the failed request is re-served there, over HTTP/1.1 (keep-alive kept) and HTTP/2 streams;
one redirect per request (a fallback that fails itself gets the plain page); a request whose
body was too large to keep is not re-sent; `ringx check` refuses loops at FILE:LINE:COL. The comparison with nginx
is in test_rewrite.py (test_error_page_to_a_proxying_location_matches_nginx).

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_error_page_fallback.py
"""

from __future__ import annotations

import http.client
import shutil
import time
import subprocess

import pytest

from compress_upstream import Upstream
from conftest import free_port, runtime_section


@pytest.fixture(scope="module")
def upstream():
    u = Upstream()
    yield u
    u.close()


@pytest.fixture(scope="module")
def site(ringx_module, upstream, tmp_path_factory):
    www = tmp_path_factory.mktemp("fbwww")
    (www / "files").mkdir()
    (www / "files" / "here.txt").write_text("here\n")
    port = free_port()
    up = upstream.addr
    ringx_module.make(runtime_section(None) + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/status/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @up" }}
  [[server.location]]
  path = "@up"
  proxy_pass = "http://{up}"
  [[server.location]]
  path = "/both/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "@down" }}
  [[server.location]]
  path = "@down"
  proxy_pass = "http://127.0.0.1:2"
  [[server.location]]
  path = "/icpt/"
  proxy_pass = "http://{up}/status/"
  proxy_intercept_errors = true
  error_page = {{ "500" = "= /other/207" }}
  [[server.location]]
  path = "/other/"
  proxy_pass = "http://{up}/status/"
  [[server.location]]
  path = "/files/"
  root = "{www}"
  error_page = {{ "404" = "= /other/206?x=1" }}
""", name="fallback")
    return port


def get(conn, method, path, body=None):
    conn.request(method, path, body=body)
    r = conn.getresponse()
    return r.status, r.read()


def test_an_upstream_down_falls_back_to_a_second_upstream_location(site):
    c = http.client.HTTPConnection("127.0.0.1", site, timeout=10)
    # Keep-alive: the fallback's response leaves the connection usable, and each request on
    # it falls back on its own.
    assert get(c, "GET", "/status/201") == (201, b"upstream says /status/201")
    assert get(c, "GET", "/status/202?q=1") == (202, b"upstream says /status/202")
    assert get(c, "GET", "/files/here.txt") == (200, b"here\n")
    c.close()


def test_a_static_404_and_an_intercepted_error_fall_back_to_a_proxy(site):
    c = http.client.HTTPConnection("127.0.0.1", site, timeout=10)
    assert get(c, "GET", "/files/missing") == (206, b"upstream says /status/206")
    assert get(c, "GET", "/icpt/500") == (207, b"upstream says /status/207")
    # An upstream status with no error_page passes as it is.
    assert get(c, "GET", "/icpt/404") == (404, b"upstream says /status/404")
    c.close()


def test_a_fallback_that_fails_gets_the_plain_page_and_a_body_is_not_resent(site, upstream):
    c = http.client.HTTPConnection("127.0.0.1", site, timeout=10)
    status, body = get(c, "GET", "/both/x")
    assert status == 502 and b"upstream says" not in body
    c.close()
    # A body too large to keep (over 64 KiB) cannot be sent again: the original error, as
    # nginx answers with proxy_request_buffering off (test_error_page_guard.py has the
    # replayed bodies).
    c = http.client.HTTPConnection("127.0.0.1", site, timeout=10)
    status, body = get(c, "POST", "/status/201", body=b"x" * (64 * 1024 + 1))
    assert status == 502 and b"upstream says" not in body, body
    c.close()


def test_http2_streams_fall_back(site):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (scripts/install-deps.sh)")
    for path, want in (("/status/201", b"2 201 upstream says /status/201"),
                       ("/files/missing", b"2 206 upstream says /status/206"),
                       ("/icpt/500", b"2 207 upstream says /status/207")):
        r = subprocess.run(["curl", "-sS", "--max-time", "20", "--http2-prior-knowledge",
                            "-w", "%{http_version} %{http_code} ", "-o", "/dev/stderr",
                            f"http://127.0.0.1:{site}{path}"],
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout + r.stderr == want, (path, r.stdout, r.stderr)
    r = subprocess.run(["curl", "-sS", "--max-time", "20", "--http2-prior-knowledge",
                        "-w", "%{http_code}", "-o", "/dev/null",
                        f"http://127.0.0.1:{site}/both/x"], capture_output=True, timeout=30)
    assert r.stdout == b"502", r.stdout


@pytest.mark.parametrize("pages,at", [
    # A proxying location sending its own failure back to itself.
    ('[[server.location]]\npath = "/app/"\nproxy_pass = "http://127.0.0.1:9"\n'
     'error_page = { "502" = "/app/down" }\n', ":6:24: "),
    # Two named locations sending a 502 to each other.
    ('[[server.location]]\npath = "@a"\nproxy_pass = "http://127.0.0.1:9"\n'
     'error_page = { "502" = "@b" }\n'
     '[[server.location]]\npath = "@b"\nproxy_pass = "http://127.0.0.1:8"\n'
     'error_page = { "502" = "= @a" }\n', ":6:24: "),
])
def test_check_refuses_an_error_page_loop(ringx_bin, tmp_path, pages, at):
    cfg = tmp_path / "loop.toml"
    cfg.write_text('[[server]]\nlisten = ["127.0.0.1:1"]\n' + pages)
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert out.returncode != 0 and f"{cfg}{at}" in out.stderr, out.stderr
    assert "in a loop" in out.stderr, out.stderr


def test_check_accepts_a_page_served_by_the_failing_location(ringx_bin, tmp_path):
    """nginx's everyday `error_page 404 /404.html` where `/` serves the file is no loop."""
    cfg = tmp_path / "ok.toml"
    cfg.write_text('[[server]]\nlisten = ["127.0.0.1:1"]\n'
                   'error_page = { "404" = "/404.html", "502" = "@up" }\n'
                   f'[[server.location]]\npath = "/"\nroot = "{tmp_path}"\n'
                   '[[server.location]]\npath = "@up"\nproxy_pass = "http://127.0.0.1:9"\n')
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_http2_a_body_ending_with_trailers_falls_back(site):
    """An HTTP/2 POST whose upstream fails before its body came (the body goes half a second
    after the head) and whose body ends with a trailer section, not an END_STREAM on its
    last DATA frame: the trailers end the body, and the request is re-served at its
    error_page location with it, as when the last DATA frame ends it. (Before, the
    fallback waited for an end of body that had come: the stream was never answered.)"""
    import socket

    import h2.config
    import h2.connection
    import h2.events

    s = socket.create_connection(("127.0.0.1", site), timeout=20)
    try:
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        c.initiate_connection()
        c.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":authority", "a"),
                           (":path", "/status/201"), ("content-length", "50000")])
        s.sendall(c.data_to_send())
        time.sleep(0.5)  # the order of events to arrange, not a condition to wait for
        for i in range(0, 50000, 10000):
            c.send_data(1, b"x" * 10000)
        c.send_headers(1, [("x-checksum", "abc")], end_stream=True)
        s.sendall(c.data_to_send())
        status, body, ended = None, b"", False
        while not ended:
            data = s.recv(65536)
            assert data, "the connection closed before the answer"
            for e in c.receive_data(data):
                if isinstance(e, h2.events.ResponseReceived):
                    status = dict(e.headers)[b":status"]
                elif isinstance(e, h2.events.DataReceived):
                    body += e.data
                    c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                elif isinstance(e, h2.events.StreamEnded):
                    ended = True
            s.sendall(c.data_to_send())
        # Re-served at @up, whose server takes no POST: its own 501 comes back (not 502,
        # and not silence).
        assert status == b"501" and b"Unsupported method ('POST')" in body, (status, body)
    finally:
        s.close()
