"""The attacks that took down HTTP/2 servers (issue 22), each mounted with raw frames (Python
h2 for the handshake and HPACK, hand-built frames for the rest) against the real binary while a
normal HTTP/2 client keeps being served on its own connection. Each attack must end the way its
limit says (GOAWAY ENHANCE_YOUR_CALM, a stream reset, a 431, a close) and show on /metrics; the
normal client's latency during it is printed (reported, never asserted: no speed in tests).

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs -s tests/test_h2_attacks.py
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
import urllib.request

import pytest

from conftest import free_port, runtime_section
from upstream_server import UpstreamServer

h2 = pytest.importorskip("h2", reason="Python h2 is not installed (tests/requirements.txt)")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import hpack  # noqa: E402  (installed with h2)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = range(10)
END_STREAM, END_HEADERS = 0x1, 0x4
PROTOCOL, FLOW, STREAM_CLOSED, FRAME_SIZE, CALM = 0x1, 0x3, 0x5, 0x6, 0xB


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, kind, flags, stream) + payload


class Site:
    pass


@pytest.fixture(scope="module")
def site(ringx_module, tmp_path_factory):
    d = tmp_path_factory.mktemp("h2att")
    www = d / "www"
    www.mkdir()
    (www / "big.bin").write_bytes(os.urandom(4 << 20))
    up = UpstreamServer("up")
    s = Site()
    s.port, s.admin, s.up = free_port(), free_port(), up
    cfg = runtime_section(None, zones=1) + f"""
[http]
send_timeout = "2s"
[http2]
max_resets = 100
max_control_frames = 200
max_empty_frames = 50
max_continuations = 8
max_header_list_size = "16k"
[admin]
listen = "127.0.0.1:{s.admin}"
[[server]]
listen = ["127.0.0.1:{s.port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "fine\\n" }}
  [[server.location]]
  path = "/f/"
  alias = "{www}/"
  [[server.location]]
  path = "/up/"
  proxy_pass = "http://{up.addr}"
"""
    s.srv = ringx_module.make(cfg, name="h2att")
    yield s
    up.close()


def metric(site, reason: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{site.admin}/metrics", timeout=5) as r:
        m = r.read().decode()
    want = f'ringx_http2_errors_total{{zone="0",reason="{reason}"}}'
    return sum(float(ln.split()[-1]) for ln in m.splitlines() if ln.startswith(want))


class Normal:
    """A well-behaved client on its own connection: one GET after another, latencies kept."""

    def __init__(self, port: int):
        self.port = port
        self.lat: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def __enter__(self):
        self.t.start()
        self._wait(1)  # served before the attack starts
        return self

    def __exit__(self, *a):
        # Attacks that trip their limit end in milliseconds: the client goes on until it
        # has been served a few more times, through the attack's end and after it.
        self._wait(len(self.lat) + 5)
        self._stop.set()
        self.t.join(10)

    def _wait(self, n: int) -> None:
        deadline = time.time() + 10
        while len(self.lat) < n and not self.errors and time.time() < deadline:
            time.sleep(0.01)

    def run(self):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            c.initiate_connection()
            s.sendall(c.data_to_send())
            sid = 1
            while not self._stop.is_set():
                t0 = time.perf_counter()
                c.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                     (":authority", "n")], end_stream=True)
                s.sendall(c.data_to_send())
                done = False
                while not done:
                    data = s.recv(65536)
                    if not data:
                        raise OSError("closed")
                    for ev in c.receive_data(data):
                        if isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                            done = True
                    s.sendall(c.data_to_send())
                self.lat.append(time.perf_counter() - t0)
                sid += 2
                time.sleep(0.005)
        except Exception as e:  # noqa: BLE001
            self.errors.append(repr(e))

    def report(self, what: str) -> None:
        assert not self.errors, f"the normal client failed during {what}: {self.errors}"
        assert len(self.lat) >= 6, f"the normal client was not served during {what}"
        lat = sorted(self.lat)
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
        print(f"\n[{what}] normal client: {len(lat)} requests, p50 {p(0.5):.2f} ms, "
              f"p99 {p(0.99):.2f} ms, max {lat[-1] * 1000:.2f} ms")


class Raw:
    """An attacker's connection: the handshake through h2, then raw frames."""

    def __init__(self, port: int, settings: dict | None = None):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.enc = hpack.Encoder()
        self.s.sendall(PREFACE + frame(SETTINGS, 0, 0, b"".join(
            struct.pack(">HI", k, v) for k, v in (settings or {}).items())))
        self.buf = b""

    def block(self, path: str = "/", method: str = "GET", extra=()) -> bytes:
        return self.enc.encode([(":method", method), (":scheme", "http"), (":path", path),
                                (":authority", "a"), *extra])

    def send(self, b: bytes) -> bool:
        try:
            self.s.sendall(b)
            return True
        except OSError:
            return False

    def frames(self, timeout: float = 5.0):
        """Frames until the peer closes or `timeout` passes quietly."""
        self.s.settimeout(timeout)
        out = []
        while True:
            try:
                d = self.s.recv(1 << 16)
            except (socket.timeout, ConnectionResetError):
                break
            if not d:
                break
            self.buf += d
            while len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) < 9 + n:
                    break
                k, f, sid = self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big")
                out.append((k, f, sid & 0x7FFFFFFF, self.buf[9:9 + n]))
                self.buf = self.buf[9 + n:]
            if any(k == GOAWAY for k, *_ in out):
                # What follows is the close.
                continue
        return out


