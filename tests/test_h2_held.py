"""HTTP/2 clients that close their windows on proxied responses (issue 36, point 2): what a
connection may hold is bounded across its streams, ringx stops reading from the upstreams
of streams whose client does not read, and a client that leaves takes its exchanges (and
their upstream connections) with it at once.

The upstream is nginx serving a 256 KiB file; the clients are raw h2c connections (the `h2`
package) that announce SETTINGS_INITIAL_WINDOW_SIZE = 0 and open 128 GETs each. On the
build before, each stream buffered up to 256 KiB (the exchange's high-water mark), and after
the clients closed their upstream connections stayed until the upstream's read timeout."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import threading
import time

import pytest

from conftest import free_port, runtime_section
from nginx_peer import NginxPeer

h2 = pytest.importorskip("h2", reason="Python h2 is not installed (tests/requirements.txt)")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402

OBJECT = 256 * 1024
STREAMS = 128


class Stingy:
    """An h2c connection that grants no window and opens `n` GETs of `path`."""

    def __init__(self, port: int, path: str, n: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.c = h2.connection.H2Connection(cfg)
        self.c.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0,
                                         h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
        self.c.initiate_connection()
        self.want = set()
        for _ in range(n):
            sid = self.c.get_next_available_stream_id()
            self.c.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"http"),
                                      (b":path", path.encode()), (b":authority", b"x.test")],
                                end_stream=True)
            self.want.add(sid)
        self.sock.sendall(self.c.data_to_send())
        self.heads: set[int] = set()

    def wait_heads(self, deadline: float):
        """Reads until every stream's response head is in (no window needed for those)."""
        while not self.want <= self.heads:
            assert time.monotonic() < deadline, f"{len(self.heads)} of {len(self.want)} heads"
            data = self.sock.recv(65536)
            assert data, "ringx closed the connection"
            for ev in self.c.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    self.heads.add(ev.stream_id)
            out = self.c.data_to_send()
            if out:
                self.sock.sendall(out)

    def close(self):
        self.sock.close()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def connections_to(port: int) -> int:
    """Established TCP connections to 127.0.0.1:port (ringx's upstream connections)."""
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return len([ln for ln in out.splitlines() if ln.strip()])


@pytest.fixture
def site(ringx, tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    (www / "obj").write_bytes(os.urandom(OBJECT))
    (www / "small").write_bytes(b"small\n")
    up_port, port = free_port(), free_port()
    nginx = NginxPeer(tmp_path / "nginx", f"""
    server {{
        listen 127.0.0.1:{up_port};
        keepalive_requests 100000;
        location / {{ root {www}; }}
    }}""", up_port, worker_connections=4096)
    cfg = runtime_section(None, zones=1) + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "http://127.0.0.1:{up_port}"
"""
    srv = ringx.make(cfg, name="h2-held")
    yield port, up_port, srv
    nginx.stop()


def stingy_clients(port: int, srv, clients: int, secs: float):
    """After one ordinary proxied request (pools, buffers, code paths warm), ringx's RSS as the
    baseline; then `clients` Stingy connections, each with every response head in. Returns
    the baseline (KiB), the clients and the deadline (`secs` from the start) they met."""
    subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null",
                    f"http://127.0.0.1:{port}/obj"], check=True, timeout=30)
    base = rss_kib(srv.proc.pid)
    stingy = [Stingy(port, "/obj", STREAMS) for _ in range(clients)]
    deadline = time.monotonic() + secs
    for s in stingy:
        s.wait_heads(deadline)
    return base, stingy, deadline


def test_closed_windows_hold_little_and_let_go_when_the_clients_leave(site):
    port, up_port, srv = site
    clients = 2
    base, stingy, deadline = stingy_clients(port, srv, clients, 60)
    # Every stream is under way upstream. ringx reads each one's response up to the
    # stream's share and then stops reading, keeping its upstream connection (the kernel's
    # buffers hold the rest); the build before read each whole 256 KiB object into memory
    # and let the upstream connection go. Wait until every stream holds its upstream
    # connection, failing as soon as the growth passes the bound.
    streams = clients * STREAMS
    bound = streams * 64  # KiB: 64 KiB a stream
    while True:
        grown = rss_kib(srv.proc.pid) - base
        assert grown < bound, f"ringx RSS grew {grown} KiB for {streams} held streams"
        # (The first stream of each connection starts alone, with the whole budget, and its
        # 256 KiB may all be read: it completes and gives its upstream connection back.)
        if connections_to(up_port) >= streams - clients:
            break
        assert time.monotonic() < deadline, f"{connections_to(up_port)} upstream connections"
        time.sleep(0.05)
    grown = rss_kib(srv.proc.pid) - base
    print(f"ringx RSS grew {grown} KiB for {streams} held streams "
          f"({grown / streams:.1f} KiB each)")
    assert grown < bound, f"ringx RSS grew {grown} KiB for {streams} held streams"
    for s in stingy:
        s.close()
    # The clients left: their exchanges end at once, and with them the upstream connections
    # (the build before kept them until the upstream's read timeout, 60 s).
    deadline = time.monotonic() + 10
    while connections_to(up_port) > 1:
        assert time.monotonic() < deadline, f"{connections_to(up_port)} upstream connections left"
        time.sleep(0.05)


def test_the_memory_of_a_crowd_goes_back_to_the_kernel_when_it_leaves(site):
    """20 such clients (2560 streams, each with its upstream connection) grow ringx by tens of
    megabytes. When they leave, the zone gives the freed memory back to the kernel (ctx/trim.rs):
    on the build before, glibc kept it in the zone's arena and ringx's RSS stayed where the
    crowd had taken it, for as long as ringx ran. A normal client asks all along: its requests
    keep the zone's timer busy, which must not lose the look at freed memory."""
    port, up_port, srv = site
    clients = 20
    stop = threading.Event()

    def normal():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while not stop.wait(0.02):
            c.request("GET", "/small")
            assert c.getresponse().read() == b"small\n"

    t = threading.Thread(target=normal, daemon=True)
    t.start()
    try:
        crowd_leaves(port, up_port, srv, clients)
    finally:
        stop.set()
        t.join()


def crowd_leaves(port, up_port, srv, clients):
    base, stingy, deadline = stingy_clients(port, srv, clients, 120)
    while connections_to(up_port) < clients * (STREAMS - 1):
        assert time.monotonic() < deadline, f"{connections_to(up_port)} upstream connections"
        time.sleep(0.05)
    grown = rss_kib(srv.proc.pid) - base
    assert grown > 32 * 1024, f"the crowd grew ringx by {grown} KiB only: nothing to give back"
    for s in stingy:
        s.close()
    # Half of the growth back: what stays is pages that live allocations still touch.
    target = base + grown // 2
    deadline = time.monotonic() + 10
    while (now := rss_kib(srv.proc.pid)) > target:
        assert time.monotonic() < deadline, (
            f"ringx grew {grown} KiB for the crowd and still holds {now - base} KiB of it, "
            "10 s after it left")
        time.sleep(0.05)
    print(f"ringx grew {grown} KiB; back to +{now - base} KiB after the crowd left")
