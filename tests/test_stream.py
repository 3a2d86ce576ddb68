"""[[stream]]: the L4 (TCP) proxy — relaying, half-close, balancing and retries over the
upstream pool, idle timeout, PROXY protocol both ways, bounded buffering — and UDP streams
(protocol = "udp"): DNS-like queries through two servers, the session timeout, ten thousand
clients against the session cap, bad datagrams dropped and counted, refusing servers."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import struct
import threading
import time
from collections import Counter

import pytest

from conftest import close_listener, free_port, metric_samples, runtime_section


class TcpUpstream:
    """Echo server: greets with its name when `greet`, echoes, and answers a FIN with a FIN
    after echoing everything. With `proxy`, it first reads a PROXY header and keeps it."""

    def __init__(self, name="t", greet=False, proxy=False):
        self.name, self.greet, self.proxy = name, greet, proxy
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.headers: list[bytes] = []
        self.conns = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            buf = b""
            if self.proxy:
                while len(buf) < 16:
                    buf += c.recv(4096)
                if buf.startswith(b"PROXY "):
                    while b"\r\n" not in buf:
                        buf += c.recv(4096)
                    i = buf.index(b"\r\n") + 2
                else:
                    n = struct.unpack("!H", buf[14:16])[0]
                    while len(buf) < 16 + n:
                        buf += c.recv(4096)
                    i = 16 + n
                self.headers.append(buf[:i])
                buf = buf[i:]
            if self.greet:
                c.sendall(self.name.encode() + b"\n")
            if buf:
                c.sendall(buf)
            while True:
                d = c.recv(65536)
                if not d:
                    c.shutdown(socket.SHUT_WR)
                    break
                c.sendall(d)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        close_listener(self.sock)


@pytest.fixture
def tcp_up():
    made = []

    def make(*a, **kw):
        u = TcpUpstream(*a, **kw)
        made.append(u)
        return u
    yield make
    for u in made:
        u.close()


def stream_config(engine, port, servers, up_extra="", stream_extra="", zones=1):
    items = ", ".join(f'"{s}"' for s in servers)
    return (runtime_section(engine, zones) +
            f'[[upstream]]\nname = "tcp"\nservers = [{items}]\n{up_extra}\n'
            f'[[stream]]\nlisten = ["127.0.0.1:{port}"]\nproxy_pass = "tcp"\n{stream_extra}\n')


def recv_all(s, n=None):
    out = b""
    while n is None or len(out) < n:
        d = s.recv(1 << 16)
        if not d:
            break
        out += d
    return out


def test_relay_and_half_close(ringx, engine, tcp_up, port):
    u = tcp_up()
    ringx.make(stream_config(engine, port, [u.addr]), engine=engine)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    msg = os.urandom(3_000_000)
    t = threading.Thread(target=lambda: (s.sendall(msg), s.shutdown(socket.SHUT_WR)))
    t.start()
    got = recv_all(s)  # the upstream's FIN after our FIN ends it
    t.join()
    assert got == msg
    s.close()


def test_data_before_upstream_connects_is_kept(ringx, engine, tcp_up, port):
    u = tcp_up()
    ringx.make(stream_config(engine, port, [u.addr]), engine=engine)
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"first bytes, sent at once")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == b"first bytes, sent at once"
        s.close()


def test_balancing_and_retry_past_dead_server(ringx, tcp_up, port):
    a, b = tcp_up("a", greet=True), tcp_up("b", greet=True)
    dead = f"127.0.0.1:{free_port()}"
    ringx.make(stream_config(None, port, [a.addr, b.addr, dead], "retries = 2"))
    seen = Counter()
    for _ in range(30):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        seen[s.recv(2).decode()] += 1
        s.close()
    assert set(seen) == {"a\n", "b\n"} and min(seen.values()) >= 10, seen


def test_all_servers_dead_closes_client(ringx, port):
    dead = f"127.0.0.1:{free_port()}"
    r = ringx.make(stream_config(None, port, [dead], "retries = 1"))
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    assert recv_all(s) == b""
    assert "connect to" in r.log()


def test_idle_timeout(ringx, engine, tcp_up, port):
    u = tcp_up()
    ringx.make(stream_config(engine, port, [u.addr], stream_extra='idle_timeout = "300ms"'),
               engine=engine)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"x")
    assert s.recv(1) == b"x"
    t = time.monotonic()
    assert recv_all(s) == b""
    assert 0.2 < time.monotonic() - t < 2.0


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_proxy_protocol_sent(ringx, tcp_up, port, version):
    u = tcp_up(proxy=True)
    ringx.make(stream_config(None, port, [u.addr], f'proxy_protocol = "{version}"'))
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"hi")
    assert s.recv(2) == b"hi"
    s.close()
    h = u.headers[0]
    if version == "v1":
        assert h.startswith(b"PROXY TCP4 127.0.0.1 127.0.0.1 ") and h.endswith(b" %d\r\n" % port)
    else:
        assert h[12] == 0x21 and h[13] == 0x11 and h[-2:] == struct.pack("!H", port)


def test_proxy_protocol_accepted(ringx, tcp_up, port):
    u = tcp_up(proxy=True)
    ringx.make(stream_config(None, port, [u.addr], 'proxy_protocol = "v1"',
                             stream_extra="proxy_protocol = true"))
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"PROXY TCP4 198.51.100.4 10.0.0.1 5555 443\r\nhello")
    assert s.recv(5) == b"hello"
    s.close()
    assert u.headers[0].startswith(b"PROXY TCP4 198.51.100.4 ")
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET / HTTP/1.1\r\n\r\n")  # no PROXY header: refused
    assert recv_all(s) == b""


def test_slow_reader_memory_bounded(ringx, engine, tcp_up, port):
    u = tcp_up()
    r = ringx.make(stream_config(engine, port, [u.addr]), engine=engine)
    # Warm up first: the zone's receive buffers (16 MiB by default, pre-faulted) and the
    # relay's queues exist once a connection has gone through; growth is counted from there.
    w = socket.create_connection(("127.0.0.1", port), timeout=30)
    w.sendall(os.urandom(1 << 20))
    w.shutdown(socket.SHUT_WR)
    assert len(recv_all(w)) == 1 << 20
    w.close()
    with open(f"/proc/{r.pid}/status") as f:
        base = int([ln for ln in f if ln.startswith("VmHWM")][0].split()[1])
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)
    total = 64 * 1024 * 1024
    block = os.urandom(1 << 20)

    def writer():
        for _ in range(total // len(block)):
            s.sendall(block)
        s.shutdown(socket.SHUT_WR)
    t = threading.Thread(target=writer)
    t.start()
    got = 0
    t0 = time.monotonic()
    while True:
        d = s.recv(1 << 16)
        if not d:
            break
        got += len(d)
        if time.monotonic() - t0 < 1.5:
            time.sleep(0.003)
    t.join()
    assert got == total
    with open(f"/proc/{r.pid}/status") as f:
        peak = int([ln for ln in f if ln.startswith("VmHWM")][0].split()[1])
    # The relay pauses the upstream's receive at 256 KiB queued. On io_uring the pause (a
    # cancellation) lands after receives already done, so each multishot receive is limited to
    # 256 KiB (Linux 6.17): without that limit this grew by 17-27 MiB (the socket buffer
    # drained into the zone's buffer pool); with it, and on epoll, by 0 MiB.
    kernel = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())
    bound = 32 if engine == "uring" and kernel < (6, 17) else 8
    assert peak - base < bound * 1024, f"peak RSS grew by {(peak - base) // 1024} MiB (bound {bound} MiB)"


# ---------------------------------------------------------------------------------------
# UDP streams


def free_udp_port() -> int:
    """A UDP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dns_query(qid: int, name: str) -> bytes:
    """A DNS query (RFC 1035): header with one question, type A, class IN."""
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)