def goaway_code(frames) -> int | None:
    for k, _, _, p in frames:
        if k == GOAWAY:
            return int.from_bytes(p[4:8], "big")
    return None


def rst_code(frames, sid: int) -> int | None:
    for k, _, s, p in frames:
        if k == RST and s == sid:
            return int.from_bytes(p[:4], "big")
    return None


def flood(raw: Raw, chunks) -> None:
    """Sends until the server stops taking it (it closed) or the chunks run out."""
    for c in chunks:
        if not raw.send(c):
            break


def test_rapid_reset(site):
    before = metric(site, "rapid_reset")
    with Normal(site.port) as n:
        r = Raw(site.port)
        def gen():
            for i in range(5000):
                sid = 1 + 2 * i
                yield frame(HEADERS, END_HEADERS, sid, r.block()) + frame(RST, 0, sid, struct.pack(">I", 8))
        flood(r, gen())
        assert goaway_code(r.frames()) == CALM
    n.report("rapid reset")
    assert metric(site, "rapid_reset") == before + 1


def test_continuation_flood(site):
    before = metric(site, "continuation_flood")
    with Normal(site.port) as n:
        r = Raw(site.port)
        b = r.block()
        flood(r, [frame(HEADERS, END_STREAM, 1, b[:3])]
              + [frame(CONT, 0, 1, b"\x00" * 1024) for _ in range(2000)])
        assert goaway_code(r.frames()) == CALM
    n.report("CONTINUATION flood")
    assert metric(site, "continuation_flood") == before + 1


def test_hpack_bomb_is_a_431_and_costs_no_memory(site):
    before = metric(site, "header_list_too_large")
    rss0 = rss(site.srv.pid)
    with Normal(site.port) as n:
        r = Raw(site.port)
        # A 4000-byte field indexed into the table, then 12,000 one-byte references: 48 MB
        # decoded from a 16 kB block.
        lit = b"\x40\x01x" + bytes([0x7F]) + enc_int(4000 - 127) + b"a" * 4000
        bomb = r.block() + lit + bytes([0x80 | 62]) * 12000
        r.send(frame(HEADERS, END_STREAM, 1, bomb[:16000]) + frame(CONT, END_HEADERS, 1, bomb[16000:]))
        r.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, r.block()))
        fr = r.frames(2)
        statuses = [hpack.Decoder().decode(p) for k, _, s, p in fr if k == HEADERS and s == 1]
        assert goaway_code(fr) is None
        assert any(k == HEADERS and s == 3 for k, _, s, _ in fr), "the connection goes on"
    n.report("HPACK bomb")
    assert statuses and dict(statuses[0]).get(":status") == "431"
    assert metric(site, "header_list_too_large") == before + 1
    assert rss(site.srv.pid) - rss0 < 16 << 20


def enc_int(n: int) -> bytes:
    out = b""
    while n >= 128:
        out += bytes([(n % 128) | 0x80])
        n //= 128
    return out + bytes([n])


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    return 0


@pytest.mark.parametrize("kind,reason", [(SETTINGS, "settings_flood"), (PING, "ping_flood")])
def test_settings_and_ping_floods(site, kind, reason):
    before = metric(site, reason)
    with Normal(site.port) as n:
        r = Raw(site.port)
        payload = b"" if kind == SETTINGS else b"12345678"
        flood(r, [frame(kind, 0, 0, payload) * 100 for _ in range(100)])
        assert goaway_code(r.frames()) == CALM
    n.report(reason)
    assert metric(site, reason) == before + 1


def test_empty_data_flood(site):
    before = metric(site, "empty_frame_flood")
    with Normal(site.port) as n:
        r = Raw(site.port)
        flood(r, [frame(HEADERS, END_HEADERS, 1, r.block("/up/upload", "POST"))]
              + [frame(DATA, 0, 1) * 100 for _ in range(50)])
        assert goaway_code(r.frames()) == CALM
    n.report("empty DATA flood")
    assert metric(site, "empty_frame_flood") == before + 1


def test_zero_window_stall_is_closed_at_send_timeout(site):
    before = metric(site, "zero_window_stall")
    with Normal(site.port) as n:
        r = Raw(site.port, {4: 0})  # SETTINGS_INITIAL_WINDOW_SIZE = 0
        for i in range(20):
            r.send(frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, r.block("/f/big.bin")))
        t0 = time.time()
        fr = r.frames(timeout=10)
        took = time.time() - t0
    n.report("zero-window stall")
    assert not any(k == DATA and len(p) > 0 for k, _, _, p in fr), "nothing past a zero window"
    assert goaway_code(fr) == CALM and took < 8, took
    assert metric(site, "zero_window_stall") == before + 1


