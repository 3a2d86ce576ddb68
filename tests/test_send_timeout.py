"""A client that stops reading a response cannot hold its connection for ever.

The response is a file far larger than the socket buffers and the client never reads it, so
the server's write (a splice on io_uring, sendfile on epoll) stays pending. Once the timeouts
run out (`keepalive_timeout` or `lingering_timeout`, then `send_timeout` with no progress) the
zone closes the connection, which on io_uring means cancelling the pending write first: before
that, the close waited for it and the slot stayed taken until the client went away.
"""

import re
import socket
import time
import urllib.request

import pytest

from conftest import free_port, runtime_section

CONFIG = """
[http]
send_timeout = "1s"
keepalive_timeout = "1s"
lingering_timeout = "1s"
client_header_timeout = "1s"

[admin]
listen = "127.0.0.1:$ADMIN"

[[server]]
listen = ["127.0.0.1:$PORT"]
  [[server.location]]
  path = "/"
  root = "$ROOT"
"""


def active(admin: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(v) for v in re.findall(r"^ringx_connections_active\{[^}]*\} (\S+)", text, re.M))


@pytest.mark.parametrize("close", [False, True], ids=["keepalive", "connection-close"])
def test_stalled_reader_is_closed(engine, ringx, tmp_path, close):
    root = tmp_path / "www"
    root.mkdir()
    (root / "big.bin").write_bytes(b"\0" * (32 << 20))
    port, admin = free_port(), free_port()
    cfg = runtime_section(engine) + CONFIG.replace("$PORT", str(port)).replace(
        "$ADMIN", str(admin)).replace("$ROOT", str(root))
    ringx.make(cfg, engine=engine)
    assert active(admin) == 0
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        s.connect(("127.0.0.1", port))
        hdr = "Connection: close\r\n" if close else ""
        s.sendall(f"GET /big.bin HTTP/1.1\r\nHost: x\r\n{hdr}\r\n".encode())
        deadline = time.monotonic() + 2
        while active(admin) != 1:
            assert time.monotonic() < deadline, "the connection never showed as active"
            time.sleep(0.05)
        # Never read. Header timeout, then keep-alive or lingering timeout, then one
        # send_timeout without progress: a few seconds.
        deadline = time.monotonic() + 10
        while active(admin) != 0:
            assert time.monotonic() < deadline, "a client that stopped reading kept its connection"
            time.sleep(0.1)
    finally:
        s.close()