class DnsUpstream:
    """Answers each DNS query with its ID, QR set, and a TXT-like tail naming this server;
    records the source address of every query (a new session is a new source port)."""

    def __init__(self, name: str):
        self.name = name.encode()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.peers: list[tuple[str, int]] = []
        self.queries = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                d, a = self.sock.recvfrom(65536)
            except OSError:
                return
            if a is None:
                return  # shut down: close()
            self.queries += 1
            self.peers.append(a)
            if len(d) >= 12:
                qid = struct.unpack("!H", d[:2])[0]
                self.sock.sendto(struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0) + d[12:] +
                                 b"|" + self.name, a)

    def close(self):
        close_listener(self.sock)  # wakes the receive (conftest.close_listener)


@pytest.fixture
def dns_up():
    made = []

    def make(name):
        u = DnsUpstream(name)
        made.append(u)
        return u
    yield make
    for u in made:
        u.close()


def udp_config(engine, port, admin, servers, stream_extra="", zones=1):
    items = ", ".join(f'"{s}"' for s in servers)
    return (runtime_section(engine, zones) +
            f'[admin]\nlisten = "127.0.0.1:{admin}"\n'
            f'[[upstream]]\nname = "dns"\nservers = [{items}]\n'
            f'[[stream]]\nlisten = ["127.0.0.1:{port}"]\nprotocol = "udp"\n'
            f'proxy_pass = "dns"\n{stream_extra}\n')


