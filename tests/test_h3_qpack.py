"""QPACK under attack (issue 38): a client that abuses the dynamic table ringx keeps for it
(RFC 9204). ringx announces SETTINGS_QPACK_MAX_TABLE_CAPACITY 4096 and
SETTINGS_QPACK_BLOCKED_STREAMS 16; the table lives in the zone's memory, so what a client
may put there is bounded by what was announced:

- a table capacity set above the one announced closes the connection with
  QPACK_ENCODER_STREAM_ERROR (0x201), as does an entry larger than the table;
- a flood of insertions (5,000 entries, 675 KB through a 4 KiB table) evicts as it goes:
  the connection goes on, and a request that references the newest entry is decoded with
  it (the value checked in the upstream's echo of the request);
- requests that wait for insertions that never come (blocked streams) are held up to the
  16 announced (the connection still answers others); the 17th closes the connection with
  QPACK_DECOMPRESSION_FAILED (0x200).

The client is aioquic's sans-I/O connection with its HTTP/3 layer, whose own encoder stream
the test writes raw instructions on; requests that use the dynamic table are written as raw
HEADERS frames. After each attack a new connection is served.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_h3_qpack.py
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from upstream_server import UpstreamServer

try:
    import h3_client
    from aioquic.h3.connection import H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.events import ConnectionTerminated

    from test_h3 import quic_server
    from test_h3_attacks import handshake
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("aioquic is not installed (pip install aioquic, or scripts/install-deps.sh)",
                allow_module_level=True)

# RFC 9204 §4.1.1: MaxEntries is the decoder's capacity / 32; 2 * MaxEntries wraps the
# encoded Required Insert Count.
CAPACITY = 4096
MAX_ENTRIES = CAPACITY // 32


def qint(value: int, prefix: int, flags: int = 0) -> bytes:
    """A QPACK/HPACK prefixed integer (RFC 7541 §5.1) with `flags` in the first byte's top bits."""
    top = (1 << prefix) - 1
    if value < top:
        return bytes([flags | value])
    out = [flags | top]
    value -= top
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def varint(v: int) -> bytes:
    """A QUIC variable-length integer (RFC 9000 §16)."""
    if v < 64:
        return bytes([v])
    if v < 16384:
        return (v | 0x4000).to_bytes(2, "big")
    if v < 2**30:
        return (v | 0x8000_0000).to_bytes(4, "big")
    return (v | 0xC000_0000_0000_0000).to_bytes(8, "big")


def set_capacity(n: int) -> bytes:
    return qint(n, 5, 0x20)


def insert(name: bytes, value: bytes) -> bytes:
    """Insert with Literal Name (§4.3.3), no Huffman."""
    return qint(len(name), 5, 0x40) + name + qint(len(value), 7) + value


def headers_frame(required_insert_count: int, lines: bytes) -> bytes:
    """A HEADERS frame whose field section needs `required_insert_count` insertions, with Base
    equal to it (Delta Base 0)."""
    ric = 0 if required_insert_count == 0 else required_insert_count % (2 * MAX_ENTRIES) + 1
    block = qint(ric, 8) + b"\x00" + lines
    return varint(0x01) + varint(len(block)) + block


def request_lines(path: bytes, dynamic_newest: bool) -> bytes:
    """GET https://localhost{path}: static-table lines, and (`dynamic_newest`) an Indexed Field
    Line naming the newest dynamic entry (relative index 0 from Base)."""
    lines = bytes([0xC0 | 17, 0xC0 | 23])  # :method GET, :scheme https
    lines += qint(0, 4, 0x50) + qint(9, 7) + b"localhost"  # :authority, name from the static table
    lines += qint(1, 4, 0x50) + qint(len(path), 7) + path  # :path
    if dynamic_newest:
        lines += b"\x80"
    return lines


