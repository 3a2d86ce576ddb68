"""gRPC through ringx (`proxy_pass = "grpc://…"`) with Python's grpcio on both sides: unary,
server, client and bidirectional streaming byte-exact, metadata and trailers passed, the
upstream's status passed, many calls on one multiplexed upstream connection, and the
statuses ringx makes itself: UNAVAILABLE for an upstream that is down or dies mid-stream,
DEADLINE_EXCEEDED when `grpc-timeout` passes with an upstream that never answers."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent import futures
from pathlib import Path

import pytest

from conftest import close_listener, free_port, runtime_section
from tls_pki import Pki

grpc = pytest.importorskip("grpc", reason="grpcio is not installed (tests/requirements.txt)")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402

HERE = Path(__file__).resolve().parent


def start_upstream(port: int, *tls: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, str(HERE / "grpc_upstream.py"), str(port), *tls],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdout.readline().strip() == b"ready"
    return p


class BlackHole:
    """Accepts TCP connections and reads them, never answering (not even SETTINGS)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        close_listener(self.sock)
        for c in self.conns:
            c.close()


class Site:
    pass


@pytest.fixture(scope="module")
def site(ringx_module):
    s = Site()
    s.up_port = free_port()
    s.up = start_upstream(s.up_port)
    s.dying_port = free_port()
    s.dead_port = free_port()  # nothing listens there
    s.hole = BlackHole()
    s.main, s.dying, s.dead, s.slow, s.admin = (free_port() for _ in range(5))
    cfg = runtime_section(None, zones=1) + f"""
[http]
client_max_body_size = "8m"
[admin]
listen = "127.0.0.1:{s.admin}"
[[server]]
listen = ["127.0.0.1:{s.main}"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpc://127.0.0.1:{s.up_port}"
[[server]]
listen = ["127.0.0.1:{s.dying}"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpc://127.0.0.1:{s.dying_port}"
[[server]]
listen = ["127.0.0.1:{s.dead}"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpc://127.0.0.1:{s.dead_port}"
[[server]]
listen = ["127.0.0.1:{s.slow}"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpc://127.0.0.1:{s.hole.port}"
"""
    s.srv = ringx_module.make(cfg, name="grpc")
    yield s
    s.up.kill()
    s.up.wait()
    s.hole.close()


def channel(port: int) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{port}")


def metrics(site) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{site.admin}/metrics", timeout=5).read().decode()


def test_unary_with_metadata_and_trailers(site):
    with channel(site.main) as ch:
        call = ch.unary_unary("/t.T/Unary")
        resp, info = call.with_call(b"hello grpc", metadata=(("x-req", "1"),), timeout=10)
        assert resp == b"cprg olleh"
        assert ("x-head", "h") in info.initial_metadata()
        assert ("x-trail", "t") in info.trailing_metadata()
        assert info.code() == grpc.StatusCode.OK


def test_trailers_that_may_not_be_trailers_are_dropped(site):
    """The upstream's trailers pass but for those that may never be trailers (RFC 9110
    §6.5.1; issue 36): gRPC's status and the call's own metadata pass."""
    with channel(site.main) as ch:
        resp, info = ch.unary_unary("/t.T/BadTrailers").with_call(b"x", timeout=10)
    assert resp == b"x" and info.code() == grpc.StatusCode.OK
    got = dict(info.trailing_metadata())
    assert got.get("x-trail") == "t", got
    assert not {"set-cookie", "authorization", "x-forwarded-for", "cache-control"} & set(got), got


def test_the_upstreams_status_passes_through(site):
    with channel(site.main) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/t.T/Fail")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert e.value.details() == "nope"


def test_server_streaming_byte_exact_past_the_windows(site):
    # 4 MB in messages of 200 KB: far more than a window, so it flows only as ringx
    # releases what it sent on.
    with channel(site.main) as ch:
        got = list(ch.unary_stream("/t.T/ServerStream")(b"20 200000", timeout=30))
    assert len(got) == 20
    for i, m in enumerate(got):
        assert m == bytes([i % 251]) * 200000


