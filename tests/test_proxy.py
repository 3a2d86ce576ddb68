"""Reverse proxy: forwarding, framing both ways, keep-alive reuse, errors, retries,
balancing, health checks, WebSocket, PROXY protocol — with real upstreams (the programmable
Python server of upstream_server.py, and nginx)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections import Counter

import pytest

from conftest import free_port, runtime_section
from upstream_server import UpstreamServer, pattern


def upstream_block(name: str, servers: list[str], extra: str = "") -> str:
    items = ", ".join(s if s.startswith("{") else f'"{s}"' for s in servers)
    return f'[[upstream]]\nname = "{name}"\nservers = [{items}]\n{extra}\n'


def proxy_config(engine, port, upstreams: str, locations: str, server_extra: str = "",
                 zones: int = 1) -> str:
    return (runtime_section(engine, zones) + upstreams +
            f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n{server_extra}\n' + locations)


def loc(path: str, target: str, extra: str = "") -> str:
    return f'[[server.location]]\npath = "{path}"\nproxy_pass = "{target}"\n{extra}\n'


def get(port, path, method="GET", body=None, headers=None, conn=None, timeout=10):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r, data


@pytest.fixture
def up():
    servers = []

    def make(name="up", **kw):
        s = UpstreamServer(name, **kw)
        servers.append(s)
        return s
    yield make
    for s in servers:
        s.close()


def rss_kb(pid: int, field: str = "VmHWM") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# -- forwarding ----------------------------------------------------------------------------

def test_forwarded_headers_and_hop_by_hop(ringx, engine, up, port):
    u = up()
    r = ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app")),
                   engine=engine)
    resp, data = get(port, "/echo?x=1", headers={
        "Connection": "keep-alive, X-Hop", "X-Hop": "secret", "Keep-Alive": "timeout=5",
        "X-Forwarded-For": "10.9.8.7", "X-Real-IP": "6.6.6.6", "Accept": "*/*"})
    assert resp.status == 200
    assert resp.getheader("X-Upstream") == "up"
    req = json.loads(data)
    assert req["target"] == "/echo?x=1" and req["version"] == "HTTP/1.1"
    h = {k.lower(): v for k, v in req["headers"]}
    assert h["host"] == f"127.0.0.1:{port}"
    assert h["x-forwarded-for"] == "10.9.8.7, 127.0.0.1"
    assert h["x-real-ip"] == "127.0.0.1"
    assert h["x-forwarded-proto"] == "http"
    assert h["forwarded"] == f"for=127.0.0.1;proto=http;host=127.0.0.1:{port}"
    for hop in ("connection", "x-hop", "keep-alive", "te", "transfer-encoding"):
        assert hop not in h, hop
    assert h["accept"] == "*/*"
    r.stop()


def test_host_modes_and_forwarded_off(ringx, engine, up, port):
    u = up()
    locs = (loc("/fixed", "app", 'proxy_host = "backend.internal"\nforwarded_headers = false') +
            loc("/upstream", "app", 'proxy_host = "upstream"') + loc("/", f"http://{u.addr}"))
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), locs), engine=engine)
    _, d = get(port, "/fixed/echo")
    h = {k.lower(): v for k, v in json.loads(get(port, "/fixed/echo")[1])["headers"]}
    assert h["host"] == "backend.internal" and "x-forwarded-for" not in h
    h = {k.lower(): v for k, v in json.loads(get(port, "/upstream/echo")[1])["headers"]}
    assert h["host"] == u.addr
    assert get(port, "/echo")[0].status == 200  # proxy_pass = "http://host:port"


def test_keepalive_reuse(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr], "keepalive = 8"),
                            loc("/", "app")), engine=engine)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for i in range(50):
        resp, data = get(port, f"/echo?i={i}", conn=c)
        assert resp.status == 200
    c.close()
    for i in range(20):  # new client connections reuse the pooled upstream connection
        assert get(port, "/")[0].status == 200
    assert u.connections == 1, f"upstream saw {u.connections} connections for 70 requests"


def test_proxied_and_local_locations_on_one_connection(ringx, engine, up, port):
    """One server with a proxied prefix, a local `return` and no catch-all: each request is
    routed once and goes to the right place, alternating on one keep-alive connection."""
    u = up(name="app1")
    local = ('[[server.location]]\npath = "/local"\nexact = true\n'
             'return = { status = 200, body = "served here" }\n')
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]),
                            loc("/api/", "app") + local), engine=engine)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for i in range(10):
        resp, data = get(port, f"/api/name?i={i}", conn=c)
        assert resp.status == 200 and data == b"app1", data
        resp, data = get(port, "/local", conn=c)
        assert resp.status == 200 and data == b"served here", data
        resp, _ = get(port, "/elsewhere", conn=c)
        assert resp.status == 404
    c.close()
    assert [r["target"] for r in u.requests] == [f"/api/name?i={i}" for i in range(10)]


def responses_until_close(s):
    """Reads until the server closes, then splits what came into (head, body) pairs, each body
    delimited by its Content-Length. Closes the socket."""
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    out = []
    while data:
        head, rest = data.split(b"\r\n\r\n", 1)
        n = int([ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")][0]
                .split(b":")[1])
        out.append((head, rest[:n]))
        data = rest[n:]
    return out


def test_pipelined_requests_answered_in_order(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app")),
               engine=engine)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    reqs = b"".join(b"GET /echo?n=%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(5))
    s.sendall(reqs + b"GET /echo?n=last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    order = []
    for head, body in responses_until_close(s):
        assert head.startswith(b"HTTP/1.1 200"), head
        order.append(json.loads(body)["target"])
    assert order == [f"/echo?n={i}" for i in range(5)] + ["/echo?n=last"]


def test_client_keeps_sending_while_upstream_is_slow(ringx, engine, up, port):
    """While a request without a body waits for the upstream, the client's receive stays armed
    and what it pipelines meanwhile is buffered; past a request head's worth (here 1 KB) the
    receive stops for real, and starts again once the response is out. Every request is
    answered, in order, on the one connection."""
    u = up()
    cfg = proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app"))
    cfg = cfg.replace("[[upstream]]", '[http]\nmax_header_size = "1k"\n\n[[upstream]]', 1)
    ringx.make(cfg, engine=engine)
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"GET /slow?ms=300 HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.05)  # the first request is with the upstream now
    n = 150  # about 6 KB of pipelined requests: several times the 1 KB head limit
    s.sendall(b"".join(b"GET /echo?n=%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(n))
              + b"GET /echo?n=last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    targets = []
    for head, body in responses_until_close(s):
        assert head.startswith(b"HTTP/1.1 200"), head
        targets.append(json.loads(body)["target"] if body.startswith(b"{") else "slow")
    assert targets == ["slow"] + [f"/echo?n={i}" for i in range(n)] + ["/echo?n=last"]


# -- framing ----------------------------------------------------------------------------

def test_chunked_response_to_http11_and_http10(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app")),
               engine=engine)
    resp, data = get(port, "/chunked?n=20&size=1000")
    assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
    assert data == pattern(1000) * 20
    # An HTTP/1.0 client cannot read chunked: de-chunked, delimited by close.
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /chunked?n=3&size=10 HTTP/1.0\r\n\r\n")
    raw = b""
    while (d := s.recv(65536)):
        raw += d
    head, body = raw.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding" not in head.lower() and b"Connection: close" in head
    assert body == pattern(10) * 3


def test_until_close_and_http10_upstream(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app")),
               engine=engine)
    resp, data = get(port, "/until-close?n=70000")
    assert resp.status == 200 and data == pattern(70000)
    assert resp.getheader("Connection") == "close"
    resp, data = get(port, "/http10")
    assert resp.status == 200 and data == b"http10"
    assert get(port, "/echo")[0].status == 200


def test_request_bodies_and_expect_continue(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app"),
                            ) .replace("[[server]]", '[http]\nclient_max_body_size = "1g"\n[[server]]'),
               engine=engine)
    body = os.urandom(300_000)
    resp, data = get(port, "/upload", "POST", body=body)
    assert json.loads(data) == {"len": len(body), "sha256": hashlib.sha256(body).hexdigest()}

    def chunks():
        for i in range(0, len(body), 7000):
            yield body[i:i + 7000]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/upload", body=chunks(), encode_chunked=True,
              headers={"Transfer-Encoding": "chunked"})
    r2 = c.getresponse()
    assert json.loads(r2.read())["sha256"] == hashlib.sha256(body).hexdigest()
    c.close()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
    s.sendall(b"hello")
    assert b'"len": 5' in s.recv(65536)
    s.close()


def test_100mb_each_direction_memory_bounded(ringx, engine, up, port):
    u = up()
    r = ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app"))
                   .replace("[[server]]", '[http]\nclient_max_body_size = "1g"\n[[server]]'),
                   engine=engine)
    base = rss_kb(r.pid, "VmRSS")
    n = 100 * 1024 * 1024
    # Upload 100 MB (streamed by the client).
    block = pattern(1 << 20)
    h = hashlib.sha256()

    def gen():
        for _ in range(100):
            h.update(block)
            yield block
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/upload", body=gen(), headers={"Content-Length": str(n)})
    res = json.loads(c.getresponse().read())
    assert res == {"len": n, "sha256": h.hexdigest()}
    c.close()
    # Download 100 MB through a slow reader: ringx must not buffer it all.
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.sendall(b"GET /big?n=%d HTTP/1.1\r\nHost: x\r\n\r\n" % n)
    got = 0
    t0 = time.monotonic()
    while got < n + 30:
        d = s.recv(1 << 16)
        if not d:
            break
        got += len(d)
        if time.monotonic() - t0 < 2:
            time.sleep(0.002)  # slow at first, while the upstream could outrun us
    s.close()
    assert got >= n
    peak = rss_kb(r.pid, "VmHWM")
    assert peak - base < 48 * 1024, f"ringx peak RSS grew by {(peak - base) // 1024} MiB"


# -- errors, timeouts, retries ----------------------------------------------------------

def test_502_refused_504_timeout(ringx, engine, up, port):
    dead = free_port()
    u = up()
    ups = (upstream_block("dead", [f"127.0.0.1:{dead}"], "retries = 0") +
           upstream_block("slow", [u.addr], 'read_timeout = "300ms"\nretries = 0'))
    ringx.make(proxy_config(engine, port, ups, loc("/dead", "dead") + loc("/", "slow")),
               engine=engine)
    assert get(port, "/dead")[0].status == 502
    t = time.monotonic()
    assert get(port, "/slow?ms=2000")[0].status == 504
    assert time.monotonic() - t < 1.5
    assert get(port, "/echo")[0].status == 200


def test_retry_next_server_on_503_and_reset(ringx, engine, up, port):
    a, b = up("a"), up("b")
    ringx.make(proxy_config(engine, port, upstream_block("app", [a.addr, b.addr]),
                            loc("/", "app")), engine=engine)
    for _ in range(6):
        resp, data = get(port, "/status/503")
        # Both answer 503: tried on each, the last answer is passed on.
        assert resp.status == 503
    # a resets, b answers: always a success for GET.
    for _ in range(6):
        assert get(port, "/name")[0].status == 200
    before = len(a.requests) + len(b.requests)
    resp, _ = get(port, "/status/503", method="POST", body=b"x")
    assert resp.status == 503
    assert len(a.requests) + len(b.requests) == before + 1, "POST is not retried"


def test_reset_before_response_single_server_is_502(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr], "retries = 1"),
                            loc("/", "app")), engine=engine)
    assert get(port, "/reset")[0].status == 502
    assert get(port, "/echo")[0].status == 200


def test_reset_mid_body_truncates(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app")),
               engine=engine)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/reset-mid")
    r = c.getresponse()
    with pytest.raises(http.client.IncompleteRead):
        r.read()


def test_upstream_killed_mid_test(ringx, engine, up, port):
    a, b = up("a"), up("b")
    ringx.make(proxy_config(engine, port, upstream_block("app", [a.addr, b.addr],
                                                         'connect_timeout = "1s"'),
                            loc("/", "app")), engine=engine)
    statuses: Counter = Counter()
    errors: list[str] = []
    stop = threading.Event()

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while not stop.is_set():
            try:
                c.request("GET", "/slow?ms=5")
                r = c.getresponse()
                r.read()
                statuses[r.status] += 1
                if r.getheader("Connection") == "close":
                    c.close()
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            except Exception as e:  # noqa: BLE001 — recorded and asserted below
                errors.append(repr(e))
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.7)
    a.close()  # killed: listener gone and live connections reset
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert set(statuses) <= {200, 502, 504}, statuses
    assert statuses[200] > 50


# -- balancing, health ------------------------------------------------------------------

def names(port, n, path="/name", headers=None):
    return Counter(get(port, path, headers=headers)[1].decode() for _ in range(n))


def test_weighted_round_robin_and_backup(ringx, up, port):
    a, b, c = up("a"), up("b"), up("c")
    servers = [f'{{ addr = "{a.addr}", weight = 3 }}', b.addr,
               f'{{ addr = "{c.addr}", backup = true }}']
    ringx.make(proxy_config(None, port, upstream_block("app", servers), loc("/", "app")))
    cnt = names(port, 40)
    assert cnt == {"a": 30, "b": 10}, cnt
    a.close()
    b.close()
    time.sleep(0.1)
    cnt = names(port, 10)
    assert cnt == {"c": 10}, cnt


@pytest.mark.parametrize("policy", ["least_conn", "random_two"])
def test_least_conn_and_random_two_spread(ringx, up, port, policy):
    a, b = up("a"), up("b")
    ringx.make(proxy_config(None, port, upstream_block("app", [a.addr, b.addr],
                                                       f'balance = "{policy}"'), loc("/", "app")))
    cnt = names(port, 60)
    assert cnt["a"] > 10 and cnt["b"] > 10, cnt


def test_consistent_hash_by_header(ringx, up, port):
    ups = [up(n) for n in "abcd"]
    ringx.make(proxy_config(None, port, upstream_block("app", [u.addr for u in ups],
                                                       'balance = "hash"\nhash_key = "header:X-User"'),
                            loc("/", "app")))
    first = {}
    for user in range(40):
        got = names(port, 3, headers={"X-User": f"user{user}"})
        assert len(got) == 1, got  # a key sticks to one server
        first[user] = next(iter(got))
    assert len(set(first.values())) >= 3
    ups[0].close()  # keys of the other servers stay where they were
    time.sleep(0.1)
    moved = sum(1 for user, srv in first.items() if srv != "a" and
                next(iter(names(port, 1, headers={"X-User": f"user{user}"}))) != srv)
    assert moved == 0


def test_active_health_check(ringx, up, port):
    a, b = up("a"), up("b")
    # b's health path answers 500: it is marked down and gets no traffic.
    health = ('[upstream.health]\ninterval = "100ms"\npath = "/status/500"\nfall = 1\n'
              'rise = 1\ntimeout = "500ms"\n')
    ups = upstream_block("app", [a.addr], '[upstream.health]\ninterval = "100ms"\npath = "/"\n') + \
        upstream_block("bad", [b.addr], health)
    r = ringx.make(proxy_config(None, port, ups, loc("/bad", "bad") + loc("/", "app")))
    r.wait_log("is down", timeout=5)
    # Every server of "bad" is down: ringx still tries rather than refusing (nginx too).
    assert get(port, "/")[0].status == 200


def test_passive_failures_mark_down(ringx, up, port):
    a = up("a")
    dead = free_port()
    servers = [a.addr, f'{{ addr = "127.0.0.1:{dead}", max_fails = 1, fail_timeout = "30s" }}']
    r = ringx.make(proxy_config(None, port, upstream_block("app", servers), loc("/", "app")))
    cnt = names(port, 20)
    assert cnt == {"a": 20}
    assert r.log().count("marked down") == 1


# -- WebSocket, PROXY protocol ----------------------------------------------------------

def test_websocket_tunnel(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app")),
               engine=engine)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
              b"Sec-WebSocket-Key: abc\r\nSec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101") and b"Upgrade: websocket" in head
    msg = os.urandom(200_000)
    t = threading.Thread(target=s.sendall, args=(msg,))
    t.start()
    got = head.split(b"\r\n\r\n", 1)[1]
    while len(got) < len(msg):
        got += s.recv(65536)
    t.join()
    assert got == msg
    s.shutdown(socket.SHUT_WR)  # half-close passes through; the upstream then closes
    assert s.recv(10) == b""
    s.close()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_proxy_protocol_to_upstream(ringx, up, port, version):
    u = up()
    u.expect_proxy = True
    ringx.make(proxy_config(None, port, upstream_block("app", [u.addr],
                                                       f'proxy_protocol = "{version}"'),
                            loc("/", "app")))
    assert get(port, "/echo")[0].status == 200
    hdr = u.proxy_headers[0]
    if version == "v1":
        assert hdr.startswith(b"PROXY TCP4 127.0.0.1 127.0.0.1 ") and hdr.endswith(b" %d\r\n" % port)
    else:
        assert hdr[:12] == b"\r\n\r\n\x00\r\nQUIT\n" and hdr[12] == 0x21 and hdr[13] == 0x11


def test_proxy_protocol_from_load_balancer(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app"),
                            server_extra="proxy_protocol = true"), engine=engine)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"PROXY TCP4 203.0.113.9 10.0.0.1 4444 80\r\n"
              b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    raw = b""
    while (d := s.recv(65536)):
        raw += d
    body = json.loads(raw.split(b"\r\n\r\n", 1)[1])
    h = {k.lower(): v for k, v in body["headers"]}
    assert h["x-forwarded-for"] == "203.0.113.9"
    # Without the header the connection is refused (closed, nothing answered).
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    assert s.recv(100) == b""


def test_proxy_header_not_accepted_elsewhere(ringx, up, port):
    u = up()
    ringx.make(proxy_config(None, port, upstream_block("app", [u.addr]), loc("/", "app")))
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"PROXY TCP4 203.0.113.9 10.0.0.1 4444 80\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 400")


# -- a real nginx upstream ----------------------------------------------------------------

def nginx_bin():
    return shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def test_nginx_upstream(ringx, engine, tmp_path, port):
    nb = nginx_bin()
    if not nb:
        pytest.skip("nginx not installed (scripts/install-deps.sh installs nginx-light)")
    nport = free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"""
