"""Transparent proxying end to end (issue #25), in three network namespaces:

    client 10.233.1.2  --veth--  10.233.1.1  ringx (TPROXY)  10.233.2.1  --veth--  10.233.2.2 upstream

The client talks to the upstream's own address (HTTP on :80, a TCP service on :7000): the
router does not forward (ip_forward = 0), so the only way through is ringx, to which
`ringx tproxy rules --apply` steers the connections (TPROXY on the client-side veth into
transparent listeners). ringx connects to the upstream from the client's address
(`bind = "client"`), and the upstream's replies to that address come back to ringx's socket
(the `-m socket` / `socket transparent` rule with the policy route). The upstream logs the
peer address it sees: it must be the client's, for HTTP, for a TCP stream and for a UDP stream
(whose clients write to ringx's own address). Then `--remove` must leave no rule, route or
chain behind. Both packet filters: iptables and nft (skipped with the reason when missing).

Root only; skipped with the reason elsewhere. The namespaces are removed even on failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import free_port
from test_steering import _ip, _setns
from test_steering_active import _in_ns

C_IP, RC_IP = "10.233.1.2", "10.233.1.1"
RU_IP, U_IP = "10.233.2.1", "10.233.2.2"

# The upstream: answers every client with the peer address it sees.
UPSTREAM = r"""
import socket, sys, threading
ip = sys.argv[1]
def http():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, 80)); s.listen(64)
    while True:
        c, a = s.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            d = c.recv(4096)
            if not d:
                break
            data += d
        body = a[0].encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        c.close()
def tcp():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, 7000)); s.listen(64)
    while True:
        c, a = s.accept()
        c.sendall(a[0].encode() + b"\n")
        c.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, 53))
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(a[0].encode(), a)
for f in (http, tcp, udp):
    threading.Thread(target=f, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


def sysctl(ns: str, key: str, value: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}"], check=True,
                   capture_output=True)