def test_client_streaming_byte_exact(site):
    rnd = random.Random(7)
    msgs = [os.urandom(rnd.choice([0, 1, 100, 16384, 70000, 300000])) for _ in range(40)]
    want = hashlib.sha256(b"".join(msgs)).hexdigest().encode() + b" %d" % len(msgs)
    with channel(site.main) as ch:
        assert ch.stream_unary("/t.T/ClientStream")(iter(msgs), timeout=30) == want


def test_a_request_over_client_max_body_size_is_resource_exhausted(site):
    msgs = [b"z" * 1000000 for _ in range(9)]
    with channel(site.main) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.stream_unary("/t.T/ClientStream")(iter(msgs), timeout=30)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
        # The connection goes on.
        assert ch.unary_unary("/t.T/Unary")(b"ab", timeout=10) == b"ba"


def test_bidi_streaming(site):
    msgs = [f"message {i} ".encode() * (i * 50 + 1) for i in range(30)]
    with channel(site.main) as ch:
        got = list(ch.stream_stream("/t.T/Bidi")(iter(msgs), timeout=30))
    assert got == [m.upper() for m in msgs]


def test_many_concurrent_calls_share_upstream_connections(site):
    before = metrics(site)
    with channel(site.main) as ch:
        call = ch.unary_unary("/t.T/Unary")
        with futures.ThreadPoolExecutor(16) as pool:
            reqs = [os.urandom(random.randint(1, 50000)) for _ in range(200)]
            got = list(pool.map(lambda r: call(r, timeout=30), reqs))
    assert got == [r[::-1] for r in reqs]
    after = metrics(site)

    def total(text, name):
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith(name) and not line.startswith("#"))
    calls = total(after, "ringx_grpc_calls_total") - total(before, "ringx_grpc_calls_total")
    conns = (total(after, "ringx_grpc_upstream_connections_total")
             - total(before, "ringx_grpc_upstream_connections_total"))
    assert calls == 200
    # Multiplexed: far fewer upstream connections than calls (a new one only when the
    # server's stream limit is reached or one was closed).
    assert conns <= 4, conns


def test_an_http1_request_to_a_grpc_location_is_505(site):
    req = urllib.request.Request(f"http://127.0.0.1:{site.main}/t.T/Unary", data=b"x",
                                 headers={"content-type": "application/grpc"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 505
    with channel(site.main) as ch:
        assert ch.unary_unary("/t.T/Unary")(b"ok", timeout=10) == b"ko"


def test_upstream_down_is_unavailable(site):
    with channel(site.dead) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/t.T/Unary")(b"x", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value


def test_server_dying_mid_stream_is_unavailable(site):
    up = start_upstream(site.dying_port)
    try:
        with channel(site.dying) as ch:
            it = ch.unary_stream("/t.T/Hang")(b"3", timeout=30)
            assert [next(it) for _ in range(3)] == [b"x"] * 3
            up.kill()
            with pytest.raises(grpc.RpcError) as e:
                next(it)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
    finally:
        up.kill()
        up.wait()


def test_grpc_timeout_is_a_deadline(site):
    """An upstream that never answers: the call ends when its grpc-timeout passes, with
    DEADLINE_EXCEEDED from ringx (a raw HTTP/2 client, with no deadline of its own)."""
    s = socket.create_connection(("127.0.0.1", site.slow), timeout=10)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", "/t.T/Unary"),
                       (":authority", "a"), ("content-type", "application/grpc"),
                       ("te", "trailers"), ("grpc-timeout", "300m")])
    c.send_data(1, b"\x00\x00\x00\x00\x01x", end_stream=True)
    s.sendall(c.data_to_send())
    t0 = time.monotonic()
    fields = None
    while fields is None:
        data = s.recv(65536)
        assert data, "connection closed"
        for ev in c.receive_data(data):
            if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                f = dict((k.decode(), v.decode()) for k, v in ev.headers)
                if "grpc-status" in f:
                    fields = f
        s.sendall(c.data_to_send())
    took = time.monotonic() - t0
    s.close()
    assert fields["grpc-status"] == "4", fields
    assert fields["grpc-message"] == "deadline exceeded"
    assert 0.25 < took < 3, took


def test_local_statuses_are_counted(site):
    m = metrics(site)
    assert 'ringx_grpc_local_status_total{' in m, m