def udp_metrics(admin):
    return metric_samples(admin, "ringx_udp_")


def udp_total(m, name, **labels):
    want = set(labels.items())
    return sum(v for (n, ls), v in m.items() if n == name and want <= set(ls))


def ask(sock, port, qid, name="example.test"):
    sock.sendto(dns_query(qid, name), ("127.0.0.1", port))
    d, src = sock.recvfrom(65536)
    assert src == ("127.0.0.1", port), "the answer comes from the listener's address"
    assert struct.unpack("!H", d[:2])[0] == qid and d[2] & 0x80, d
    return d.rsplit(b"|", 1)[1].decode()


def test_udp_dns_through_two_servers(ringx, engine, dns_up):
    a, b = dns_up("a"), dns_up("b")
    port, admin = free_udp_port(), free_port()
    ringx.make(udp_config(engine, port, admin, [a.addr, b.addr], zones=2), engine=engine)
    servers = Counter()
    held = []
    for i in range(2, 42):
        src = f"127.0.{i}.{i}"
        first = None
        for p in range(3):  # three ports of one client address: one server
            c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            c.settimeout(5)
            c.bind((src, 0))
            for q in range(2):  # two queries per session
                got = ask(c, port, i * 100 + p * 10 + q)
                first = first or got
                assert got == first, f"client {src} moved from {first} to {got}"
            held.append(c)  # open until the end: a closed socket's port could come back
        servers[first] += 1
    assert set(servers) == {"a", "b"} and min(servers.values()) >= 8, servers
    m = udp_metrics(admin)
    assert udp_total(m, "ringx_udp_sessions_total") == 120
    assert udp_total(m, "ringx_udp_datagrams_total", direction="to_clients") == 240
    assert udp_total(m, "ringx_udp_dropped_total") == 0
    for c in held:
        c.close()


def test_udp_session_timeout(ringx, engine, dns_up):
    u = dns_up("a")
    port, admin = free_udp_port(), free_port()
    ringx.make(udp_config(engine, port, admin, [u.addr], 'idle_timeout = "400ms"'), engine=engine)
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(5)
    c.bind(("127.0.0.1", 0))
    ask(c, port, 1)
    ask(c, port, 2)
    assert udp_total(udp_metrics(admin), "ringx_udp_sessions") == 1
    assert len(set(u.peers)) == 1, "one session, one socket to the server"
    deadline = time.monotonic() + 5
    while udp_total(udp_metrics(admin), "ringx_udp_sessions") != 0:
        assert time.monotonic() < deadline, "the idle session did not end"
        time.sleep(0.05)
    ask(c, port, 3)
    assert len(set(u.peers)) == 2, "after the timeout the client has a new session"