class _Deaf:
    """aioquic's QPACK encoder, deaf to the peer's decoder stream."""

    def __init__(self, inner):
        self._inner = inner

    def feed_decoder(self, data):
        pass

    def __getattr__(self, name):
        return getattr(self._inner, name)


class Client:
    """A connection with HTTP/3 on top, pumped by hand."""

    def __init__(self, port: int):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.quic = handshake(self.sock, port)
        self.h3 = H3Connection(self.quic)
        self.events: list = []
        self.closed: int | None = None
        # The server's SETTINGS (its table's capacity) before anything uses the table.
        assert self.pump(lambda: self.h3._received_settings is not None), "no SETTINGS came"

    def flush(self):
        for d, addr in self.quic.datagrams_to_send(time.monotonic()):
            self.sock.sendto(d, addr)

    def pump(self, done, limit: float = 15.0) -> bool:
        """Sends and receives until `done()` or the connection closed; False at `limit`."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            self.flush()
            if done() or self.closed is not None:
                return True
            timer = self.quic.get_timer()
            wait = (timer or time.monotonic() + 0.2) - time.monotonic()
            self.sock.settimeout(max(0.005, min(0.2, wait)))
            try:
                data, addr = self.sock.recvfrom(65536)
                self.quic.receive_datagram(data, addr, time.monotonic())
            except socket.timeout:
                self.quic.handle_timer(time.monotonic())
            while (e := self.quic.next_event()) is not None:
                if isinstance(e, ConnectionTerminated):
                    self.closed = e.error_code
                self.events.extend(self.h3.handle_event(e))
        return done()

    def encoder(self, instructions: bytes):
        """Raw instructions on the encoder stream aioquic's HTTP/3 layer opened. From then on
        the server's acknowledgements of insertions (its decoder stream) are not for
        aioquic's own encoder, which made none: they are left unread."""
        self.h3._encoder = _Deaf(self.h3._encoder)
        self.quic.send_stream_data(self.h3._local_encoder_stream_id, instructions)

    def delivered(self, sid: int) -> bool:
        """Everything written on stream `sid` was acknowledged by the server."""
        s = self.quic._streams[sid].sender
        return s.buffer_is_empty and s._buffer_start >= s.highest_offset

    def raw_request(self, frame: bytes) -> int:
        sid = self.quic.get_next_available_stream_id()
        self.quic.send_stream_data(sid, frame, end_stream=True)
        return sid

    def response(self, sid: int):
        """(status, body) of stream `sid` once it ended."""
        def ended():
            return any(getattr(e, "stream_id", None) == sid and e.stream_ended
                       for e in self.events if isinstance(e, (HeadersReceived, DataReceived)))
        assert self.pump(ended), f"no complete response on stream {sid} (closed: {self.closed})"
        status, body = None, b""
        for e in self.events:
            if getattr(e, "stream_id", None) != sid:
                continue
            if isinstance(e, HeadersReceived):
                status = status or int(dict(e.headers)[b":status"])
            elif isinstance(e, DataReceived):
                body += e.data
        return status, body

    def close(self):
        self.sock.close()


@pytest.fixture
def site(ringx, tmp_path):
    up = UpstreamServer("up")
    p, ca, cfg = quic_server(tmp_path, f'  proxy_pass = "http://{up.addr}"\n')
    ringx.make(cfg)
    yield p, ca
    up.close()


def served_after(p, ca):
    (r,) = h3_client.get(p, ["/after"], cafile=ca)
    assert r.status == 200


@pytest.mark.parametrize("attack", ["capacity", "entry"])
def test_a_table_past_the_announced_capacity_closes(site, attack):
    p, ca = site
    c = Client(p)
    try:
        if attack == "capacity":
            c.encoder(set_capacity(CAPACITY * 2))
        else:
            c.encoder(set_capacity(CAPACITY) + insert(b"x-big", b"v" * CAPACITY))
        assert c.pump(lambda: False, limit=10) and c.closed == 0x201, \
            f"QPACK_ENCODER_STREAM_ERROR expected, the connection ended with {c.closed}"
    finally:
        c.close()
    served_after(p, ca)