@pytest.fixture
def bed():
    """(client ns, ringx ns, upstream ns, ringx's client-side veth)."""
    if os.geteuid() != 0:
        pytest.skip("transparent proxying needs root (network namespaces, IP_TRANSPARENT, TPROXY)")
    if shutil.which("ip") is None:
        pytest.skip("transparent proxying test needs iproute2's `ip`")
    tag = f"{os.getpid() % 100000}"
    cli, rx, up = f"rxtp-c{tag}", f"rxtp-r{tag}", f"rxtp-u{tag}"
    rc, cr, ru, ur = f"rxt{tag}rc", f"rxt{tag}cr", f"rxt{tag}ru", f"rxt{tag}ur"
    for ns in (cli, rx, up):
        _ip("netns", "del", ns, check=False)
    try:
        try:
            for ns in (cli, rx, up):
                _ip("netns", "add", ns)
            _ip("link", "add", rc, "netns", rx, "type", "veth", "peer", "name", cr, "netns", cli)
            _ip("link", "add", ru, "netns", rx, "type", "veth", "peer", "name", ur, "netns", up)
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot create namespaces and veth here: {e.stderr.strip()}")
        for ns, dev, addr in ((rx, rc, RC_IP), (cli, cr, C_IP), (rx, ru, RU_IP), (up, ur, U_IP)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", cli, "route", "add", "default", "via", RC_IP)
        _ip("-n", up, "route", "add", "default", "via", RU_IP)
        # No forwarding: what reaches the upstream can only have come through ringx.
        sysctl(rx, "net.ipv4.ip_forward", "0")
        yield cli, rx, up, rc
    finally:
        for ns in (cli, rx, up):
            _ip("netns", "del", ns, check=False)


def config(engine: str, rc: str, http_port: int, tcp_port: int, udp_port: int) -> str:
    return f"""
[runtime]
zones = 2
engine = "{engine}"

[[server]]
listen = ["0.0.0.0:{http_port}"]
transparent = true
  [[server.location]]
  path = "/"
  proxy_pass = "web"

[[upstream]]
name = "web"
servers = ["{U_IP}:80"]
bind = "client"

[[stream]]
listen = ["0.0.0.0:{tcp_port}"]
proxy_pass = "{U_IP}:7000"
transparent = true
bind = "client"

[[stream]]
listen = ["{RC_IP}:{udp_port}"]
protocol = "udp"
proxy_pass = "{U_IP}:53"
bind = "client"

[tproxy]
table = 133
  [[tproxy.divert]]
  ports = [80]
  interfaces = ["{rc}"]
  to = "0.0.0.0:{http_port}"
  [[tproxy.divert]]
  ports = [7000]
  interfaces = ["{rc}"]
  to = "0.0.0.0:{tcp_port}"
"""


def in_ns(ns: str, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          timeout=30)


def leftovers(ns: str) -> list[str]:
    """Anything of ours still in namespace `ns`'s routing or packet filter."""
    left = []
    rules = in_ns(ns, "ip", "rule").stdout
    if "fwmark" in rules:
        left.append("ip rule: " + rules)
    routes = in_ns(ns, "ip", "route", "show", "table", "133").stdout.strip()
    if routes:
        left.append("table 133: " + routes)
    if shutil.which("iptables-save"):
        ipt = in_ns(ns, "iptables-save", "-t", "mangle").stdout
        if "RINGX" in ipt:
            left.append("iptables: " + ipt)
    if shutil.which("nft"):
        nft = in_ns(ns, "nft", "list", "ruleset").stdout
        if "ringx" in nft or "RINGX" in nft:
            left.append("nft: " + nft)
    return left


def http_peer(port_unused=None) -> str:
    with socket.create_connection((U_IP, 80), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: up\r\nConnection: close\r\n\r\n")
        data = b""
        while d := s.recv(4096):
            data += d
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), data
    return body.decode()


def tcp_peer() -> str:
    with socket.create_connection((U_IP, 7000), timeout=10) as s:
        data = b""
        while d := s.recv(4096):
            data += d
    return data.decode().strip()


def udp_peer(port: int) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.sendto(b"who am I", (RC_IP, port))
        d, src = s.recvfrom(2048)
        assert src == (RC_IP, port)
        return d.decode()


@pytest.mark.parametrize("backend", ["iptables", "nft"])
@pytest.mark.parametrize("engine", ["uring", "epoll"])
def test_upstreams_see_the_client(bed, ringx, tmp_path, engine, backend):
    cli, rx, up, rc = bed
    if shutil.which(backend) is None:
        pytest.skip(f"{backend} is not installed")
    upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM, U_IP],
                                preexec_fn=lambda: _setns(up), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        assert upstream.stdout.readline().strip() == "ready", upstream.stderr.read()
        http_port, tcp_port, udp_port = free_port(), free_port(), free_port()
        r = ringx.make(config(engine, rc, http_port, tcp_port, udp_port), engine=engine,
                       start=False, preexec_fn=lambda: _setns(rx))
        binary = r.binary
        check = in_ns(rx, binary, "check", "-c", str(r.config_path))
        assert check.returncode == 0, check.stderr
        assert "need CAP_NET_ADMIN" in check.stdout and "has it" in check.stdout, check.stdout
        r.start()
        # Without the rules nothing gets through: the router does not forward.
        with pytest.raises(OSError):
            _in_ns(cli, lambda: socket.create_connection((U_IP, 80), timeout=1).close())
        state = tmp_path / "tproxy.state"
        ap = in_ns(rx, binary, "tproxy", "rules", "-c", str(r.config_path), "--apply",
                   "--backend", backend, "--state", str(state))
        assert ap.returncode == 0, ap.stdout + ap.stderr
        try:
            for _ in range(3):
                assert _in_ns(cli, http_peer) == C_IP, "HTTP: the upstream saw ringx, not the client"
                assert _in_ns(cli, tcp_peer) == C_IP, "stream: the upstream saw ringx, not the client"
                assert _in_ns(cli, lambda: udp_peer(udp_port)) == C_IP, "UDP stream"
        finally:
            rm = in_ns(rx, binary, "tproxy", "rules", "-c", str(r.config_path), "--remove",
                       "--state", str(state))
        assert rm.returncode == 0, rm.stdout + rm.stderr
        assert not state.exists()
        assert leftovers(rx) == []
        # The rules are gone: intercepting stops.
        with pytest.raises(OSError):
            _in_ns(cli, lambda: socket.create_connection((U_IP, 80), timeout=1).close())
    finally:
        upstream.kill()
        upstream.wait()


def test_apply_rolls_back_on_failure(bed, ringx, tmp_path):
    """A rule the kernel refuses (an interface name that does not exist is fine for iptables,
    so: a chain that exists already) makes --apply take back what it added, and record
    nothing."""
    _, rx, _, rc = bed
    if shutil.which("iptables") is None:
        pytest.skip("iptables is not installed")
    r = ringx.make(config("epoll", rc, free_port(), free_port(), free_port()), start=False)
    assert in_ns(rx, "iptables", "-w", "-t", "mangle", "-N", "RINGX_TPROXY_133").returncode == 0
    state = tmp_path / "s"
    ap = in_ns(rx, r.binary, "tproxy", "rules", "-c", str(r.config_path), "--apply",
               "--backend", "iptables", "--state", str(state))
    assert ap.returncode != 0 and "removed again" in ap.stderr, ap.stderr
    assert not state.exists()
    in_ns(rx, "iptables", "-w", "-t", "mangle", "-X", "RINGX_TPROXY_133")
    assert leftovers(rx) == []
