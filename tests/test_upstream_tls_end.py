"""Where a response from a TLS upstream ends (issue 35, point 2), beside nginx.

An HTTPS upstream answers `HTTP/1.1 200` with `Connection: close` and no length (the body runs
until the server closes), then either
  /notify     sends close_notify and keeps the TCP connection open for 5 s: close_notify ends
              the body, so the client has the whole response at once;
  /truncated  closes TCP (FIN) without close_notify: that is a truncation (RFC 8446 §6.1),
              never passed on as complete: the client's response is cut, it is not cached,
              and a line is logged.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_upstream_tls_end.py
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time

import pytest

from conftest import close_listener, free_port, runtime_section
from nginx_peer import NginxPeer
from tls_pki import Pki

BODY = b"0123456789" * 1000
HOLD = 5.0


class UntilCloseUpstream:
    """A raw HTTPS server answering one request per connection, close-delimited."""

    def __init__(self, cert, key):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(cert), str(key))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        self.stop = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.stop:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(raw,), daemon=True).start()

    def serve(self, raw: socket.socket):
        try:
            s = self.ctx.wrap_socket(raw, server_side=True)
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    return
                buf += chunk
            path = buf.split(b" ", 2)[1].decode()
            self.requests.append(path)
            s.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                      b"Cache-Control: max-age=60\r\n\r\n" + BODY)
            if path.endswith("/notify"):
                plain = s.unwrap()  # close_notify, the TCP connection stays open
                time.sleep(HOLD)
                plain.close()
            else:
                # A FIN without close_notify (SSLSocket.shutdown sends no alert).
                s.shutdown(socket.SHUT_RDWR)
                s.close()
        except (OSError, ssl.SSLError):
            pass

    def close(self):
        self.stop = True
        close_listener(self.sock)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls-end")
    pki = Pki(d / "pki")
    up = UntilCloseUpstream(*pki.leaf("up", ["up.test"]))
    yield dict(up=up, pki=pki, dir=d)
    up.close()


def curl(port: int, path: str) -> tuple[int, float, bytes, str]:
    """curl's exit code, the seconds it took, the body and stderr."""
    t0 = time.monotonic()
    r = subprocess.run(["curl", "-sS", "--max-time", "20", f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, timeout=30)
    return r.returncode, time.monotonic() - t0, r.stdout, r.stderr.decode(errors="replace")


@pytest.fixture(scope="module")
def ringx_site(ringx_module, upstream):
    port = free_port()
    d = upstream["dir"]
    cfg = runtime_section(None) + f"""
[[proxy_cache_path]]
name = "c"
path = "{d}/cache"
[[upstream]]
name = "secure"
servers = ["127.0.0.1:{upstream['up'].port}"]
retries = 0
tls = {{ sni = "up.test", ca = "{upstream['pki'].ca_path}" }}
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "secure"
  [[server.location]]
  path = "/cached/"
  proxy_pass = "secure"
  proxy_cache = {{ zone = "c" }}
"""
    srv = ringx_module.make(cfg, name="tls-end")
    return dict(port=port, srv=srv)


def test_close_notify_ends_a_close_delimited_body(ringx_site, upstream):
    rc, took, body, err = curl(ringx_site["port"], "/notify")
    assert rc == 0, err
    assert body == BODY
    # Before the fix the client waited for the upstream's FIN, HOLD seconds later.
    assert took < HOLD - 1, f"the response ended only after {took:.1f} s"


def test_a_fin_without_close_notify_is_a_truncation(ringx_site, upstream):
    rc, _, body, err = curl(ringx_site["port"], "/truncated")
    assert rc != 0, "a truncated response was passed on as complete"
    assert len(body) <= len(BODY)
    ringx_site["srv"].wait_log("without close_notify", timeout=10)


def test_a_truncated_response_is_not_cached(ringx_site, upstream):
    up = upstream["up"]
    before = up.requests.count("/cached/truncated")
    for _ in range(2):
        rc, _, _, _ = curl(ringx_site["port"], "/cached/truncated")
        assert rc != 0
    assert up.requests.count("/cached/truncated") == before + 2, "served from the cache"
    # A complete one is cached: the second request does not reach the upstream.
    for _ in range(2):
        rc, _, body, err = curl(ringx_site["port"], "/cached/notify")
        assert rc == 0 and body == BODY, err
    assert up.requests.count("/cached/notify") == 1


def test_nginx_on_the_same_upstream(upstream, tmp_path):
    """nginx ends the body at close_notify too. A FIN without it nginx 1.22 passes on as a
    complete response (it sets OpenSSL 3's SSL_OP_IGNORE_UNEXPECTED_EOF): ringx is stricter
    there, on purpose; what nginx did is printed, not asserted."""
    port = free_port()
    block = f"""
server {{
    listen 127.0.0.1:{port};
    location / {{
        proxy_pass https://127.0.0.1:{upstream['up'].port};
        proxy_ssl_name up.test;
        proxy_ssl_server_name on;
        proxy_ssl_verify on;
        proxy_ssl_trusted_certificate {upstream['pki'].ca_path};
        proxy_http_version 1.1;
    }}
}}"""
    peer = NginxPeer(tmp_path, block, port)
    try:
        rc, took, body, err = curl(port, "/notify")
        assert rc == 0 and body == BODY and took < HOLD - 1, (rc, took, err)
        rc, _, body, err = curl(port, "/truncated")
        print(f"nginx, FIN without close_notify: curl exit {rc}, {len(body)} bytes {err.strip()}")
    finally:
        peer.stop()
