"""Clients that cancel their requests (issue 38): an HTTP/3 client resets a request stream
(RESET_STREAM, H3_REQUEST_CANCELLED) when it no longer wants the answer, and ringx must let
go of everything the request held, at once:

- an upload whose upstream takes no more of its body (ringx stops reading the stream, so
  QUIC's flow control holds the client back) is reset: its upstream exchange ends then, not
  when the upstream reads again (it never does here), and the connection goes on;
- uploads reset half-way (their upstream still waits for the rest) end: the upstream is
  let go and the response cancelled (RESET_STREAM back, so neither side keeps the stream:
  a client could otherwise leave a response half open per request, without end); three
  times the connection's stream limit, one after another, and a request after them is
  still answered on the same connection.

The client is aioquic's sans-I/O connection with its HTTP/3 layer, pumped by hand
(`test_h3_qpack.Client`).

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_h3_reset.py
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from conftest import close_listener, free_port, metric_samples
from conftest import metric_total as total
from upstream_server import UpstreamServer

try:
    from aioquic.h3.events import DataReceived, HeadersReceived

    from test_h3 import quic_server
    from test_h3_qpack import Client
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("aioquic is not installed (pip install aioquic, or scripts/install-deps.sh)",
                allow_module_level=True)

H3_REQUEST_CANCELLED = 0x10C
# Far more than ringx takes before the upstream holds it back: the stream window it gives
# (1 MiB) and its TCP send buffer towards the upstream, which the kernel grows to a few MB.
BODY = 16 << 20


def request(c: Client, method: str, path: str, fields=()) -> int:
    sid = c.quic.get_next_available_stream_id()
    c.h3.send_headers(sid, [(b":method", method.encode()), (b":scheme", b"https"),
                            (b":authority", b"localhost"), (b":path", path.encode()),
                            *fields])
    return sid


def answered(c: Client, sid: int) -> int | None:
    """The status of stream `sid` once its response ended, else None."""
    status, ended = None, False
    for e in c.events:
        if getattr(e, "stream_id", None) != sid:
            continue
        if isinstance(e, HeadersReceived):
            status = status or int(dict(e.headers)[b":status"])
        if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_ended:
            ended = True
    return status if ended else None


def upstream_active(admin: int) -> float:
    return total(metric_samples(admin, "ringx_upstream_server_active"),
                 "ringx_upstream_server_active")


def test_a_reset_upload_held_by_its_upstream_lets_the_upstream_go(ringx, tmp_path):
    # An upstream that accepts and never reads, with a receive buffer of a few KB.
    sink = socket.socket()
    sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sink.bind(("127.0.0.1", 0))
    sink.listen(4)
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(sink.accept()[0]), daemon=True).start()
    admin = free_port()
    p, ca, cfg = quic_server(
        tmp_path, f'  proxy_pass = "http://127.0.0.1:{sink.getsockname()[1]}"\n'
        '  [[server.location]]\n  path = "/r"\n  return = { status = 200, body = "r" }\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n[http]\nclient_max_body_size = "32m"\n')
    c = None
    try:
        ringx.make(cfg)
        c = Client(p)
        sid = request(c, "POST", "/upload", [(b"content-length", str(BODY).encode())])
        c.h3.send_data(sid, b"x" * BODY, end_stream=False)
        stream = c.quic._streams[sid]

        def window():
            return stream.max_stream_data_remote

        # Held: the client sent all that ringx's window allows, and the window stays shut
        # (ringx no longer reads the stream) while the upstream holds the exchange.
        deadline = time.monotonic() + 30
        held = False
        while not held and time.monotonic() < deadline:
            assert c.pump(lambda: bool(accepted) and stream.sender.highest_offset >= window(),
                          limit=max(0.1, deadline - time.monotonic())), \
                f"the upload never blocked (sent {stream.sender.highest_offset}, window {window()})"
            shut_at = window()
            c.pump(lambda: window() != shut_at, limit=0.5)
            held = window() == shut_at and stream.sender.highest_offset >= shut_at
        assert held, "the stream's window kept opening"
        assert shut_at < BODY, "ringx read the whole body: nothing held it back"
        assert upstream_active(admin) == 1
        c.quic.reset_stream(sid, H3_REQUEST_CANCELLED)
        c.flush()
        deadline = time.monotonic() + 10
        while upstream_active(admin) != 0 and time.monotonic() < deadline:
            c.pump(lambda: False, limit=0.05)
        assert upstream_active(admin) == 0, "the reset upload's exchange outlived it"
        # The connection goes on.
        r = request(c, "GET", "/r")
        c.h3.send_data(r, b"", end_stream=True)
        assert c.pump(lambda: answered(c, r) is not None), f"closed: {c.closed}"
        assert answered(c, r) == 200
    finally:
        if c is not None:
            c.close()
        for s in accepted:
            s.close()
        close_listener(sink)  # its accept thread may still wait (conftest.close_listener)


def test_reset_uploads_end_and_give_their_streams_back(ringx, tmp_path):
    up = UpstreamServer("up")
    admin = free_port()
    p, ca, cfg = quic_server(
        tmp_path, f'  proxy_pass = "http://{up.addr}"\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n[http]\nquic_max_streams = 20\n')
    c = None
    try:
        ringx.make(cfg)
        c = Client(p)
        # Three times the stream limit, one after another: an upload of 1,000 bytes stops
        # after 10 (the upstream waits for the rest) and is reset once it reached the
        # upstream. ringx lets the upstream go and cancels the response (RESET_STREAM
        # back): both halves of the stream are over, and the client forgets it.
        for i in range(60):
            sid = request(c, "POST", "/upload", [(b"content-length", b"1000")])
            c.h3.send_data(sid, b"x" * 10, end_stream=False)
            assert c.pump(lambda: upstream_active(admin) == 1), \
                f"upload {i} never reached the upstream (closed: {c.closed})"
            c.quic.reset_stream(sid, H3_REQUEST_CANCELLED)
            assert c.pump(lambda: sid not in c.quic._streams and upstream_active(admin) == 0), \
                f"reset upload {i}: response cancelled {sid not in c.quic._streams}, " \
                f"upstream active {upstream_active(admin)} (closed: {c.closed})"
        r = request(c, "GET", "/fast")
        c.h3.send_data(r, b"", end_stream=True)
        assert c.pump(lambda: answered(c, r) is not None), \
            f"no answer after 60 reset uploads (closed: {c.closed})"
        assert answered(c, r) == 200
    finally:
        if c is not None:
            c.close()
        up.close()
