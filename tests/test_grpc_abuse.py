"""gRPC clients that abuse the shared upstream connection (issue 36), with grpcio as the
upstream and a neighbour client, and raw HTTP/2 clients (the `h2` package) as attackers:

- clients that open server-streaming calls with `SETTINGS_INITIAL_WINDOW_SIZE = 0` and never
  read: their calls must not spend the shared upstream connection's window, so a neighbour's
  call is served during the attack, and at once after the attackers left;
- clients that open calls and reset them at once, by the thousand: the neighbour's calls on
  the same upstream connection are never cancelled with them.

Each attack was checked beside nginx 1.22 (`grpc_pass`), which opens one upstream connection
per call: its neighbour was served during both attacks and after them."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import free_port, runtime_section

grpc = pytest.importorskip("grpc", reason="grpcio is not installed (tests/requirements.txt)")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.errors  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402

HERE = Path(__file__).resolve().parent


def start_upstream(port: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, str(HERE / "grpc_upstream.py"), str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdout.readline().strip() == b"ready"
    return p


@pytest.fixture
def site(ringx):
    up_port, port = free_port(), free_port()
    up = start_upstream(up_port)
    cfg = runtime_section(None, zones=1) + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpc://127.0.0.1:{up_port}"
"""
    srv = ringx.make(cfg, name="grpc-abuse")
    yield port, srv
    up.kill()
    up.wait()


def grpc_message(payload: bytes) -> bytes:
    return b"\0" + len(payload).to_bytes(4, "big") + payload


class RawClient:
    """One h2c connection driven by hand."""

    def __init__(self, port: int, window: int | None = None):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.c = h2.connection.H2Connection(cfg)
        if window is not None:
            self.c.local_settings = h2.settings.Settings(
                client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.c.initiate_connection()
        self.flush()
        self.heads: set[int] = set()
        self.ended: set[int] = set()
        self.gone = False

    def flush(self):
        data = self.c.data_to_send()
        if data:
            self.sock.sendall(data)

    def call(self, method: str, payload: bytes, reset: bool = False) -> int:
        sid = self.c.get_next_available_stream_id()
        self.c.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"http"),
                                  (b":path", f"/t.T/{method}".encode()),
                                  (b":authority", f"127.0.0.1:{self.port}".encode()),
                                  (b"content-type", b"application/grpc"), (b"te", b"trailers")])
        self.c.send_data(sid, grpc_message(payload), end_stream=True)
        if reset:
            self.c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        return sid

    def pump(self) -> bool:
        """Reads what arrived (without opening any window); False once the server closed."""
        try:
            data = self.sock.recv(65536)
        except (ConnectionError, socket.timeout):
            data = b""
        if not data:
            self.gone = True
            return False
        for ev in self.c.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                self.heads.add(ev.stream_id)
            elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                self.ended.add(ev.stream_id)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.gone = True
        try:
            self.flush()
        except OSError:
            self.gone = True
        return not self.gone

    def close(self):
        self.sock.close()


def unary(port: int, timeout: float = 10.0) -> float:
    """A neighbour's unary call; returns its latency in seconds."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        t = time.monotonic()
        assert ch.unary_unary("/t.T/Unary")(b"ping", timeout=timeout) == b"gnip"
        return time.monotonic() - t


def test_clients_with_closed_windows_cannot_wedge_the_shared_upstream(site):
    """24 server-streaming calls that never read hold 24 × 64 KiB of the upstream's sends,
    more than ringx's upstream connection window (1 MiB) on the build before: there the
    neighbour's call on the same connection timed out during the attack, and for good after
    the attackers left (their streams' bytes were never returned to the connection window)."""
    port, _ = site
    attackers = [RawClient(port, window=0) for _ in range(2)]
    want = {a: {a.call("ServerStream", b"200 65536") for _ in range(12)} for a in attackers}
    for a in attackers:
        a.flush()
    deadline = time.monotonic() + 60
    for a in attackers:
        # Every call started upstream: its response head came back (no window needed).
        while not want[a] <= a.heads:
            assert time.monotonic() < deadline, "the attackers' calls never started"
            assert a.pump(), "ringx closed an attacker's connection"
    # During the attack: the neighbour is served, call after call.
    during = [unary(port) for _ in range(5)]
    for a in attackers:
        a.close()
    # At once after: the attackers' streams are gone and their window is back.
    after = unary(port)
    print(f"neighbour during the attack: {[round(x * 1000, 1) for x in during]} ms; "
          f"after: {after * 1000:.1f} ms")


def test_a_reset_storm_cancels_no_neighbour(site):
    """Clients open calls and reset each at once (HEADERS + DATA + RST_STREAM(CANCEL)), by
    the thousand, while a neighbour makes unary calls through the same zone, hence the
    same upstream connection. The storm ends in GOAWAY for the attackers (rapid reset); the
    neighbour's calls all succeed: a reset reaches the upstream for the attacker's own
    stream only."""
    port, _ = site
    stop = threading.Event()
    results: list[object] = []

    def neighbour():
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = ch.unary_unary("/t.T/Unary")
            while not stop.is_set():
                t = time.monotonic()
                try:
                    assert call(b"ping", timeout=10) == b"gnip"
                    results.append(time.monotonic() - t)
                except grpc.RpcError as e:
                    results.append((e.code(), e.details()))

    t = threading.Thread(target=neighbour)
    t.start()
    try:
        # Wait until the neighbour is under way, then storm.
        deadline = time.monotonic() + 30
        while not results:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        def storm():
            a = RawClient(port)
            for _ in range(1000):
                a.call("Unary", b"x", reset=True)
                try:
                    a.flush()
                except OSError:
                    break  # the GOAWAY came and ringx closed the connection
            a.close()

        storms = [threading.Thread(target=storm) for _ in range(10)]
        for s in storms:
            s.start()
        for s in storms:
            s.join()
        seen = len(results)
        # A few more neighbour calls after the storm, then stop.
        deadline = time.monotonic() + 30
        while len(results) < seen + 3:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        stop.set()
        t.join()
    print(f"neighbour calls: {len(results)}")
    failed = [r for r in results if not isinstance(r, float)]
    assert not failed, f"neighbour calls failed during a reset storm: {failed} of {len(results)}"
