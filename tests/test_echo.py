"""`ringx echo`: the length-prefixed echo protocol of the netpoll benchmark, on both engines."""
import os
import socket
import struct
import subprocess
import time

import pytest

from conftest import free_port


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def read_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def start_echo(ringx_bin, port, args, cpu=None):
    """Starts `ringx echo --listen 127.0.0.1:PORT ARGS...` (pinned to `cpu` if given) and
    waits until it accepts connections."""
    cmd = [ringx_bin, "echo", "--listen", f"127.0.0.1:{port}", *args]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail("echo server did not start")


def stop_echo(proc, engine):
    """SIGTERM: the server must exit 0, and an io_uring server must not have fallen back."""
    proc.terminate()
    try:
        assert proc.wait(5) == 0
    finally:
        proc.kill()
        err = proc.stderr.read().decode()
        if engine == "uring":
            assert "using the epoll driver" not in err, err


@pytest.fixture(params=[("uring", 0), ("epoll", 0), ("uring", 2), ("epoll", 3)],
                ids=["uring", "epoll", "uring-pool2", "epoll-pool3"])
def echo_server(request, ringx_bin):
    port = free_port()
    engine, pool = request.param
    proc = start_echo(ringx_bin, port, ["--zones", "1", "--engine", engine, "--pool", str(pool)])
    yield port, engine
    stop_echo(proc, engine)


def test_messages_echo_in_order(echo_server):
    port, _ = echo_server
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    msgs = [b"", b"x", os.urandom(1024), os.urandom(100_000), b"last"]
    s.sendall(b"".join(frame(m) for m in msgs))
    for m in msgs:
        (n,) = struct.unpack(">I", read_exact(s, 4))
        assert n == len(m)
        assert read_exact(s, n) == m
    s.close()


def test_message_split_byte_by_byte(echo_server):
    port, _ = echo_server
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = frame(b"hello, ring")
    for b in data:
        s.sendall(bytes([b]))
        time.sleep(0.001)
    assert read_exact(s, len(data)) == data
    s.close()


def test_many_connections_1k_messages(echo_server):
    port, _ = echo_server
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(100)]
    payload = os.urandom(1024)
    for round_ in range(10):
        for s in socks:
            s.sendall(frame(payload))
        for s in socks:
            (n,) = struct.unpack(">I", read_exact(s, 4))
            assert n == 1024 and read_exact(s, n) == payload
    for s in socks:
        s.close()


def test_oversized_frame_closes(echo_server):
    port, _ = echo_server
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(struct.pack(">I", 0xFFFFFFFF))
    assert s.recv(10) == b""
    s.close()