worker_processes 1; daemon off; pid {tmp_path}/nginx.pid; error_log {tmp_path}/err.log;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 100000;
  server {{ listen 127.0.0.1:{nport};
    location /big {{ return 200 "{'x' * 3000}"; }}
    location / {{ return 200 "nginx says hi\\n"; }} }} }}
""")
    p = subprocess.Popen([nb, "-c", str(conf), "-p", str(tmp_path)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", nport), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        ringx.make(proxy_config(engine, port, upstream_block("ng", [f"127.0.0.1:{nport}"]),
                                loc("/", "ng")), engine=engine)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(200):
            resp, data = get(port, "/", conn=c)
            assert resp.status == 200 and data == b"nginx says hi\n"
        resp, data = get(port, "/big", conn=c)
        assert len(data) == 3000
        out = subprocess.run(["ab", "-q", "-n", "2000", "-c", "20", "-k", f"http://127.0.0.1:{port}/"],
                             capture_output=True, text=True, timeout=60)
        assert "Failed requests:        0" in out.stdout, out.stdout
        assert "Non-2xx responses" not in out.stdout, out.stdout
    finally:
        p.terminate()  # SIGTERM: the master stops its workers (SIGKILL would orphan them)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_head_204_304_have_no_body(ringx, engine, up, port):
    u = up()
    ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app")),
               engine=engine)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    r, d = get(port, "/big?n=5000", method="HEAD", conn=c)
    assert r.status == 200 and d == b"" and r.getheader("Content-Length") == "5000"
    for code in (204, 304):
        r, d = get(port, f"/status/{code}", conn=c)
        assert r.status == code and d == b""
    r, d = get(port, "/echo", conn=c)  # the connection is still in step
    assert r.status == 200 and json.loads(d)["method"] == "GET"


def test_graceful_stop_finishes_proxied_request(ringx, engine, up, port):
    import signal as sig
    u = up()
    r = ringx.make(proxy_config(engine, port, upstream_block("app", [u.addr]), loc("/", "app")),
                   engine=engine)
    out = {}

    def slow():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/slow?ms=700")
        resp = c.getresponse()
        out["status"], out["body"], out["conn"] = resp.status, resp.read(), resp.getheader("Connection")
    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.2)
    r.signal(sig.SIGTERM)
    t.join()
    assert out["status"] == 200 and out["body"] == b"slow" and out["conn"] == "close"
    assert r.wait_exit(5) == 0
