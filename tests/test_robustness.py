"""Incremental parsing, backpressure, client aborts, multi-zone, Date freshness."""

import email.utils
import socket
import subprocess
import threading
import time

import pytest

from conftest import free_port, runtime_section
from util_http import Conn, request

BIG = 512 * 1024


@pytest.fixture(scope="module")
def srv(engine, ringx_module, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"robust-{engine}")
    (root / "big.bin").write_bytes(bytes(range(256)) * (BIG // 256))
    p = free_port()
    cfg = runtime_section(engine) + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok" }}
  [[server.location]]
  path = "/big.bin"
  exact = true
  root = "{root}"
"""
    r = ringx_module.make(cfg, engine=engine, name=f"robust-{engine}")
    r.port = p
    yield r
    r.stop()


def _alive(port):
    with Conn(port) as c:
        c.send(request("GET", "/"))
        assert c.read_response().body == b"ok"


def test_request_sent_byte_by_byte(srv):
    raw = request("POST", "/x", headers={"Transfer-Encoding": "chunked"}) + b"3\r\nabc\r\n0\r\n\r\n" \
        + request("GET", "/y")
    with Conn(srv.port) as c:
        for i in range(len(raw)):
            c.send(raw[i:i + 1])
            if i % 16 == 0:
                time.sleep(0.001)
        assert c.read_response().status == 200
        assert c.read_response().body == b"ok"


def test_pipelined_burst_with_backpressure(srv):
    """1000 pipelined requests for a 512 KiB file while the client reads slowly
    at first: the server must neither drop nor reorder responses."""
    n_big, n_small = 20, 980
    reqs = []
    for i in range(n_big + n_small):
        reqs.append(request("GET", "/big.bin" if i % 50 == 0 else f"/s{i}"))
    blob = b"".join(reqs)
    with Conn(srv.port, timeout=30) as c:
        t = threading.Thread(target=c.sock.sendall, args=(blob,), daemon=True)
        t.start()
        time.sleep(0.3)  # let the server's send buffer fill up
        for i in range(len(reqs)):
            r = c.read_response(timeout=30)
            assert r.status == 200, (i, r)
            if i % 50 == 0:
                assert len(r.body) == BIG, i
            else:
                assert r.body == b"ok", i
        t.join(10)
        assert not t.is_alive()


def test_client_abort_mid_download(srv):
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(request("GET", "/big.bin"))
        s.recv(1000)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST while the server is still sending
    _alive(srv.port)
    assert srv.proc.poll() is None, srv.log()


def test_half_close_after_request_still_answered(srv):
    with Conn(srv.port) as c:
        c.send(request("GET", "/"))
        c.sock.shutdown(socket.SHUT_WR)
        r = c.read_response()
        assert (r.status, r.body) == (200, b"ok")
        assert c.wait_closed(3)


def test_garbage_bytes_then_alive(srv):
    for junk in (b"\x00" * 100, b"\r\n" * 10, bytes(range(256)), b"GET" + b"A" * 20000):
        with Conn(srv.port) as c:
            try:
                c.send(junk)
                c.sock.shutdown(socket.SHUT_WR)
                c.wait_closed(3)
            except OSError:
                pass
    _alive(srv.port)


def test_leading_empty_lines_tolerated(srv):
    with Conn(srv.port) as c:
        c.send(b"\r\n" + request("GET", "/"))
        r = c.read_response()
        assert (r.status, r.body) == (200, b"ok"), r


def test_date_header_advances(srv):
    with Conn(srv.port) as c:
        c.send(request("GET", "/"))
        d1 = email.utils.parsedate_to_datetime(c.read_response().header("Date"))
        time.sleep(2.1)
        c.send(request("GET", "/"))
        d2 = email.utils.parsedate_to_datetime(c.read_response().header("Date"))
        assert (d2 - d1).total_seconds() >= 1, f"Date did not advance: {d1} -> {d2}"


def test_two_zones_serve(engine, ringx):
    p = free_port()
    cfg = runtime_section(engine, zones=2) + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "z" }}
"""
    srv = ringx.make(cfg, engine=engine)
    line = [ln for ln in srv.log().splitlines() if "listening on" in ln][0]
    assert "2 zones" in line, line
    cp = subprocess.run(["ab", "-q", "-n", "1000", "-c", "20", "-k", f"http://127.0.0.1:{p}/"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert "Failed requests:        0" in cp.stdout and "Non-2xx" not in cp.stdout, cp.stdout
