"""TLS session tickets across hosts (issue 42): two ringx processes on different ports share
one real redis-server through `[cluster]`, each with a TLS server and `session_tickets = true`.
A TLS 1.3 session from host A resumes on host B (Python's ssl with the session object, and
openssl s_client -sess_out / -sess_in); without `[cluster]` it does not (each process has keys
of its own), which shows the check can fail. Redis stopped after the keys were loaded: the
hosts keep the last keys and a ticket still resumes across them; Redis back (empty): new keys,
and tickets still resume. Redis unreachable at start: each host seals with a key of its own
(resumes on that host only), and takes the shared keys once Redis answers.

Run: RINGX_BIN=target/debug/ringx python3 -m pytest -q -rs tests/test_cluster_tickets.py
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
import urllib.request

import pytest

from conftest import free_port
from redis_peer import Redis, command, redis, require_redis, wait_until  # noqa: F401 (redis: the fixture)
from tls_pki import Pki

KEYS = "fleet:tls:ticket_keys"


@pytest.fixture
def pki(tmp_path):
    p = Pki(tmp_path / "pki")
    return p, p.leaf("t", ["t.test"])


class Host:
    def __init__(self, port: int, admin: int, proc):
        self.port, self.admin, self.proc = port, admin, proc


def config(port, admin, leaf, redis_addr: str | None) -> str:
    cluster = f"""
[cluster]
redis = ["{redis_addr}"]
prefix = "fleet:"
connect_timeout = "500ms"
timeout = "500ms"
""" if redis_addr else ""
    return f"""
[runtime]
zones = 1
[admin]
listen = "127.0.0.1:{admin}"
[tls]
session_tickets = true
session_cache = 0
{cluster}
[[server]]
listen = ["127.0.0.1:{port}"]
server_name = ["t.test"]
tls = {{ cert = "{leaf[0]}", key = "{leaf[1]}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "hello\\n" }}
"""


def start_hosts(ringx, leaf, redis_addr) -> list[Host]:
    hosts = []
    for name in ("a", "b"):
        port, admin = free_port(), free_port()
        proc = ringx.make(config(port, admin, leaf, redis_addr), name=f"host-{name}")
        hosts.append(Host(port, admin, proc))
    return hosts


def metric(admin: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def source(h: Host, s: str) -> bool:
    return metric(h.admin, f'ringx_tls_ticket_key_source{{source="{s}"}}') == 1


def context(pki: Pki) -> ssl.SSLContext:
    c = ssl.create_default_context(cafile=str(pki.ca_path))
    c.minimum_version = ssl.TLSVersion.TLSv1_3
    return c


def visit(ctx: ssl.SSLContext, port: int, session=None):
    """One TLS 1.3 connection with a request read to its end (the tickets arrive after the
    handshake); returns (the session to resume, whether this one resumed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="t.test", session=session) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: t.test\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"hello\n"), data
            return s.session, s.session_reused


def resumes(ctx, src: Host, dst: Host) -> bool:
    """A session made on `src` resumes on `dst`."""
    sess, reused = visit(ctx, src.port)
    assert not reused
    return visit(ctx, dst.port, sess)[1]


def s_client(port, *args) -> str:
    req = b"GET / HTTP/1.1\r\nHost: t.test\r\nConnection: close\r\n\r\n"
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_3",
                        "-servername", "t.test", "-ign_eof", *args],
                       input=req, capture_output=True, timeout=15)
    return r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


def test_a_ticket_from_one_host_resumes_on_the_other(ringx, redis, pki, tmp_path):
    ca, leaf = pki
    a, b = start_hosts(ringx, leaf, redis.addr)
    for h in (a, b):
        wait_until("keys from Redis", lambda h=h: source(h, "cluster"))
    made = [metric(h.admin, 'ringx_tls_ticket_key_rotations_total{source="cluster"}')
            for h in (a, b)]
    assert sorted(made) == [0, 1], "one host made the keys, under the lock"
    assert command(redis.port, "EXISTS", KEYS) == 1
    ctx = context(ca)
    assert resumes(ctx, a, b)
    assert resumes(ctx, b, a)
    assert metric(b.admin, 'ringx_tls_tickets_total{result="opened"}') >= 1
    assert metric(b.admin, 'ringx_tls_handshakes_total{zone="0",result="resumed"}') >= 1
    # The same with openssl's client.
    if shutil.which("openssl"):
        sess = tmp_path / "sess.pem"
        first = s_client(a.port, "-sess_out", str(sess))
        assert "New, TLSv1.3" in first and "hello" in first, first
        second = s_client(b.port, "-sess_in", str(sess))
        assert "Reused, TLSv1.3" in second and "hello" in second, second
    # The keys are secrets: never in the logs.
    raw = command(redis.port, "GET", KEYS).decode().split(" ")
    for h in (a, b):
        assert raw[3] not in h.proc.log()


def test_without_cluster_a_ticket_does_not_resume_on_the_other_host(ringx, pki):
    ca, leaf = pki
    a, b = start_hosts(ringx, leaf, None)
    ctx = context(ca)
    assert resumes(ctx, a, a), "on its own host it does"
    assert not resumes(ctx, a, b)
    assert metric(a.admin, 'ringx_tls_ticket_key_source{source="cluster"}') is None


def test_redis_stopped_keeps_the_last_keys_then_back(ringx, redis, pki):
    ca, leaf = pki
    a, b = start_hosts(ringx, leaf, redis.addr)
    for h in (a, b):
        wait_until("keys from Redis", lambda h=h: source(h, "cluster"))
    ctx = context(ca)
    before, _ = visit(ctx, a.port)
    redis.stop()
    for h in (a, b):
        wait_until("a refresh failed",
                   lambda h=h: metric(h.admin, 'ringx_tls_ticket_keys_refresh_total{result="error"}') >= 1)
        h.proc.wait_log("the last keys from Redis go on sealing")
    assert source(a, "cluster") and source(b, "cluster"), "the last keys from Redis"
    assert resumes(ctx, a, b) and resumes(ctx, b, a), "still across hosts"
    assert visit(ctx, b.port, before)[1], "a ticket from before"
    # Redis back, empty: one host makes a new key, the last one opens as the previous.
    redis.start()
    wait_until("new keys in Redis", lambda: command(redis.port, "EXISTS", KEYS) == 1)
    made = lambda: sum(metric(h.admin, 'ringx_tls_ticket_key_rotations_total{source="cluster"}')
                       for h in (a, b))
    wait_until("the second key made", lambda: made() == 2)
    wait_until("a session from A resumes on B with the new keys", lambda: resumes(ctx, a, b))
    assert visit(ctx, b.port, before)[1], "a ticket from before Redis stopped"


def test_redis_unreachable_at_start_then_answers(ringx, pki, tmp_path):
    require_redis()
    ca, leaf = pki
    redis = Redis(tmp_path)  # its port, nothing listening yet
    a, b = start_hosts(ringx, leaf, redis.addr)
    try:
        for h in (a, b):
            wait_until("a key of its own", lambda h=h: source(h, "local"))
            h.proc.wait_log("resume on this host only")
        ctx = context(ca)
        own, _ = visit(ctx, a.port)
        assert visit(ctx, a.port, own)[1], "resumes on its own host"
        assert not resumes(ctx, a, b), "not on the other"
        redis.start()
        for h in (a, b):
            wait_until("keys from Redis", lambda h=h: source(h, "cluster"))
        wait_until("a session from A resumes on B", lambda: resumes(ctx, a, b))
        assert visit(ctx, a.port, own)[1], "the host's own key still opens for a period"
    finally:
        redis.stop()
