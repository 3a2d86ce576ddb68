"""Static files: root/alias mapping, metadata headers, conditional and range requests."""

import hashlib
import os
import socket
import struct
import subprocess
import time

import pytest

from conftest import free_port, runtime_section
from util_http import Conn, request, roundtrip

BIG_SIZE = 1024 * 1024 + 123
TEXT = b"0123456789abcdefghijklmnopqrstuvwxyz\n"  # 37 bytes


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("static")
    root = base / "www"
    (root / "static" / "dir").mkdir(parents=True)
    (root / "static" / "noindex").mkdir()
    s = root / "static"
    (s / "a.txt").write_bytes(TEXT)
    (s / "page.html").write_text("<html>page</html>\n")
    (s / "style.css").write_text("body{}\n")
    (s / "app.js").write_text("let x;\n")
    (s / "data.json").write_text("{}\n")
    (s / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 8)
    (s / "pic.jpg").write_bytes(b"\xff\xd8\xff" + b"\0" * 8)
    (s / "blob.unknownext").write_bytes(b"??")
    (s / "dir" / "index.html").write_text("<h1>dir index</h1>\n")
    (s / "noindex" / "f.txt").write_text("f\n")
    (s / "big.bin").write_bytes(os.urandom(BIG_SIZE))
    os.symlink("/etc/hostname", s / "evil-link")
    os.symlink(str(base / "secret.txt"), s / "evil-link2")
    (base / "secret.txt").write_text("TOP-SECRET-OUTSIDE-ROOT\n")
    os.symlink("a.txt", s / "good-link")
    alias_dir = base / "aliased"
    alias_dir.mkdir()
    (alias_dir / "hello.txt").write_text("from alias\n")
    return {"root": root, "alias": alias_dir, "base": base}


@pytest.fixture(scope="module")
def srv(engine, ringx_module, site):
    p = free_port()
    cfg = runtime_section(engine) + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/static/"
  root = "{site['root']}"
  index = ["index.html"]
  [[server.location]]
  path = "/files/"
  alias = "{site['alias']}/"
