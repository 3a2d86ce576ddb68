"""Hostile probes: attacks and operator mistakes that once got through (issue 26), kept as
fixed classes so they stay fixed. One section per probe class; add new classes as new sections.

Proxied probes run against RawUpstream, a socket server written here that logs exactly the
bytes it receives and reads them with strict HTTP/1.1 framing, so a smuggled request shows up
as a request of its own.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_hostile.py
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import close_listener, runtime_section
from util_http import Conn, request, roundtrip

SMUGGLED = b"GET /secret/x HTTP/1.1\r\nHost: localhost\r\n\r\n"


# --------------------------------------------------------------------------- raw upstream

@dataclass
class Seen:
    """One request as the upstream's strict parser framed it."""
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        vals = [v for k, v in self.headers if k.lower() == name.lower()]
        return vals[0] if vals else None


@dataclass
class UpConn:
    raw: bytearray = field(default_factory=bytearray)  # every byte received, in order
    leftover: bytes = b""  # bytes after the last complete request when the connection ended


def default_answer(req: Seen) -> bytes:
    body = f"{req.method} {req.target}".encode()
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class RawUpstream:
    """An HTTP/1.1 upstream on raw sockets: logs the bytes of each connection, frames requests
    strictly (Transfer-Encoding: chunked, else Content-Length, else no body) and answers each
    with `answer(request) -> bytes` (default: 200, body "METHOD TARGET"), keeping the
    connection open for the next."""

    def __init__(self, answer=default_answer):
        self.answer = answer
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.conns: list[UpConn] = []
        self.requests: list[Seen] = []
        self.lock = threading.Lock()
        self.live: set[socket.socket] = set()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.stopped = True
        close_listener(self.sock)
        for s in list(self.live):
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self.stopped:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            c = UpConn()
            with self.lock:
                self.conns.append(c)
                self.live.add(s)
            threading.Thread(target=self._serve, args=(s, c), daemon=True).start()

    def _serve(self, s: socket.socket, c: UpConn) -> None:
        buf = b""

        def more() -> bool:
            nonlocal buf
            try:
                d = s.recv(65536)
            except OSError:
                return False
            if not d:
                return False
            with self.lock:
                c.raw += d
            buf += d
            return True

        def take_until(marker: bytes) -> bytes | None:
            nonlocal buf
            while marker not in buf:
                if not more():
                    return None
            i = buf.index(marker) + len(marker)
            out, buf = buf[:i], buf[i:]
            return out

        def take(n: int) -> bytes | None:
            nonlocal buf
            while len(buf) < n:
                if not more():
                    return None
            out, buf = buf[:n], buf[n:]
            return out

        s.settimeout(10)
        try:
            while True:
                head = take_until(b"\r\n\r\n")
                if head is None:
                    break
                lines = head[:-4].decode("latin-1").split("\r\n")
                method, target, _version = lines[0].split(" ", 2)
                headers = [tuple(x.strip() for x in ln.split(":", 1)) for ln in lines[1:]]
                names = {k.lower(): v for k, v in headers}
                body = b""
                if "chunked" in names.get("transfer-encoding", "").lower():
                    while True:
                        size_line = take_until(b"\r\n")
                        if size_line is None:
                            raise EOFError
                        size = int(size_line.split(b";")[0], 16)
                        if size == 0:
                            while take_until(b"\r\n") not in (b"\r\n", None):
                                pass
                            break
                        body += take(size) or b""
                        take(2)
                elif "content-length" in names:
                    body = take(int(names["content-length"])) or b""
                req = Seen(method, target, headers, body)
                with self.lock:
                    self.requests.append(req)
                s.sendall(self.answer(req))
        except (OSError, EOFError, ValueError):
            pass
        finally:
            with self.lock:
                c.leftover = buf
                self.live.discard(s)
            s.close()


@pytest.fixture
def raw_upstream():
    made: list[RawUpstream] = []

    def make(answer=default_answer) -> RawUpstream:
        u = RawUpstream(answer)
        made.append(u)
        return u

    yield make
    for u in made:
        u.close()