@pytest.mark.parametrize("name,build,conn_code,stream_code", [
    ("DATA on stream 0", lambda r: frame(DATA, 0, 0, b"x"), PROTOCOL, None),
    ("an even stream id", lambda r: frame(HEADERS, END_HEADERS | END_STREAM, 2, r.block()), PROTOCOL, None),
    ("a frame over max_frame_size", lambda r: frame(DATA, 0, 1, b"x" * 16385), FRAME_SIZE, None),
    ("WINDOW_UPDATE of 0 on the connection", lambda r: frame(WINDOW, 0, 0, struct.pack(">I", 0)), PROTOCOL, None),
    ("PUSH_PROMISE from a client", lambda r: frame(PUSH, END_HEADERS, 1, b"\0\0\0\2" + r.block()), PROTOCOL, None),
    ("a PING of 7 bytes", lambda r: frame(PING, 0, 0, b"1234567"), FRAME_SIZE, None),
    ("an uppercase field name",
     lambda r: frame(HEADERS, END_HEADERS | END_STREAM, 1, r.block(extra=[("X-Upper", "1")])), None, PROTOCOL),
    ("a Connection field",
     lambda r: frame(HEADERS, END_HEADERS | END_STREAM, 1, r.block(extra=[("connection", "close")])), None, PROTOCOL),
    ("no :path",
     lambda r: frame(HEADERS, END_HEADERS | END_STREAM, 1, r.enc.encode([(":method", "GET"), (":scheme", "http")])),
     None, PROTOCOL),
    ("a pseudo-header after a field",
     lambda r: frame(HEADERS, END_HEADERS | END_STREAM, 1, r.enc.encode(
         [(":method", "GET"), (":scheme", "http"), ("x", "y"), (":path", "/")])), None, PROTOCOL),
    ("DATA on a closed stream",
     lambda r: frame(HEADERS, END_HEADERS | END_STREAM, 1, r.block()) + frame(DATA, 0, 1, b"late"),
     None, STREAM_CLOSED),
])
def test_invalid_frames_get_the_rfc_error(site, name, build, conn_code, stream_code):
    r = Raw(site.port)
    r.send(build(r))
    fr = r.frames(2)
    if conn_code is not None:
        assert goaway_code(fr) == conn_code, (name, fr)
    else:
        assert rst_code(fr, 1) == stream_code, (name, fr)
        assert goaway_code(fr) is None, name


SMUGGLE = [
    ("CR LF in a value", [("x-a", "1\r\nx-smuggled: evil")], b""),
    ("LF in a value", [("x-a", "1\nx-smuggled: evil")], b""),
    ("NUL in a value", [("x-a", "1\0evil")], b""),
    ("transfer-encoding", [("transfer-encoding", "chunked")], b"0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"),
    ("two content-lengths", [("content-length", "1"), ("content-length", "40")],
     b"xGET /smuggled HTTP/1.1\r\nHost: evil\r\n\r\n"),
    ("content-length shorter than the DATA", [("content-length", "1")],
     b"xGET /smuggled HTTP/1.1\r\nHost: evil\r\n\r\n"),
]


@pytest.mark.parametrize("name,extra,body", SMUGGLE, ids=[s[0] for s in SMUGGLE])
def test_h2_to_h1_smuggling_never_reaches_the_upstream(site, name, extra, body):
    r = Raw(site.port)
    f = END_HEADERS | (0 if body else END_STREAM)
    out = frame(HEADERS, f, 1, r.enc.encode([(":method", "POST"), (":scheme", "http"),
                                              (":path", "/up/echo"), (":authority", "a"), *extra]))
    if body:
        out += frame(DATA, END_STREAM, 1, body)
    r.send(out)
    fr = r.frames(2)
    assert rst_code(fr, 1) == PROTOCOL or goaway_code(fr) == PROTOCOL, (name, fr)
    assert_upstream_clean(site)


@pytest.mark.parametrize("name,path,authority", [
    (":path with a space and a request line", "/up/echo HTTP/1.1\r\nHost: evil", "a"),
    (":path in absolute form", "http://evil/up/echo", "a"),
    (":path without a slash", "up/echo", "a"),
    (":authority with CR LF", "/up/echo", "a\r\nx-smuggled: evil"),
    (":authority with userinfo", "/up/echo", "user@evil"),
])
def test_path_and_authority_abuse_never_reaches_the_upstream(site, name, path, authority):
    r = Raw(site.port)
    r.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, r.enc.encode(
        [(":method", "GET"), (":scheme", "http"), (":path", path), (":authority", authority)])))
    fr = r.frames(2)
    status = [dict(hpack.Decoder().decode(p)).get(":status") for k, _, s, p in fr
              if k == HEADERS and s == 1]
    assert rst_code(fr, 1) == PROTOCOL or status == ["400"], (name, fr)
    assert_upstream_clean(site)


def assert_upstream_clean(site):
    time.sleep(0.2)
    for req in site.up.requests:
        text = repr(req)
        assert "smuggled" not in text and "evil" not in text, req