"""
    r = ringx_module.make(cfg, engine=engine, name=f"static-{engine}")
    r.port = p
    yield r
    r.stop()


def GET(srv, path, headers=None, method="GET"):
    return roundtrip(srv.port, request(method, path, headers=headers), head=(method == "HEAD"))[0]


def start_download(srv, path, rcvbuf):
    """A raw connection with a small receive buffer that has asked for `path` and reads
    nothing yet (a client that stalls the server's writes)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", srv.port))
    s.sendall(request("GET", path))
    return s


def read_body(s, size):
    """Reads one response with a `size`-byte body from raw socket `s`; returns the body."""
    s.settimeout(20)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, "connection closed before the head was complete"
        data += chunk
    body = data.partition(b"\r\n\r\n")[2]
    while len(body) < size:
        chunk = s.recv(1 << 20)
        assert chunk, "connection closed before the body was complete"
        body += chunk
    return body


def drop_from_page_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.mark.parametrize("name,ctype", [
    ("a.txt", "text/plain"), ("page.html", "text/html"), ("style.css", "text/css"),
    ("app.js", ("application/javascript", "text/javascript")), ("data.json", "application/json"),
    ("img.png", "image/png"), ("pic.jpg", "image/jpeg"),
    ("blob.unknownext", "application/octet-stream"),
])
def test_content_type_by_extension(srv, name, ctype):
    r = GET(srv, f"/static/{name}")
    assert r.status == 200, r
    got = (r.header("Content-Type") or "").split(";")[0].strip()
    assert got in ((ctype,) if isinstance(ctype, str) else ctype), r.header("Content-Type")


def test_file_headers_and_body(srv, site):
    r = GET(srv, "/static/a.txt")
    assert r.status == 200
    assert r.body == TEXT
    assert r.header("Content-Length") == str(len(TEXT))
    assert r.header("Last-Modified", "").endswith(" GMT")
    assert r.header("ETag"), r
    assert r.header("Accept-Ranges") in (None, "bytes")


def test_head_static(srv):
    g = GET(srv, "/static/a.txt")
    h = GET(srv, "/static/a.txt", method="HEAD")
    assert h.status == 200 and h.body == b""
    assert h.header("Content-Length") == str(len(TEXT))
    assert h.header("ETag") == g.header("ETag")


def test_if_modified_since_304(srv):
    lm = GET(srv, "/static/a.txt").header("Last-Modified")
    with Conn(srv.port) as c:
        c.send(request("GET", "/static/a.txt", headers={"If-Modified-Since": lm}))
        r = c.read_response()  # the parser reads no body for 304...
        assert r.status == 304, r
        assert r.header("Content-Length") in (None, "0", str(len(TEXT)))
        # ...so any stray body bytes would corrupt the next response
        c.send(request("GET", "/static/page.html"))
        n = c.read_response()
        assert n.status == 200 and n.body == b"<html>page</html>\n"


def test_if_modified_since_old_date_200(srv):
    r = GET(srv, "/static/a.txt", headers={"If-Modified-Since": "Mon, 01 Jan 1990 00:00:00 GMT"})
    assert r.status == 200 and r.body == TEXT


def test_if_none_match_304(srv):
    etag = GET(srv, "/static/a.txt").header("ETag")
    r = GET(srv, "/static/a.txt", headers={"If-None-Match": etag})
    assert r.status == 304, r
    assert r.header("ETag") == etag
    r = GET(srv, "/static/a.txt", headers={"If-None-Match": '"nope"'})
    assert r.status == 200 and r.body == TEXT


@pytest.mark.parametrize("rng,start,end", [
    ("bytes=0-9", 0, 9), ("bytes=-5", len(TEXT) - 5, len(TEXT) - 1), ("bytes=30-", 30, len(TEXT) - 1),
    ("bytes=10-1000", 10, len(TEXT) - 1),
])
def test_range(srv, rng, start, end):
    r = GET(srv, "/static/a.txt", headers={"Range": rng})
    assert r.status == 206, r
    assert r.header("Content-Range") == f"bytes {start}-{end}/{len(TEXT)}"
    assert r.body == TEXT[start:end + 1]
    assert r.header("Content-Length") == str(end - start + 1)


def test_range_unsatisfiable_416(srv):
    r = GET(srv, "/static/a.txt", headers={"Range": "bytes=1000-2000"})
    assert r.status == 416, r
    assert r.header("Content-Range") == f"bytes */{len(TEXT)}"


def test_directory_index(srv):
    r = GET(srv, "/static/dir/")
    assert r.status == 200, r
    assert r.body == b"<h1>dir index</h1>\n"
    assert r.header("Content-Type", "").startswith("text/html")


def test_directory_without_slash_redirects(srv):
    r = GET(srv, "/static/dir")
    assert r.status == 301, r
    loc = r.header("Location", "")
    assert loc == "/static/dir/" or loc.endswith("/static/dir/"), loc


def test_directory_without_index_403(srv):
    r = GET(srv, "/static/noindex/")
    assert r.status == 403, r


def test_missing_file_404(srv):
    assert GET(srv, "/static/nope.txt").status == 404


def test_post_to_static_405_with_allow(srv):
    r = roundtrip(srv.port, request("POST", "/static/a.txt", body=b"x"))[0]
    assert r.status == 405, r
    allow = {m.strip() for m in (r.header("Allow") or "").split(",")}
    assert {"GET", "HEAD"} <= allow, r


def curl_body(srv, path, tmp_path):
    """The body curl downloads from `path` (asserting a 200)."""
    out = tmp_path / "curl.out"
    cp = subprocess.run(["curl", "-sS", "-o", str(out), "-w", "%{http_code}",
                         f"http://127.0.0.1:{srv.port}{path}"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == "200"
    return out.read_bytes()


def test_big_file_with_curl_intact(srv, site, tmp_path):
    want = (site["root"] / "static" / "big.bin").read_bytes()
    assert hashlib.sha256(curl_body(srv, "/static/big.bin", tmp_path)).digest() == \
        hashlib.sha256(want).digest()


def test_big_file_raw_keepalive_then_next(srv, site):
    with Conn(srv.port, timeout=20) as c:
        c.send(request("GET", "/static/big.bin") + request("GET", "/static/a.txt"))
        r = c.read_response()
        assert r.status == 200 and len(r.body) == BIG_SIZE
        assert r.body == (site["root"] / "static" / "big.bin").read_bytes()
        assert c.read_response().body == TEXT


@pytest.mark.parametrize("link", ["evil-link", "evil-link2"])
def test_symlink_outside_root_refused(srv, link):
    r = GET(srv, f"/static/{link}")
    assert r.status in (403, 404), r
    assert b"TOP-SECRET" not in r.body
    if os.path.exists("/etc/hostname"):
        hn = open("/etc/hostname", "rb").read().strip()
        assert not (hn and r.body.strip() == hn)


def test_symlink_inside_root_served(srv):
    r = GET(srv, "/static/good-link")
    assert r.status == 200, r
    assert r.body == TEXT


def test_alias(srv):
    r = GET(srv, "/files/hello.txt")
    assert r.status == 200, r
    assert r.body == b"from alias\n"
    assert GET(srv, "/files/a.txt").status == 404


@pytest.mark.parametrize("path", [
    "/static/../secret.txt", "/static/%2e%2e/secret.txt", "/static/..%2fsecret.txt",
    "/files/../secret.txt", "/files/%2e%2e/secret.txt", "/static/dir/../../../secret.txt",
])
def test_traversal_never_escapes(srv, path):
    r = GET(srv, path)
    assert r.status in (400, 403, 404), r
    assert b"TOP-SECRET" not in r.body


def test_percent_decoded_path_served(srv, site):
    (site["root"] / "static" / "sp ace.txt").write_text("spaced\n")
    r = GET(srv, "/static/sp%20ace.txt")
    assert r.status == 200 and r.body == b"spaced\n", r


def test_slow_readers_hold_no_threads_and_others_are_served(srv, site):
    """Clients that ask for a big file and stop reading must cost socket buffers only: on
    io_uring a file sent by splice ran in the kernel's worker threads, one blocked thread per
    such client. Meanwhile other clients are answered."""
    threads = len(os.listdir(f"/proc/{srv.pid}/task"))
    slow = []
    try:
        for _ in range(40):
            slow.append(start_download(srv, "/static/big.bin", 4096))
        time.sleep(1.0)
        now = len(os.listdir(f"/proc/{srv.pid}/task"))
        assert now <= threads + 2, f"{now - threads} threads appeared for 40 stalled downloads"
        t0 = time.monotonic()
        assert GET(srv, "/static/a.txt").body == TEXT
        assert time.monotonic() - t0 < 2.0
        # A stalled download resumes and completes intact once its client reads.
        body = read_body(slow[0], BIG_SIZE)
        assert body == (site["root"] / "static" / "big.bin").read_bytes()
    finally:
        for s in slow:
            s.close()


def test_file_not_in_page_cache_sent_intact(srv, site, tmp_path):
    """Bytes the page cache does not hold go by another path on io_uring (splice in the
    kernel's workers, where waiting for the disk does not stall the zone); the body must come
    out the same whichever path each part took."""
    path = site["root"] / "static" / "cold.bin"
    data = os.urandom(3 * 1024 * 1024 + 77)
    path.write_bytes(data)
    drop_from_page_cache(path)
    got = curl_body(srv, "/static/cold.bin", tmp_path)
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()


@pytest.mark.parametrize("first,last", [(100_000, 900_000), (0, 70_000), (BIG_SIZE - 65_537, BIG_SIZE - 1)])
def test_big_file_ranges_keepalive(srv, site, first, last):
    """Parts of a large file at offsets (io_uring: sendfile from the range's start, reads for
    what fits behind the head), then a small file on the same connection."""
    data = (site["root"] / "static" / "big.bin").read_bytes()
    with Conn(srv.port, timeout=20) as c:
        c.send(request("GET", "/static/big.bin", headers={"Range": f"bytes={first}-{last}"})
               + request("GET", "/static/a.txt"))
        r = c.read_response()
        assert r.status == 206, r
        assert r.body == data[first:last + 1]
        assert c.read_response().body == TEXT


def test_big_file_then_close_delivers_all_and_eof(srv, site):
    """The connection closes after a large body: every byte arrives, then the FIN (an
    ordinary descriptor kept for sendfile must not hold the socket open)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    try:
        s.sendall(request("GET", "/static/big.bin", headers={"Connection": "close"}))
        data = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert body == (site["root"] / "static" / "big.bin").read_bytes()
    finally:
        s.close()


def test_idle_keepalive_after_big_file_holds_no_descriptor(srv, engine):
    """io_uring sends large bodies by sendfile on an ordinary descriptor of the socket; it is
    given back when the body is sent, so idle keep-alive connections cannot fill the
    descriptor table the server opens files in."""
    if engine != "uring":
        pytest.skip("epoll: a connection is its descriptor, by design")
    fds = len(os.listdir(f"/proc/{srv.pid}/fd"))
    conns = [Conn(srv.port, timeout=20) for _ in range(20)]
    try:
        for c in conns:
            c.send(request("GET", "/static/big.bin"))
            assert len(c.read_response().body) == BIG_SIZE
        now = len(os.listdir(f"/proc/{srv.pid}/fd"))
        assert now <= fds + 2, f"{now - fds} descriptors held by 20 idle connections"
    finally:
        for c in conns:
            c.close()


def _cpu_s(pid):
    """The process's CPU seconds, every thread (exited ones included)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_stalled_uncached_download_after_sendfile_waits_idle(srv, site):
    """After a large cached body (io_uring: sendfile, which makes the socket non-blocking), a
    large body not in the page cache starts by splice and goes on by sendfile once read
    ahead; while its client does not read, the server must wait idle (no resubmission loop
    on a full socket), and the body must then arrive intact. (A splice into the full
    non-blocking socket fails with EAGAIN; on loopback the socket usually takes a whole pipe,
    so this does not reliably reach that case: `complete_splice_out` handles it by waiting
    for POLLOUT like sendfile.)"""
    path = site["root"] / "static" / "cold2.bin"
    data = os.urandom(8 * 1024 * 1024)
    path.write_bytes(data)
    big = (site["root"] / "static" / "big.bin").read_bytes()
    s = start_download(srv, "/static/big.bin", 4096)
    try:
        assert read_body(s, BIG_SIZE) == big
        drop_from_page_cache(path)
        s.sendall(request("GET", "/static/cold2.bin"))
        time.sleep(0.3)
        t0 = _cpu_s(srv.pid)
        time.sleep(1.0)
        spent = _cpu_s(srv.pid) - t0
        assert spent < 0.3, f"the server used {spent:.2f} s of CPU in 1 s for one stalled client"
        assert read_body(s, len(data)) == data
    finally:
        s.close()


def test_aborted_downloads_leave_no_descriptors(srv, site):
    """Clients that reset the connection in the middle of large bodies (some while the server
    waits for room, some while it writes): every connection is cleaned up, no descriptor is
    left behind (io_uring keeps an ordinary one per connection sending a large file), and the
    server goes on serving."""
    fds = len(os.listdir(f"/proc/{srv.pid}/fd"))
    for round_ in range(3):
        socks = []
        for _ in range(30):
            socks.append(start_download(srv, "/static/big.bin", 8192))
        for i, s in enumerate(socks):
            s.settimeout(5)
            if i % 2:
                s.recv(10_000)  # some bytes first, then the reset
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        deadline = time.monotonic() + 5
        while len(os.listdir(f"/proc/{srv.pid}/fd")) > fds + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        now = len(os.listdir(f"/proc/{srv.pid}/fd"))
        assert now <= fds + 2, f"round {round_}: {now - fds} descriptors left after 30 resets"
    assert GET(srv, "/static/a.txt").body == TEXT
    r = GET(srv, "/static/big.bin")
    assert r.status == 200 and r.body == (site["root"] / "static" / "big.bin").read_bytes()