def proxy_config(port: int, upstream: str) -> str:
    """/api/ goes to the upstream; /secret/ is refused by ringx itself (a smuggled request
    reaching the upstream would bypass that)."""
    return (runtime_section(None) +
            f'[[upstream]]\nname = "app"\nservers = ["{upstream}"]\n'
            f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
            '[[server.location]]\npath = "/api/"\nproxy_pass = "app"\n'
            '[[server.location]]\npath = "/secret/"\nreturn = { status = 403 }\n')


def wait_for(pred, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


# --------------------------------------------------------------------------- defect 1

def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


class TestRequestSmugglingThroughConnection:
    """`Connection` naming a framing field once removed it from the forwarded head: the body
    (a second request) reached the upstream as a request of its own, past ringx's routing.
    ringx now forwards the request with the framing it parsed (see write_request_head), so the
    upstream reads exactly one request carrying the body, and a later client's request on the
    pooled connection is its own."""

    CASES = [
        ("Content-Length", b"Content-Length: %d\r\n" % len(SMUGGLED), SMUGGLED),
        ("content-length, Host, Upgrade, X-Other",
         b"Content-Length: %d\r\n" % len(SMUGGLED), SMUGGLED),
        ("Transfer-Encoding", b"Transfer-Encoding: chunked\r\n", chunked(SMUGGLED)),
    ]

    @pytest.mark.parametrize("conn,framing,body", CASES, ids=["cl", "cl-host-upgrade", "te"])
    def test_one_request_with_its_body_reaches_the_upstream(self, ringx, raw_upstream, port,
                                                            conn, framing, body):
        up = raw_upstream()
        ringx.make(proxy_config(port, up.addr))
        probe = (b"POST /api/a HTTP/1.1\r\nHost: localhost\r\nConnection: " + conn.encode() +
                 b"\r\n" + framing + b"\r\n" + body)
        with Conn(port) as c:
            c.send(probe)
            r = c.read_response()
            assert r.status == 200 and r.body == b"POST /api/a", r
        # Another client, which the pool may give the same upstream connection.
        r = roundtrip(port, request("GET", "/api/b"))[0]
        assert r.status == 200 and r.body == b"GET /api/b", r
        assert wait_for(lambda: len(up.requests) >= 2)
        time.sleep(0.2)  # anything smuggled would be parsed by now
        seen = [(q.method, q.target, q.body) for q in up.requests]
        assert seen == [("POST", "/api/a", SMUGGLED), ("GET", "/api/b", b"")], seen
        post = up.requests[0]
        assert post.header("Connection") is None
        if "Transfer" in conn:
            assert post.header("Transfer-Encoding") == "chunked" and post.header("Content-Length") is None
        else:
            assert post.header("Content-Length") == str(len(SMUGGLED))
        assert post.header("Host") == "localhost"
        assert all(not c.leftover for c in up.conns), [bytes(c.raw) for c in up.conns]

    def test_the_smuggled_path_is_refused_by_ringx(self, ringx, raw_upstream, port):
        """What the smuggled request would have bypassed."""
        up = raw_upstream()
        ringx.make(proxy_config(port, up.addr))
        r = roundtrip(port, SMUGGLED)[0]
        assert r.status == 403 and up.requests == []


# --------------------------------------------------------------------------- defect 2

def framing_answer(req: Seen) -> bytes:
    if req.target == "/api/cl":
        return b"HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello"
    if req.target == "/api/chunked":
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    return default_answer(req)


class TestResponseFramingFromUpstream:
    """An upstream's `Connection: Content-Length` once stripped the length from the response a
    kept-alive client got, so the next response ran into this one's body."""

    def test_length_survives_connection_option(self, ringx, raw_upstream, port):
        up = raw_upstream(framing_answer)
        ringx.make(proxy_config(port, up.addr))
        with Conn(port, timeout=3) as c:
            c.send(request("GET", "/api/cl"))
            r = c.read_response()
            assert r.status == 200 and r.header("Content-Length") == "5" and r.body == b"hello", r
            assert "content-length" not in r.connection_tokens()
            c.send(request("GET", "/api/next"))
            r = c.read_response()
            assert r.status == 200 and r.body == b"GET /api/next", r

    def test_http10_keepalive_client_of_chunked_upstream_is_told_close(self, ringx,
                                                                       raw_upstream, port):
        """The body is de-chunked and ends with the connection: the head must say so."""
        up = raw_upstream(framing_answer)
        ringx.make(proxy_config(port, up.addr))
        with Conn(port, timeout=3) as c:
            c.send(b"GET /api/chunked HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n")
            r = c.read_response()
            assert r.status == 200 and r.body == b"hello", r
            assert r.header("Transfer-Encoding") is None and r.header("Content-Length") is None
            assert "close" in r.connection_tokens() and "keep-alive" not in r.connection_tokens(), r


# --------------------------------------------------------------------------- defect 8

def server(extra: str = "", ret: str = "{ status = 200 }", port: int = 18080) -> str:
    """A [[server]] for `ringx check`, which binds nothing: the port is never opened."""
    return (f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n{extra}'
            f'[[server.location]]\npath = "/"\nreturn = {ret}\n')


CHECK_CASES = [
    # id, config, text of the offending entry (the error points at its last occurrence), words
    ("location_crlf", server(ret='{ status = 301, location = "/x\\r\\nSet-Cookie: a=b" }'),
     '"/x\\r', "return location"),
    ("content_type_lf", server(ret='{ status = 200, content_type = "text/html\\nX: y" }'),
     '"text/html', "return content_type"),
    ("headers_content_length", server(ret='{ status = 200, headers = { Content-Length = "0" } }'),
     "Content-Length", "cannot be set in `headers`"),
    ("headers_transfer_encoding",
     server(ret='{ status = 200, headers = { Transfer-Encoding = "chunked" } }'),
     "Transfer-Encoding", "cannot be set in `headers`"),
    ("headers_connection", server(ret='{ status = 200, headers = { Connection = "close" } }'),
     "Connection", "cannot be set in `headers`"),
    ("duplicate_location",
     server() + '[[server.location]]\npath = "/"\nreturn = { status = 204 }\n',
     '"/"\nreturn = { status = 204', "duplicate location"),
    ("duplicate_server_name",
     server('server_name = ["a.test"]\n') + server('server_name = ["A.test"]\n'),
     '"A.test"', "already claimed"),
    ("two_defaults", server("default = true\n") + server("default = true\n"),
     "true", "a second default server"),
    ("status_600", server(ret="{ status = 600 }"), "600", "between 200 and 599"),
    ("status_99", server(ret="{ status = 99 }"), "99", "between 200 and 599"),
]


class TestCheckRefuses:
    """`ringx check` accepted each of these."""

    @pytest.mark.parametrize("text,entry,words", [c[1:] for c in CHECK_CASES],
                             ids=[c[0] for c in CHECK_CASES])
    def test_refused_at_the_entry(self, ringx_bin, tmp_path, text, entry, words):
        f = tmp_path / "bad.toml"
        f.write_text(text)
        at = text.rindex(entry)
        line = text.count("\n", 0, at) + 1
        col = at - (text.rfind("\n", 0, at) + 1) + 1
        cp = subprocess.run([ringx_bin, "check", "-c", str(f)], capture_output=True, text=True,
                            timeout=60)
        assert cp.returncode == 1, (cp.returncode, cp.stdout, cp.stderr)
        assert re.search(rf"{re.escape(str(f))}:{line}:{col}: .*{re.escape(words)}", cp.stderr), \
            (line, col, cp.stderr)

    def test_same_name_on_other_addresses_passes(self, ringx_bin, tmp_path):
        f = tmp_path / "ok.toml"
        f.write_text(server('server_name = ["a.test"]\ndefault = true\n', port=18081) +
                     server('server_name = ["a.test"]\ndefault = true\n', port=18082))
        cp = subprocess.run([ringx_bin, "check", "-c", str(f)], capture_output=True, text=True,
                            timeout=60)
        assert cp.returncode == 0, cp.stderr


# --------------------------------------------------------------------------- defect 9

MTIME = 1_577_836_800  # 2020-01-01 00:00:00 GMT
TEXT = b"hello world 0123456789\n"


@pytest.fixture
def files(ringx, raw_upstream, port, tmp_path):
    """A static root with one file modified at MTIME, and /api/ proxied to a raw upstream."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "f.txt").write_bytes(TEXT)
    os.utime(root / "f.txt", (MTIME, MTIME))
    up = raw_upstream()
    ringx.make(runtime_section(None) +
               f'[[upstream]]\nname = "app"\nservers = ["{up.addr}"]\n'
               f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
               f'[[server.location]]\npath = "/"\nroot = "{root}"\n'
               '[[server.location]]\npath = "/api/"\nproxy_pass = "app"\n')
    return port, up


def status(port: int, raw: bytes) -> int:
    return roundtrip(port, raw)[0].status


class TestHttpDeviations:
    """Answers that differed from RFC 9110 / RFC 9112; nginx 1.22's answer to the same probe
    is noted with each."""

    def test_future_if_modified_since_is_ignored(self, files):
        port, _ = files
        # nginx: 200. (ringx answered 304.)
        assert status(port, request("GET", "/f.txt", headers={
            "If-Modified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"})) == 200
        assert status(port, request("GET", "/f.txt", headers={
            "If-Modified-Since": "Wed, 01 Jan 2020 00:00:00 GMT"})) == 304

    def test_if_unmodified_since(self, files):
        port, _ = files
        # nginx: 412. (ringx ignored the field: 200.)
        assert status(port, request("GET", "/f.txt", headers={
            "If-Unmodified-Since": "Tue, 01 Jan 2019 00:00:00 GMT"})) == 412
        # nginx: 200.
        assert status(port, request("GET", "/f.txt", headers={
            "If-Unmodified-Since": "Wed, 01 Jan 2020 00:00:00 GMT"})) == 200
        # An invalid date is ignored (RFC 9110 §13.1.4); nginx answers 412 here.
        assert status(port, request("GET", "/f.txt", headers={
            "If-Unmodified-Since": "yesterday"})) == 200

    def test_10kb_method_is_501_and_not_forwarded(self, files):
        port, up = files
        # nginx: 414 (request line beyond its buffers); HAProxy 2.6 forwards it.
        # (ringx forwarded it to the upstream, and answered 405 on a static location.)
        for path in ("/api/x", "/f.txt"):
            r, closed = roundtrip(port, request("A" * 10240, path), close_wait=3)
            assert r.status == 501 and closed, r
        time.sleep(0.2)
        assert up.requests == [] and all(not c.raw for c in up.conns)
        # The longest method accepted (32 bytes) still reaches the upstream.
        assert status(port, request("M" * 32, "/api/x")) == 200
        assert [q.method for q in up.requests] == ["M" * 32]

    @pytest.mark.parametrize("spec", ["bytes=0-18446744073709551616",
                                      "bytes=18446744073709551616-",
                                      "bytes=-18446744073709551616"])
    def test_overflowing_range_is_416(self, files, spec):
        port, _ = files
        # nginx: 416 for each. (ringx answered 200.)
        r = roundtrip(port, request("GET", "/f.txt", headers={"Range": spec}))[0]
        assert r.status == 416 and r.header("Content-Range") == f"bytes */{len(TEXT)}", r

    def test_invalid_range_is_still_ignored(self, files):
        port, _ = files
        assert status(port, request("GET", "/f.txt", headers={"Range": "bytes=a-18446744073709551616"})) == 200


# --------------------------------------------------------------------------- defect 3

class TestUnsolicitedUpstreamBytes:
    """A pooled upstream connection that receives bytes nobody asked for must leave the pool:
    the next request written to it would never be answered (17 of 40 clients hung for
    read_timeout before the fix)."""

    def test_no_client_hangs_behind_a_chatty_upstream(self, ringx, port):
        # An upstream that answers, then, once the connection sits in ringx's pool, sends
        # bytes no request asked for.
        lsock = socket.socket()
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(64)
        stop = threading.Event()

        def serve(s: socket.socket) -> None:
            s.settimeout(5)
            try:
                while not stop.is_set():
                    buf = b""
                    while b"\r\n\r\n" not in buf:
                        d = s.recv(4096)
                        if not d:
                            return
                        buf += d
                    s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    time.sleep(0.05)
                    s.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
            except OSError:
                pass
            finally:
                s.close()

        def accept() -> None:
            while not stop.is_set():
                try:
                    s, _ = lsock.accept()
                except OSError:
                    return
                threading.Thread(target=serve, args=(s,), daemon=True).start()

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        up = "127.0.0.1:%d" % lsock.getsockname()[1]
        try:
            ringx.make(proxy_config(port, up).replace(
                'servers = ["%s"]' % up, 'servers = ["%s"]\nread_timeout = "20s"' % up))
            hung = []
            for i in range(40):
                try:
                    r = roundtrip(port, request("GET", f"/api/{i}"), timeout=3)[0]
                    if r.status != 200 or r.body != b"ok":
                        hung.append((i, r.status))
                except (OSError, AssertionError, TimeoutError):
                    hung.append((i, "no answer"))
                time.sleep(0.1)  # the unsolicited bytes reach the pooled connection
            assert not hung, f"{len(hung)} of 40 clients not answered in time: {hung[:5]}"
        finally:
            stop.set()
            # Not close() alone: the accept thread would stay blocked on the listener for the
            # rest of the session, the port listening (conftest.close_listener).
            close_listener(lsock)
            acceptor.join(5)


# --------------------------------------------------------------------------- defect 4

class TestIdleFlood:
    """Idle connections must not lock new clients out: near max_conns the longest idle ones
    are closed (as nginx reuses its idle connections), so 14 new clients are served after an
    idle flood four times the zones' capacity."""

    def test_new_clients_are_served_after_an_idle_flood(self, ringx, port):
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 4096:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
        cfg = (runtime_section(None, zones=2, extra="max_conns = 200\n") +
               f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
               '[[server.location]]\npath = "/"\nreturn = { status = 200, body = "served" }\n')
        srv = ringx.make(cfg)
        idle = []
        try:
            for _ in range(800):
                try:
                    idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
                except OSError:
                    pass
            time.sleep(0.5)
            served = 0
            for _ in range(14):
                try:
                    r = roundtrip(port, request("GET", "/"), timeout=3)[0]
                    served += r.status == 200 and r.body == b"served"
                except (OSError, AssertionError):
                    pass
            assert served == 14, f"{served} of 14 new clients served\n{srv.log()[-2000:]}"
            assert "connection limit near (max_conns 200)" in srv.log()
            assert "Too many open files" not in srv.log()
        finally:
            for s in idle:
                s.close()


# --------------------------------------------------------------------------- defect 5

class TestReloadInFlight:
    """A reload applies to new requests at once, while a slow proxied response in flight
    finishes whole (nginx served the new configuration after 1 s; ringx used to hold the zone
    on the old one for drain_timeout and then cut the response)."""

    def test_new_config_at_once_and_the_slow_response_finishes(self, ringx, port):
        import socketserver

        class Slow(socketserver.BaseRequestHandler):
            def handle(self):
                self.request.recv(65536)
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n")
                for _ in range(8):
                    time.sleep(0.4)
                    self.request.sendall(b"x" * 5)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        up = Server(("127.0.0.1", 0), Slow)
        threading.Thread(target=up.serve_forever, daemon=True).start()
        try:
            # The reload changes the upstreams too (their read_timeout): before the fix,
            # that made the zone wait for every proxied request to end before it applied
            # anything.
            def cfg(body: str, timeout: str) -> str:
                return (runtime_section(None) +
                        f'[[upstream]]\nname = "slow"\nservers = ["127.0.0.1:{up.server_address[1]}"]\n'
                        f'read_timeout = "{timeout}"\n'
                        f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
                        '[[server.location]]\npath = "/slow"\nproxy_pass = "slow"\n'
                        f'[[server.location]]\npath = "/v"\nreturn = {{ status = 200, body = "{body}" }}\n')

            srv = ringx.make(cfg("old", "60s"))
            with Conn(port, timeout=10) as slow:
                slow.send(request("GET", "/slow"))
                time.sleep(0.3)
                srv.config_path.write_text(cfg("new", "61s"))
                srv.signal(signal.SIGHUP)
                started = time.monotonic()
                while time.monotonic() - started < 1.0:
                    if roundtrip(port, request("GET", "/v"))[0].body == b"new":
                        break
                    time.sleep(0.05)
                assert roundtrip(port, request("GET", "/v"))[0].body == b"new", \
                    "the new configuration did not serve within 1 s of SIGHUP"
                r = slow.read_response(timeout=10)
                assert r.status == 200 and r.body == b"x" * 40, f"the response in flight was cut: {r}"
        finally:
            up.shutdown()
            up.server_close()


# --------------------------------------------------------------------------- defect 6

class TestPrivilegeDropFiles:
    """With `user = "nobody"` the pid file and the access log are made before the drop and
    stay usable after it: `ringx reload` finds the pid, SIGUSR1 reopens the log."""

    def test_pid_file_and_log_reopen_after_the_drop(self, ringx_bin, port):
        if os.geteuid() != 0:
            pytest.skip("needs root: the server drops privileges to nobody")
        import pwd
        import shutil
        import tempfile
        from conftest import Ringx
        # Everything the server reads after the drop (the configuration, on reload) must be
        # reachable by nobody: a directory of its own under /tmp, owned by root, 0755, so
        # nobody may not create or remove files in it.
        run = Path(tempfile.mkdtemp(prefix="ringx-priv-", dir="/tmp"))
        os.chmod(run, 0o755)
        srv = None
        try:
            pid_file, log = run / "ringx.pid", run / "access.log"
            cfg = (runtime_section(None, extra=f'user = "nobody"\npid_file = "{pid_file}"\n') +
                   f'[http]\naccess_log = "{log}"\n'
                   f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
                   '[[server.location]]\npath = "/"\nreturn = { status = 200, body = "ok" }\n')
            srv = Ringx(ringx_bin, run, cfg).start()
            assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() == str(srv.pid))
            nobody = pwd.getpwnam("nobody")
            assert log.stat().st_uid == nobody.pw_uid, "the log belongs to the server's user"
            roundtrip(port, request("GET", "/first"))
            assert wait_for(lambda: b"/first" in log.read_bytes())
            # logrotate with `create`: the old file moves away, a new one owned by the
            # server's user takes its place, then SIGUSR1.
            os.rename(log, run / "access.log.1")
            log.touch()
            os.chown(log, nobody.pw_uid, nobody.pw_gid)
            srv.signal(signal.SIGUSR1)
            time.sleep(0.3)
            roundtrip(port, request("GET", "/second"))
            assert wait_for(lambda: b"/second" in log.read_bytes()), srv.log()
            # A rotation that leaves no file in a directory nobody cannot write: the log goes
            # on in the file it had rather than stopping for good.
            os.rename(log, run / "access.log.2")
            srv.signal(signal.SIGUSR1)
            time.sleep(0.3)
            roundtrip(port, request("GET", "/third"))
            assert wait_for(lambda: b"/third" in (run / "access.log.2").read_bytes()), srv.log()
            r = subprocess.run([ringx_bin, "reload", "--pid-file", str(pid_file)],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            srv.wait_log("reload 2 sent", timeout=5)
            srv.signal(signal.SIGTERM)
            assert srv.wait_exit(10) == 0
            assert not pid_file.exists() or pid_file.read_text().strip() == "", \
                "the pid file still names a process that exited"
        finally:
            if srv is not None:
                srv.stop()
            shutil.rmtree(run, ignore_errors=True)


# --------------------------------------------------------------------------- defect 7

class TestCoBinding:
    """SO_REUSEPORT must not let a second, unrelated ringx share the ports of a running one
    (/metrics was then answered by both): the second refuses to start, as nginx does."""

    def test_a_second_server_on_the_same_ports_refuses_to_start(self, ringx, port):
        admin = socket.socket()
        admin.bind(("127.0.0.1", 0))
        admin_port = admin.getsockname()[1]
        admin.close()
        cfg = (runtime_section(None) +
               f'[admin]\nlisten = "127.0.0.1:{admin_port}"\n'
               f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
               '[[server.location]]\npath = "/"\nreturn = { status = 200, body = "first" }\n')
        first = ringx.make(cfg, name="first")
        second = ringx.make(cfg.replace('"first"', '"second"'), name="second", start=False)
        second.start(wait=False)
        rc = second.wait_exit(10)
        assert rc not in (None, 0), "the second server started"
        assert "already in use by another process" in second.log(), second.log()
        for _ in range(20):
            assert roundtrip(port, request("GET", "/"))[0].body == b"first"
        # Only the admin port taken: refused too.
        other = free_port_pair()
        cfg2 = cfg.replace(f"127.0.0.1:{port}", f"127.0.0.1:{other}").replace('"first"', '"third"')
        third = ringx.make(cfg2, name="third", start=False)
        third.start(wait=False)
        assert third.wait_exit(10) not in (None, 0)
        assert "admin listener" in third.log() and "already in use" in third.log(), third.log()
        assert first.proc.poll() is None


def free_port_pair() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# --------------------------------------------------------------------------- defect 9 (POST)

class TestRefusalDoesNotWaitForTheBody:
    """A POST to a static location is refused (405) at once, not after its body: a client
    trickling the body one byte every few seconds must not hold the connection (nginx answers
    at once)."""

    def test_405_before_the_body(self, ringx, port, tmp_path):
        root = tmp_path / "www"
        root.mkdir()
        (root / "f.txt").write_text("x")
        ringx.make(runtime_section(None) +
                   f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
                   f'[[server.location]]\npath = "/"\nroot = "{root}"\n')
        with Conn(port, timeout=5) as c:
            c.send(b"POST /f.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\nx")
            started = time.monotonic()
            r = c.read_response(timeout=2)
            assert r.status == 405 and time.monotonic() - started < 1.0, r
            assert "close" in r.connection_tokens(), "the unread body ends the connection"


class TestFullZoneHandsOff:
    """A zone full of busy connections (nothing idle to reclaim) with `listen = "cpu"` must
    not keep its CPU's new clients waiting while another zone has room: its steering slot is
    cleared and they take the kernel's hash over every zone."""

    def test_a_full_zone_hands_its_cpu_to_the_others(self, ringx, port):
        if os.geteuid() != 0:
            pytest.skip("needs root: eBPF reuseport steering")
        if len(os.sched_getaffinity(0)) < 2:
            pytest.skip("needs 2 CPUs")
        cfg = (runtime_section(None, zones=2, extra="cpus = [0, 1]\nmax_conns = 64\n") +
               '[steering]\nlisten = "cpu"\n'
               f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
               '[[server.location]]\npath = "/"\nreturn = { status = 200, body = "ok" }\n')
        srv = ringx.make(cfg)
        if "eBPF reuseport program" not in srv.log():
            pytest.skip("eBPF reuseport steering unavailable here: " + srv.log()[-300:])
        old = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {0})  # every SYN of ours is processed on CPU 0: zone 0's
        busy = []
        try:
            for _ in range(64):
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
                busy.append(s)
            srv.wait_log("zone 0 is full", timeout=5)
            # In parallel: a client hashed to the full zone waits (in its listen queue), the
            # others are served by zone 1 at once.
            import concurrent.futures
            def one(_):
                try:
                    return roundtrip(port, request("GET", "/"), timeout=1.5)[0].status == 200
                except (OSError, AssertionError, TimeoutError):
                    return False
            with concurrent.futures.ThreadPoolExecutor(40) as ex:
                served = sum(ex.map(one, range(40)))
            assert served >= 8, f"{served} of 40 new clients of a full zone's CPU served"
        finally:
            for s in busy:
                s.close()
            os.sched_setaffinity(0, old)
        srv.wait_log("zone 0 has room again", timeout=5)