def test_an_insertion_flood_evicts_and_the_newest_entry_decodes(site):
    p, ca = site
    c = Client(p)
    try:
        n = 5000
        ins = b"".join(insert(b"x-flood", b"%05d" % i + b"v" * 95) for i in range(n))
        c.encoder(set_capacity(CAPACITY) + ins)
        # A conformant encoder references an entry only once the decoder can reconstruct
        # the Required Insert Count (within MaxEntries of what it received, RFC 9204
        # §4.5.1.1): wait until the insertions were all delivered.
        assert c.pump(lambda: c.delivered(c.h3._local_encoder_stream_id)) and c.closed is None
        sid = c.raw_request(headers_frame(n, request_lines(b"/echo", dynamic_newest=True)))
        status, body = c.response(sid)
        assert status == 200 and c.closed is None
        seen = {k.lower(): v for k, v in json.loads(body)["headers"]}
        assert seen.get("x-flood") == "%05d" % (n - 1) + "v" * 95, seen
    finally:
        c.close()
    served_after(p, ca)


def test_more_blocked_streams_than_announced_closes(site):
    p, ca = site
    c = Client(p)
    try:
        c.encoder(set_capacity(CAPACITY))
        # Each needs an insertion that never comes: blocked, unanswered.
        for i in range(16):
            c.raw_request(headers_frame(1, request_lines(b"/b%d" % i, dynamic_newest=True)))
        # 16 are allowed: the connection still answers a request that needs no insertion.
        sid = c.raw_request(headers_frame(0, request_lines(b"/alive", dynamic_newest=False)))
        assert c.response(sid)[0] == 200 and c.closed is None
        c.raw_request(headers_frame(1, request_lines(b"/b16", dynamic_newest=True)))
        assert c.pump(lambda: False, limit=10) and c.closed == 0x200, \
            f"QPACK_DECOMPRESSION_FAILED expected, the connection ended with {c.closed}"
    finally:
        c.close()
    served_after(p, ca)


def test_a_connection_closed_for_an_error_lets_its_upstream_requests_go(ringx, tmp_path):
    """A request proxied to an upstream that answers in 8 s is in flight when the client
    breaks QPACK (a table capacity past the announced one): ringx closes the connection
    (QPACK_ENCODER_STREAM_ERROR) and lets the upstream request go at once, not when the
    upstream answers; quinn-proto reports no loss for a close of ringx's own, so the streams
    end with the close."""
    from conftest import free_port, metric_samples
    from conftest import metric_total as total
    up = UpstreamServer("up")
    admin = free_port()
    p, ca, cfg = quic_server(tmp_path, f'  proxy_pass = "http://{up.addr}"\n',
                             top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n')

    def active():
        return total(metric_samples(admin, "ringx_upstream_server_active"),
                     "ringx_upstream_server_active")

    c = None
    try:
        ringx.make(cfg)
        c = Client(p)
        c.raw_request(headers_frame(0, request_lines(b"/slow?ms=8000", dynamic_newest=False)))
        assert c.pump(lambda: bool(up.requests)), "the request never reached the upstream"
        assert active() == 1
        c.encoder(set_capacity(CAPACITY * 2))
        assert c.pump(lambda: False, limit=10) and c.closed == 0x201
        deadline = time.monotonic() + 4  # well before the upstream's answer at 8 s
        while active() != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert active() == 0, "the upstream request outlived its connection"
        m = metric_samples(admin, "ringx_http3_errors_total")
        assert total(m, "ringx_http3_errors_total", code="QPACK_ENCODER_STREAM_ERROR") == 1, m
        assert total(m, "ringx_http3_errors_total") == 1, m
    finally:
        if c is not None:
            c.close()
        up.close()
