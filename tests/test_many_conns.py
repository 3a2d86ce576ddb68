"""10,000 idle keep-alive connections on one zone, per engine."""

import errno
import resource
import selectors
import socket
import struct
import time

import pytest

from conftest import free_port, runtime_section
from util_http import get

N = 10_000
BATCH = 1000
REQ = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
PHASE_TIMEOUT = 40.0  # generous hard bound per phase; not a speed assertion


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need} needed for {N} connections")
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(hard, 20000), hard))


def _complete(buf: bytes) -> bool:
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return False
    head = buf[:i].lower()
    j = head.find(b"content-length:")
    if j < 0:
        return True
    n = int(head[j + 15:].split(b"\r\n")[0].strip())
    return len(buf) >= i + 4 + n


def _exchange(socks, connecting: bool, deadline: float) -> list[int]:
    """For every socket: (finish connecting,) send REQ, read one full response.
    Returns the status codes; raises on timeout."""
    sel = selectors.DefaultSelector()
    bufs = {}
    statuses = {}
    try:
        for s in socks:
            if connecting:
                sel.register(s, selectors.EVENT_WRITE)
            else:
                s.send(REQ)
                bufs[s] = b""
                sel.register(s, selectors.EVENT_READ)
        pending = len(socks)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out with {pending}/{len(socks)} connections unanswered")
            for key, ev in sel.select(timeout=min(left, 1.0)):
                s = key.fileobj
                if ev & selectors.EVENT_WRITE and s not in bufs:
                    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    assert err == 0, f"connect failed: {errno.errorcode.get(err, err)}"
                    s.send(REQ)
                    bufs[s] = b""
                    sel.modify(s, selectors.EVENT_READ)
                    continue
                try:
                    chunk = s.recv(4096)
                except BlockingIOError:
                    continue
                assert chunk, f"server closed a keep-alive connection (after {bufs[s]!r})"
                bufs[s] += chunk
                if _complete(bufs[s]):
                    statuses[s] = int(bufs[s].split(b" ", 2)[1])
                    sel.unregister(s)
                    pending -= 1
        return [statuses[s] for s in socks]
    finally:
        sel.close()


def test_10k_idle_keepalive_connections(engine, ringx):
    _raise_nofile(N + 1000)
    p = free_port()
    cfg = runtime_section(engine, extra="max_conns = 16384\n") + f"""
[http]
keepalive_timeout = "5m"
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok" }}
"""
    srv = ringx.make(cfg, engine=engine)
    socks: list[socket.socket] = []
    try:
        # phase 1: open N connections in batches, one request each
        deadline = time.monotonic() + PHASE_TIMEOUT
        for start in range(0, N, BATCH):
            batch = []
            for _ in range(min(BATCH, N - start)):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close: no TIME_WAIT
                s.setblocking(False)
                rc = s.connect_ex(("127.0.0.1", p))
                assert rc in (0, errno.EINPROGRESS), errno.errorcode.get(rc, rc)
                batch.append(s)
                socks.append(s)
            statuses = _exchange(batch, connecting=True, deadline=deadline)
            assert set(statuses) == {200}, f"batch at {start}: {sorted(set(statuses))}"
        assert len(socks) == N
        assert srv.proc.poll() is None, srv.log()

        # phase 2: a fresh connection is still served
        r = get(p, "/")
        assert (r.status, r.body) == (200, b"ok")

        # phase 3: every idle connection still answers a second request
        deadline = time.monotonic() + PHASE_TIMEOUT
        for start in range(0, N, BATCH):
            statuses = _exchange(socks[start:start + BATCH], connecting=False, deadline=deadline)
            assert set(statuses) == {200}, f"second round, batch at {start}: {sorted(set(statuses))}"
    finally:
        for s in socks:
            s.close()
