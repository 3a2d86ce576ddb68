"""Compression: gzip, brotli and zstd for static files, `return` bodies and proxied responses
(streamed), Accept-Encoding q-values, Vary, what is never compressed (ranges, 304, 204,
HEAD, bodies already encoded, no-transform, short or unlisted types), precompressed files
served as they are, a huge Accept-Encoding, and the memory a long compressed stream holds."""

from __future__ import annotations

import gzip
import http.client
import os
import socket
import time

import brotli
import pytest
import zstandard

from compress_upstream import Upstream, text
from conftest import runtime_section

DECODE = {
    "gzip": gzip.decompress,
    "br": brotli.decompress,
    "zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b),
}


def get(port, path, headers=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    d = tmp_path_factory.mktemp("www")
    (d / "page.html").write_bytes(text(100_000))
    (d / "small.html").write_bytes(text(100))
    (d / "pic.png").write_bytes(os.urandom(5000))
    (d / "app.css").write_bytes(text(20_000))
    pre = gzip.compress(text(20_000), 9)
    (d / "app.css.gz").write_bytes(pre)
    (d / "app.css.br").write_bytes(brotli.compress(text(20_000)))
    (d / "only-gz.js").write_bytes(text(30_000))
    (d / "only-gz.js.gz").write_bytes(gzip.compress(text(30_000)))
    return d


@pytest.fixture(scope="module")
def upstream():
    u = Upstream()
    yield u
    u.close()


@pytest.fixture(scope="module")
def server(ringx_module, engine, site, upstream):
    from conftest import free_port
    port = free_port()
    cfg = runtime_section(engine) + f"""
[http]
gzip = {{ types = ["text/html", "text/css", "application/javascript", "text/event-stream"], min_length = 256, level = 5 }}
brotli = {{ types = ["text/html", "text/css"], level = 4 }}
zstd = {{ types = ["text/html"] }}
gzip_static = true
brotli_static = true

[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  root = "{site}"
  [[server.location]]
  path = "/off/"
  alias = "{site}/"
  compress = false
  [[server.location]]
  path = "= /canned"
  return = {{ status = 200, content_type = "text/html", body = "{'x' * 2000}" }}
  [[server.location]]
  path = "= /canned-short"
  return = {{ status = 200, content_type = "text/html", body = "short" }}
  [[server.location]]
  path = "/up/"
  proxy_pass = "http://{upstream.addr}/"
"""
    return ringx_module.make(cfg, engine=engine, name=f"compress-{engine}"), port


def test_static_file_in_each_coding(server, site):
    _, port = server
    want = (site / "page.html").read_bytes()
    for coding in ["gzip", "br", "zstd"]:
        r, body = get(port, "/page.html", {"Accept-Encoding": coding})
        assert r.status == 200
        assert r.getheader("Content-Encoding") == coding
        assert r.getheader("Vary") == "Accept-Encoding"
        assert r.getheader("ETag").startswith('W/"'), "a compressed body has a weak ETag"
        assert r.getheader("Accept-Ranges") is None
        assert int(r.getheader("Content-Length")) == len(body) < len(want) // 3
        assert DECODE[coding](body) == want, coding
    r, body = get(port, "/page.html")
    assert r.getheader("Content-Encoding") is None and body == want
    assert r.getheader("Vary") == "Accept-Encoding", "the identity variant says it varies too"
    assert not r.getheader("ETag").startswith("W/")


def test_q_values_decide(server):
    _, port = server
    cases = [
        ("gzip, br, zstd", "br"),                  # equal q: the server's order
        ("gzip;q=1.0, br;q=0.5", "gzip"),
        ("br;q=0, gzip", "gzip"),
        ("*", "br"),
        ("*;q=0.1, gzip;q=0.2", "gzip"),
        ("zstd;q=0.9, *;q=0.5", "zstd"),
        ("identity", None),
        ("gzip;q=0, br;q=0, zstd;q=0", None),
        ("*;q=0", None),
        ("GZIP", "gzip"),
        ("gzip;q=2", None),                         # not a qvalue: ignored
        ("compress, deflate", None),
    ]
    for accept, want in cases:
        r, body = get(port, "/page.html", {"Accept-Encoding": accept})
        assert r.status == 200
        assert r.getheader("Content-Encoding") == want, accept
        if want:
            assert DECODE[want](body) == text(100_000)


def test_never_compressed(server, site):
    _, port = server
    ae = {"Accept-Encoding": "gzip, br"}
    r, body = get(port, "/page.html", {**ae, "Range": "bytes=0-49999"})
    assert r.status == 206 and r.getheader("Content-Encoding") is None
    assert body == text(100_000)[:50000]
    r, _ = get(port, "/page.html", ae)
    etag = r.getheader("ETag")
    r, body = get(port, "/page.html", {**ae, "If-None-Match": etag})
    assert r.status == 304 and body == b"" and r.getheader("Content-Encoding") is None
    assert r.getheader("Vary") == "Accept-Encoding"
    r, body = get(port, "/page.html", ae, method="HEAD")
    assert r.status == 200 and body == b"" and r.getheader("Content-Encoding") is None
    r, body = get(port, "/small.html", ae)
    assert r.getheader("Content-Encoding") is None, "shorter than min_length"
    r, body = get(port, "/pic.png", ae)
    assert r.getheader("Content-Encoding") is None and r.getheader("Vary") is None
    r, body = get(port, "/off/page.html", ae)
    assert r.getheader("Content-Encoding") is None, "compress = false in this location"
    r, body = get(port, "/canned-short", ae)
    assert r.getheader("Content-Encoding") is None and body == b"short"


def test_precompressed_files_are_served_as_they_are(server, site):
    _, port = server
    r, body = get(port, "/app.css", {"Accept-Encoding": "gzip"})
    assert r.getheader("Content-Encoding") == "gzip"
    assert body == (site / "app.css.gz").read_bytes(), "the .gz file itself"
    assert r.getheader("Vary") == "Accept-Encoding"
    assert r.getheader("Content-Type") == "text/css"
    r, body = get(port, "/app.css", {"Accept-Encoding": "gzip, br"})
    assert body == (site / "app.css.br").read_bytes()
    # A range of a precompressed file is a range of its bytes: allowed.
    r, body = get(port, "/app.css", {"Accept-Encoding": "gzip", "Range": "bytes=0-9"})
    assert r.status == 206 and body == (site / "app.css.gz").read_bytes()[:10]
    # Brotli preferred but only a .gz beside it: the .gz, not brotli on the fly.
    r, body = get(port, "/only-gz.js", {"Accept-Encoding": "br, gzip"})
    assert r.getheader("Content-Encoding") == "gzip"
    assert body == (site / "only-gz.js.gz").read_bytes()
    r, body = get(port, "/app.css")
    assert r.getheader("Content-Encoding") is None and body == text(20_000)


def test_return_bodies(server):
    _, port = server
    for coding in ["gzip", "br", "zstd"]:
        r, body = get(port, "/canned", {"Accept-Encoding": coding})
        assert r.getheader("Content-Encoding") == coding
        assert DECODE[coding](body) == b"x" * 2000
    r, body = get(port, "/canned")
    assert body == b"x" * 2000 and r.getheader("Vary") == "Accept-Encoding"


def test_proxied_bodies_are_compressed_as_they_flow(server, upstream):
    _, port = server
    for path, n in [("/up/text?n=300000", 300_000), ("/up/chunked?n=250000", 250_000)]:
        for coding in ["gzip", "br", "zstd"]:
            r, body = get(port, path, {"Accept-Encoding": coding})
            assert r.status == 200
            assert r.getheader("Content-Encoding") == coding, (path, coding)
            assert r.getheader("Transfer-Encoding") == "chunked"
            assert r.getheader("Content-Length") is None
            assert r.getheader("Vary") == "Accept-Encoding"
            assert DECODE[coding](body) == text(n), (path, coding)
    r, body = get(port, "/up/text?n=300000", {"Accept-Encoding": "gzip"})
    assert r.getheader("ETag") == 'W/"v1"' and r.getheader("Accept-Ranges") is None
    # Accept-Encoding goes upstream as the client sent it; a body the upstream encoded
    # itself passes through, never compressed twice.
    r, body = get(port, "/up/gzipped", {"Accept-Encoding": "gzip, br"})
    assert r.getheader("Content-Encoding") == "gzip"
    assert gzip.decompress(body) == text(50000), "passed through, not compressed again"
    r, body = get(port, "/up/partial", {"Accept-Encoding": "gzip"})
    assert r.status == 206 and r.getheader("Content-Encoding") is None and body == text(1000)
    r, body = get(port, "/up/no-transform", {"Accept-Encoding": "gzip"})
    assert r.getheader("Content-Encoding") is None and body == text(50000)
    r, body = get(port, "/up/text?n=100&type=text/html", {"Accept-Encoding": "gzip"})
    assert r.getheader("Content-Encoding") is None, "a known length under min_length"
    r, body = get(port, "/up/text?n=5000&type=image/png", {"Accept-Encoding": "gzip"})
    assert r.getheader("Content-Encoding") is None and r.getheader("Vary") is None


def test_http10_client_gets_a_close_delimited_body(server):
    _, port = server
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /up/text?n=200000 HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, body = data.split(b"\r\n\r\n", 1)
    assert b"Content-Encoding: gzip" in head and b"Transfer-Encoding" not in head
    assert b"Connection: close" in head
    assert gzip.decompress(body) == text(200000)


def test_a_trickling_stream_is_not_held_back(server):
    """Events of a slow stream reach the client as they arrive, compressed."""
    _, port = server
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/up/trickle?n=3&ms=700", headers={"Accept-Encoding": "gzip"})
    r = c.getresponse()
    assert r.getheader("Content-Encoding") == "gzip"
    d = __import__("zlib").decompressobj(16 + 15)
    t0 = time.monotonic()
    first = d.decompress(r.read1(65536))
    while b"event 0" not in first:
        first += d.decompress(r.read1(65536))
    assert time.monotonic() - t0 < 0.6, "the first event waited for the next ones"
    rest = first + d.decompress(r.read())
    assert rest == b"".join(b"data: event %d\n\n" % i for i in range(3))
    c.close()


def test_huge_accept_encoding(server):
    """An Accept-Encoding near the header limit: read in one pass, its last element counts."""
    _, port = server
    value = "x-custom;q=0.5, " * 900 + "br;q=0.9"
    r, body = get(port, "/page.html", {"Accept-Encoding": value})
    assert r.status == 200 and r.getheader("Content-Encoding") == "br"
    assert brotli.decompress(body) == text(100_000)
    # Past the header limit: 431, not a crash.
    r, _ = get(port, "/page.html", {"Accept-Encoding": "gzip, " * 5000})
    assert r.status == 431


def test_a_long_stream_holds_bounded_memory(server, upstream):
    """256 MiB relayed and compressed to a slow reader: the server's peak memory grows by a
    bounded amount (the encoder's window and the queues), not with the body."""
    r0, port = server
    pid = r0.pid

    def hwm():
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0
    get(port, "/up/stream?mb=1", {"Accept-Encoding": "gzip"})
    before = hwm()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("GET", "/up/stream?mb=256", headers={"Accept-Encoding": "gzip"})
    r = c.getresponse()
    d = __import__("zlib").decompressobj(16 + 15)
    total = 0
    while True:
        chunk = r.read1(1 << 16)
        if not chunk:
            break
        total += len(d.decompress(chunk))
        time.sleep(0.0005)
    c.close()
    assert total == 256 << 20
    grew_mb = (hwm() - before) / 1024
    assert grew_mb < 32, f"peak memory grew by {grew_mb:.1f} MiB relaying 256 MiB"


def big_file(site, name, mb):
    """A compressible file past the 4 MiB that are compressed whole."""
    p = site / name
    if not p.exists():
        block = text(1 << 20)
        p.write_bytes(b"".join(block.replace(b"ringx", b"%05d" % i) for i in range(mb)))
    return p


def test_a_large_static_file_is_compressed_as_it_streams(server, site):
    """Past 4 MiB a file is compressed piece by piece: chunked, no Content-Length, the same
    entity headers as a small one; the next request on the connection is answered after it."""
    _, port = server
    want = big_file(site, "big.html", 6).read_bytes()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for coding in ["gzip", "br", "zstd"]:
        c.request("GET", "/big.html", headers={"Accept-Encoding": coding})
        r = c.getresponse()
        body = r.read()
        assert r.status == 200
        assert r.getheader("Content-Encoding") == coding
        assert r.getheader("Transfer-Encoding") == "chunked"
        assert r.getheader("Content-Length") is None
        assert r.getheader("Vary") == "Accept-Encoding"
        assert r.getheader("ETag").startswith('W/"')
        assert r.getheader("Accept-Ranges") is None
        assert len(body) < len(want) // 3
        assert DECODE[coding](body) == want, coding
        # Kept alive: the same connection serves the next request.
        c.request("GET", "/small.html")
        r = c.getresponse()
        assert r.status == 200 and r.read() == text(100)
    c.close()
    # Identity, ranges and HEAD stay as they were.
    r, body = get(port, "/big.html")
    assert r.getheader("Content-Encoding") is None and body == want
    r, body = get(port, "/big.html", {"Accept-Encoding": "gzip", "Range": "bytes=0-9"})
    assert r.status == 206 and body == want[:10]
    r, body = get(port, "/big.html", {"Accept-Encoding": "gzip"}, method="HEAD")
    assert r.getheader("Content-Encoding") is None and body == b""
    # HTTP/1.0: delimited by the close.
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"GET /big.html HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    head, body = data.split(b"\r\n\r\n", 1)
    assert b"Content-Encoding: gzip" in head and b"Connection: close" in head
    assert b"Transfer-Encoding" not in head and b"Content-Length" not in head
    assert gzip.decompress(body) == want


def test_pipelined_requests_wait_for_a_streamed_body(server, site):
    _, port = server
    want = big_file(site, "big.html", 6).read_bytes()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    req = b"GET /big.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
    s.sendall(req + b"GET /small.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    head, rest = data.split(b"\r\n\r\n", 1)
    assert b"Transfer-Encoding: chunked" in head
    body = b""
    while True:
        line, rest = rest.split(b"\r\n", 1)
        n = int(line, 16)
        if n == 0:
            assert rest.startswith(b"\r\n")
            rest = rest[2:]
            break
        body += rest[:n]
        rest = rest[n + 2:]
    assert gzip.decompress(body) == want
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n") and rest.endswith(text(100))


def h2_get(port, path, coding, hold=False, timeout=60):
    """GET over h2c prior knowledge with Python h2: (headers, body). `hold`: grant no window
    past the initial one until the server has stopped sending; returns what came by then as
    the third value, then opens the windows and reads the rest."""
    h2conn = pytest.importorskip("h2.connection", reason="Python h2 (tests/requirements.txt)")
    import h2.config
    import h2.events
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    conn = h2conn.H2Connection(h2.config.H2Configuration(client_side=True,
                                                          header_encoding=None))
    conn.initiate_connection()
    s.sendall(conn.data_to_send())
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"http"),
                            (b":authority", b"x"), (b":path", path.encode()),
                            (b"accept-encoding", coding.encode())], end_stream=True)
    s.sendall(conn.data_to_send())
    headers, body, ended, unacked, held = {}, bytearray(), False, [], None
    s.settimeout(1.0 if hold else timeout)
    while not ended:
        try:
            data = s.recv(1 << 16)
        except socket.timeout:
            assert hold and held is None, "the server stopped sending"
            held = len(body)
            for n in unacked:
                conn.acknowledge_received_data(n, sid)
            unacked = []
            hold = False
            s.sendall(conn.data_to_send())
            s.settimeout(timeout)
            continue
        assert data, "connection closed before the stream ended"
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                headers = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                body += ev.data
                if hold:
                    unacked.append(ev.flow_controlled_length)
                else:
                    conn.acknowledge_received_data(ev.flow_controlled_length, sid)
            elif isinstance(ev, h2.events.StreamEnded):
                ended = True
            elif isinstance(ev, h2.events.StreamReset):
                raise AssertionError(f"stream reset: {ev.error_code}")
        s.sendall(conn.data_to_send())
    s.close()
    return headers, bytes(body), held