def test_grpcs_upstream_over_tls_with_alpn_h2(ringx, tmp_path):
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("up", ["up.test"])
    up_port, p = free_port(), free_port()
    up = start_upstream(up_port, str(cert), str(key))
    try:
        ringx.make(runtime_section(None) + f"""
[[upstream]]
name = "secure"
servers = ["127.0.0.1:{up_port}"]
tls = {{ sni = "up.test", ca = "{pki.ca_path}" }}
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpcs://secure"
""")
        with channel(p) as ch:
            resp, info = ch.unary_unary("/t.T/Unary").with_call(b"over tls", timeout=10)
            assert resp == b"slt revo"
            assert ("x-trail", "t") in info.trailing_metadata()
            got = list(ch.unary_stream("/t.T/ServerStream")(b"5 100000", timeout=30))
            assert got == [bytes([i]) * 100000 for i in range(5)]
    finally:
        up.kill()
        up.wait()


def test_reload_with_calls_in_flight(ringx):
    """SIGHUP while gRPC calls are in flight: they finish on the upstream they started on,
    whole and with status OK; calls after the reload (on the same client connection, and on
    a new one) go where the new configuration says."""
    a_port, b_port, port = free_port(), free_port(), free_port()
    a, b = start_upstream(a_port), start_upstream(b_port)

    def cfg(up):
        return runtime_section(None, zones=1) + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpc://127.0.0.1:{up}"
"""
    try:
        srv = ringx.make(cfg(a_port))
        with channel(port) as ch:
            assert ch.unary_unary("/t.T/Who")(b"", timeout=10) == str(a_port).encode()
            msgs = [f"in flight {i} ".encode() * 100 for i in range(6)]
            first_back, go_on = threading.Event(), threading.Event()

            def slow():
                for i, m in enumerate(msgs):
                    if i == 1:
                        first_back.wait(10)
                        go_on.wait(10)
                    yield m
                    time.sleep(0.05)
            bidi_got, stream_got = [], []

            def run_bidi():
                call = ch.stream_stream("/t.T/Bidi")(slow(), timeout=30)
                for r in call:
                    bidi_got.append(r)
                    first_back.set()
                bidi_got.append(call.code())

            def run_stream():
                # A server stream held in flight across the reload: the client reads the
                # rest only after it (the windows hold the upstream meanwhile).
                for m in ch.unary_stream("/t.T/ServerStream")(b"40 100000", timeout=30):
                    stream_got.append(m)
                    go_on.wait(10)
            ts = [threading.Thread(target=run_bidi), threading.Thread(target=run_stream)]
            for t in ts:
                t.start()
            assert first_back.wait(10), "the bidi call did not start"
            srv.config_path.write_text(cfg(b_port))
            srv.signal(signal.SIGHUP)
            srv.wait_log("reload 2 applied by every zone")
            # New calls on the same client connection follow the new configuration...
            assert ch.unary_unary("/t.T/Who")(b"", timeout=10) == str(b_port).encode()
            go_on.set()
            for t in ts:
                t.join(30)
            assert bidi_got[:-1] == [m.upper() for m in msgs], len(bidi_got)
            assert bidi_got[-1] == grpc.StatusCode.OK
            assert len(stream_got) == 40 and all(m == bytes([i % 251]) * 100000
                                                for i, m in enumerate(stream_got))
        # ... and on a new one.
        with channel(port) as ch:
            assert ch.unary_unary("/t.T/Who")(b"", timeout=10) == str(b_port).encode()
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


@pytest.mark.parametrize("scheme", ["grpcs", "https"])
def test_check_refuses_a_tls_scheme_to_an_upstream_without_tls(ringx_bin, tmp_path, scheme):
    cfg = tmp_path / "bad.toml"
    text = (f'[[upstream]]\nname = "plain"\nservers = ["127.0.0.1:{free_port()}"]\n'
            f'[[server]]\nlisten = ["127.0.0.1:{free_port()}"]\n'
            f'  [[server.location]]\n  path = "/"\n  proxy_pass = "{scheme}://plain"\n')
    cfg.write_text(text)
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert out.returncode != 0, out
    assert f"{cfg}:8:16: " in out.stderr and "has no tls" in out.stderr, out.stderr
    cfg.write_text(text.replace('servers = [', 'tls = {}\nservers = ['))
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