def listener_drops(port: int) -> int:
    """Datagrams the kernel dropped at the UDP sockets bound to `port` (its receive buffer
    was full), from /proc/net/udp."""
    total = 0
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for ln in lines:
            f = ln.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port:
                total += int(f[-1])
    return total


def test_udp_ten_thousand_clients_bounded(ringx, engine, dns_up):
    """10 000 clients, each one datagram from its own address, against max_sessions = 1000:
    1000 sessions, every other datagram dropped and counted, memory bounded. What the kernel
    drops when the zone falls behind (load can make it) is counted on the listener's socket,
    so every datagram is accounted for whatever the machine is doing: none is asserted to
    arrive beyond the first 1000, which are paced so that they do."""
    u = dns_up("a")
    port, admin = free_udp_port(), free_port()
    # Sessions outlive the test however slow a busy machine makes it.
    r = ringx.make(udp_config(engine, port, admin, [u.addr],
                              'max_sessions = 1000\nidle_timeout = "10m"'), engine=engine)
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(5)
    ask(c, port, 1)  # warm up: the zone's buffers exist; growth is counted from here
    with open(f"/proc/{r.pid}/status") as f:
        base = int([ln for ln in f if ln.startswith("VmRSS")][0].split()[1])

    def seen_and_dropped() -> tuple[int, int]:
        seen = udp_total(udp_metrics(admin), "ringx_udp_datagrams_total",
                         direction="from_clients")
        return int(seen), listener_drops(port)

    sent = 1  # the warm-up
    for i in range(10_000):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((f"127.1.{i // 250}.{i % 250 + 1}", 0))
        s.sendto(dns_query(i, "flood.test"), ("127.0.0.1", port))
        sent += 1
        s.close()
        if i < 1000 and i % 100 == 99:
            # The first 1000 open the sessions: each batch is taken before the next.
            deadline = time.monotonic() + 30
            while sum(seen_and_dropped()) < sent and time.monotonic() < deadline:
                time.sleep(0.01)
    deadline = time.monotonic() + 30
    while sum(seen_and_dropped()) < sent and time.monotonic() < deadline:
        time.sleep(0.05)
    seen, dropped = seen_and_dropped()
    assert seen + dropped == sent, f"{sent} sent: {seen} reached ringx, {dropped} dropped by the kernel"
    if dropped:
        print(f"the kernel dropped {dropped} of {sent} datagrams (receive buffer full)")
    m = udp_metrics(admin)
    assert seen >= 1001, f"the paced first 1000 did not all arrive: {seen}, {dropped} dropped"
    assert udp_total(m, "ringx_udp_sessions") == 1000
    full = udp_total(m, "ringx_udp_dropped_total", reason="sessions_full")
    assert full == seen - 1000, (full, seen)
    assert len(set(u.peers)) <= 1000
    with open(f"/proc/{r.pid}/status") as f:
        now = int([ln for ln in f if ln.startswith("VmRSS")][0].split()[1])
    assert now - base < 16 * 1024, f"RSS grew by {(now - base) // 1024} MiB for 1000 sessions"


def test_udp_listener_asks_for_its_receive_buffer(ringx, engine, dns_up):
    """`rcvbuf` (default 4m) sizes the listener's receive buffer, so a burst of new clients
    waits there instead of being dropped: read back from the socket with ss."""
    u = dns_up("a")
    port, admin = free_udp_port(), free_port()
    ringx.make(udp_config(engine, port, admin, [u.addr], 'rcvbuf = "3m"'), engine=engine)
    out = subprocess.run(["ss", "-uamnH", "sport", "=", f":{port}"], capture_output=True,
                         text=True, timeout=10).stdout
    sizes = [int(x) for x in re.findall(r"rb(\d+)", out)]
    assert sizes, out
    if os.geteuid() == 0:
        # SO_RCVBUFFORCE: the kernel keeps twice what it was given.
        assert all(sz >= 2 * 3 * 1024 * 1024 for sz in sizes), out
    else:
        print(f"not root: the buffer is capped by net.core.rmem_max: {sizes}")


