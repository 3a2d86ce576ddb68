"""The FIN of a closing connection rides on its last response segment.

When a response ends the connection (`Connection: close`), both drivers hold the tail segment
back (`MSG_MORE`) and close right after it; io_uring links the send, the receive's cancel and
the close in one submission. The kernel then sends the response's last bytes and the FIN in
one segment instead of two. This watches the segments on `lo` with a packet socket and checks
exactly that: the server's last data segment has FIN set, and no bare FIN follows it; and the
client still reads the whole response, then EOF.
"""

import ctypes
import os
import socket
import struct
import threading
import time

import pytest

from conftest import free_port, runtime_section
from util_http import Conn, request

CONFIG = """
[[server]]
listen = ["127.0.0.1:$PORT"]
  [[server.location]]
  path = "/"
  return = { status = 200, body = "$BODY" }
"""

BODY = "x" * 3000  # more than one loopback segment would need if the MSS were small
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
FIN, PSH = 0x01, 0x08


SO_ATTACH_FILTER = 26


class tcp_src_port_filter:
    """A classic BPF program that accepts IPv4 TCP segments from `port` on an Ethernet-framed
    device (lo is one), what `tcpdump -dd 'ip and tcp src port PORT'` compiles to."""

    def __init__(self, port: int):
        insns = [
            (0x28, 0, 0, 12),  # ldh [12]: the EtherType
            (0x15, 0, 8, 0x0800),  # IPv4, else drop
            (0x30, 0, 0, 23),  # ldb [23]: the IP protocol
            (0x15, 0, 6, socket.IPPROTO_TCP),  # TCP, else drop
            (0x28, 0, 0, 20),  # ldh [20]: flags and fragment offset
            (0x45, 4, 0, 0x1FFF),  # a non-first fragment: drop
            (0xB1, 0, 0, 14),  # ldxb 4*([14]&0xf): the IP header's length
            (0x48, 0, 0, 14),  # ldh [x+14]: the TCP source port
            (0x15, 0, 1, port),  # the server's port, else drop
            (0x06, 0, 0, 0x40000),  # accept
            (0x06, 0, 0, 0),  # drop
        ]
        self.prog = ctypes.create_string_buffer(
            b"".join(struct.pack("HBBI", *i) for i in insns)
        )
        self.fprog = struct.pack("HL", len(insns), ctypes.addressof(self.prog))


class Capture:
    """Outgoing TCP segments on `lo` from `port`: (flags, payload length), in order."""

    def __init__(self, port: int):
        self.port = port
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        # Only the server's segments are queued to this socket: on a busy machine all of
        # lo's traffic would overflow its buffer and the segments under test be dropped.
        self._filter = tcp_src_port_filter(port)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, self._filter.fprog)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.05)
        self.segments: list[tuple[int, int, int]] = []
        self.stop_flag = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_flag:
            try:
                data, addr = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            if addr[2] != PACKET_OUTGOING or len(data) < 14 + 20:
                continue
            ip = data[14:]
            if ip[0] >> 4 != 4 or ip[9] != socket.IPPROTO_TCP:
                continue
            ihl = (ip[0] & 0xF) * 4
            total = struct.unpack("!H", ip[2:4])[0]
            tcp = ip[ihl:]
            sport, dport = struct.unpack("!HH", tcp[:4])
            if sport != self.port:
                continue
            off = (tcp[12] >> 4) * 4
            self.segments.append((dport, tcp[13], total - ihl - off))

    def stop(self):
        time.sleep(0.2)  # let the last segments through
        self.stop_flag = True
        self.thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def srv(engine, ringx_module):
    p = free_port()
    cfg = runtime_section(engine) + CONFIG.replace("$PORT", str(p)).replace("$BODY", BODY)
    r = ringx_module.make(cfg, engine=engine, name=f"fin-{engine}")
    r.port = p
    yield r
    r.stop()


def test_fin_rides_on_the_last_response_segment(srv):
    if os.geteuid() != 0:
        pytest.skip("a packet socket on lo needs root (CAP_NET_RAW)")
    cap = Capture(srv.port)
    clients = []
    try:
        for _ in range(5):
            with Conn(srv.port) as c:
                clients.append(c.sock.getsockname()[1])
                c.send(request("GET", "/", headers={"Connection": "close"}))
                r = c.read_response()
                assert (r.status, r.body) == (200, BODY.encode())
                assert c.wait_closed(3), "no EOF after the Connection: close response"
    finally:
        cap.stop()
    for client in clients:
        segs = [(flags, n) for dport, flags, n in cap.segments if dport == client]
        data = [(flags, n) for flags, n in segs if n > 0]
        assert data, f"no response segments seen for client port {client}: {segs}"
        assert data[-1][0] & FIN, f"the last response segment has no FIN: {segs}"
        bare = [(flags, n) for flags, n in segs if flags & FIN and n == 0]
        assert not bare, f"a separate FIN segment followed the response: {segs}"