def test_a_large_static_file_is_compressed_for_http2_streams(server, site):
    """Past 4 MiB an HTTP/2 stream gets the file compressed as it goes, byte-exact once
    decompressed, with no content-length; a small file and identity stay as they were."""
    _, port = server
    want = big_file(site, "big.html", 6).read_bytes()
    for coding in ["gzip", "br", "zstd"]:
        h, body, _ = h2_get(port, "/big.html", coding)
        assert h[b":status"] == b"200"
        assert h.get(b"content-encoding") == coding.encode(), h
        assert b"content-length" not in h and b"transfer-encoding" not in h, h
        assert h.get(b"vary") == b"Accept-Encoding"
        assert len(body) < len(want) // 3
        assert DECODE[coding](body) == want, coding
    h, body, _ = h2_get(port, "/big.html", "identity")
    assert b"content-encoding" not in h and body == want


def test_http2_compression_waits_for_the_peers_window(server, site):
    """A peer that grants no window past the initial 65,535 bytes gets no more than that;
    once it opens the window the rest comes, and the whole decompresses byte-exact."""
    _, port = server
    want = big_file(site, "big.html", 6).read_bytes()
    h, body, held = h2_get(port, "/big.html", "gzip", hold=True)
    assert h.get(b"content-encoding") == b"gzip"
    assert held is not None and 0 < held <= 65535, held
    assert gzip.decompress(body) == want


def test_a_large_static_file_holds_bounded_memory(server, site):
    """96 MiB compressed for a slow reader: the server's peak memory grows by the encoder's
    window and the queued output, not with the file."""
    r0, port = server
    pid = r0.pid
    big_file(site, "huge.html", 96)

    def hwm():
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0
    get(port, "/small.html", {"Accept-Encoding": "gzip"})
    before = hwm()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("GET", "/huge.html", headers={"Accept-Encoding": "gzip"})
    r = c.getresponse()
    assert r.getheader("Content-Encoding") == "gzip"
    d = __import__("zlib").decompressobj(16 + 15)
    total = 0
    while True:
        chunk = r.read1(1 << 14)
        if not chunk:
            break
        total += len(d.decompress(chunk))
        time.sleep(0.0002)
    c.close()
    assert total == 96 << 20
    grew_mb = (hwm() - before) / 1024
    assert grew_mb < 32, f"peak memory grew by {grew_mb:.1f} MiB compressing a 96 MiB file"