def test_udp_bad_datagrams_dropped_and_counted(ringx, engine, dns_up):
    u = dns_up("a")
    port, admin = free_udp_port(), free_port()
    ringx.make(udp_config(engine, port, admin, [u.addr], "max_datagram_size = 512"),
               engine=engine)
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.settimeout(5)
    c.sendto(b"x" * 513, ("127.0.0.1", port))
    c.sendto(b"y" * 60000, ("127.0.0.1", port))  # also larger than the zone's buffers
    c.sendto(b"", ("127.0.0.1", port))
    assert ask(c, port, 7) == "a"  # a good one still passes, on a fresh session
    m = udp_metrics(admin)
    assert udp_total(m, "ringx_udp_dropped_total", reason="oversized") == 2
    assert udp_total(m, "ringx_udp_dropped_total", reason="malformed") == 1
    assert u.queries == 1, "none of the bad ones reached the server"


def test_udp_refusing_server_is_counted(ringx, engine):
    port, admin = free_udp_port(), free_port()
    dead = f"127.0.0.1:{free_udp_port()}"
    r = ringx.make(udp_config(engine, port, admin, [dead], 'idle_timeout = "5s"'),
                   engine=engine)
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    c.bind(("127.0.0.1", 0))
    deadline = time.monotonic() + 5
    while udp_total(udp_metrics(admin), "ringx_udp_upstream_errors_total") < 1:
        assert time.monotonic() < deadline, r.log()
        c.sendto(dns_query(1, "x.test"), ("127.0.0.1", port))
        time.sleep(0.05)
    # The sessions end with the error: none is left open for its 5 s idle timeout.
    deadline = time.monotonic() + 2
    while udp_total(udp_metrics(admin), "ringx_udp_sessions") != 0:
        assert time.monotonic() < deadline, "a refused session stays open"
        time.sleep(0.05)


def test_udp_query_after_query_with_responses_one(ringx, engine, dns_up):
    """`responses = 1`: each answer ends its session, and the client's next query, sent the
    moment the answer arrives, opens the next one; none is lost while the old session's
    socket is still closing (io_uring closes asynchronously)."""
    import selectors
    u = dns_up("a")
    port, admin = free_udp_port(), free_port()
    ringx.make(udp_config(engine, port, admin, [u.addr], "responses = 1"), engine=engine)
    clients, per_client = 64, 200
    sel = selectors.DefaultSelector()
    done = {}
    for i in range(clients):
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.setblocking(False)
        c.connect(("127.0.0.1", port))
        sel.register(c, selectors.EVENT_READ, i)
        done[i] = 0
        c.send(dns_query(i, "next.test"))
    answered = 0
    while answered < clients * per_client:
        ready = sel.select(timeout=2)
        assert ready, (f"{clients * per_client - answered} queries unanswered after 2 s; "
                       f"dropped: {udp_total(udp_metrics(admin), 'ringx_udp_dropped_total')}")
        for key, _ in ready:
            c, i = key.fileobj, key.data
            d = c.recv(65536)
            assert struct.unpack("!H", d[:2])[0] == (done[i] * clients + i) % 65536
            answered += 1
            done[i] += 1
            if done[i] < per_client:
                c.send(dns_query((done[i] * clients + i) % 65536, "next.test"))
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    m = udp_metrics(admin)
    assert udp_total(m, "ringx_udp_sessions_total") == clients * per_client, "one per query"
    assert udp_total(m, "ringx_udp_dropped_total") == 0
