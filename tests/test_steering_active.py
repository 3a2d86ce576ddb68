"""Active-side connection locality (issue #5): with `[steering] mode = "software"` every
upstream connection's replies are processed on the CPU of the zone that opened it; with
steering off only about 1/ncpus of them are.

The test bed is three network namespaces joined by two veth pairs:

    client  --veth--  ringx (2 zones, CPUs 0 and 1)  --veth--  upstream (HTTP server)

Clients send short requests (`Connection: close`) through ringx, which proxies each one over
a new upstream connection (the upstream server speaks HTTP/1.0 and closes). The upstream
server is pinned to the first CPU, so without steering its replies are processed there (veth
receives on the sending CPU): home for the zone on that CPU, away for the other, about half.
With software steering ringx binds each upstream connection to a local port of its zone's
residue (port & 1 = zone) and attaches an XDP program to its veths that moves each reply to
the zone's CPU through a cpumap before TCP sees it.

Evidence, server side, on both engines: when an upstream connection's first bytes arrive ringx
reads its socket's SO_INCOMING_CPU and logs `upstream zone_cpu=.. incoming_cpu=..`
(`RUST_LOG=ringx::locality=debug`); the test counts them. On epoll the accepted client
connections are checked the same way (the XDP program steers client packets by a hash of the
client's address and port, and the reuseport program gives each connection to the zone on the
CPU that processed its SYN). At exit ringx logs its steering counters: every upstream connection
took a table port, with no hash evaluated.

Root only (namespaces, veth, XDP); skipped with the reason elsewhere. The namespaces are
removed even when a test fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import free_port
from test_steering import _clients, _cpus, _ip, _server_side, _setns

C_IP, RC_IP = "10.232.1.2", "10.232.1.1"      # client <-> ringx
RU_IP, U_IP = "10.232.2.1", "10.232.2.2"      # ringx <-> upstream

# The upstream: HTTP/1.0, one thread per connection, and the response and the FIN leave in
# one segment (TCP_CORK, then close): ringx sees the upstream close first on every connection,
# as it does with a server that closes right after answering, minus the timing race.
UPSTREAM = r"""
import socket, sys, threading
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2])))
srv.listen(512)
BODY = b"upstream ok\n"
RESP = b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
def serve(c):
    with c:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                return
            data += chunk
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        c.sendall(RESP)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def _mac(ns: str, dev: str) -> str:
    return json.loads(_ip("-n", ns, "-j", "link", "show", "dev", dev).stdout)[0]["address"]


@pytest.fixture
def testbed():
    """(client ns, ringx ns, upstream ns, ringx's client-side veth, ringx's upstream-side veth)."""
    if os.geteuid() != 0:
        pytest.skip("upstream locality proof needs root (network namespaces, veth, XDP)")
    if shutil.which("ip") is None:
        pytest.skip("upstream locality proof needs iproute2's `ip`")
    if len(_cpus()) < 2:
        pytest.skip(f"upstream locality proof needs 2 CPUs, this process may use {_cpus()}")
    if not os.path.isdir("/sys/fs/bpf"):
        pytest.skip("upstream locality proof needs BPF (/sys/fs/bpf is missing)")
    tag = f"{os.getpid() % 100000}"
    cli, rx, up = f"rxact-c{tag}", f"rxact-r{tag}", f"rxact-u{tag}"
    rc, cr = f"rxa{tag}rc", f"rxa{tag}cr"      # ringx side, client side of link 1
    ru, ur = f"rxa{tag}ru", f"rxa{tag}ur"      # ringx side, upstream side of link 2
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
        # Static neighbours: a packet that waits for ARP leaves later from the CPU that got
        # the ARP reply, not from its sender's.
        for ns, dev, peer_ip, peer_ns, peer_dev in ((cli, cr, RC_IP, rx, rc), (rx, rc, C_IP, cli, cr),
                                                    (rx, ru, U_IP, up, ur), (up, ur, RU_IP, rx, ru)):
            _ip("-n", ns, "neigh", "replace", peer_ip, "lladdr", _mac(peer_ns, peer_dev),
                "dev", dev, "nud", "permanent")
        yield cli, rx, up, rc, ru
    finally:
        for ns in (cli, rx, up):
            _ip("netns", "del", ns, check=False)


def _start_upstream(ns: str, port: int, cpu: int) -> subprocess.Popen:
    def pre():
        _setns(ns)
        os.sched_setaffinity(0, {cpu})

    p = subprocess.Popen([sys.executable, "-c", UPSTREAM, U_IP, str(port)], preexec_fn=pre,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "ss", "-Htln",
                              f"sport = :{port}"], capture_output=True, text=True)
        if str(port) in out.stdout:
            return p
        if p.poll() is not None:
            raise AssertionError(f"upstream server exited: {p.stderr.read()!r}")
        time.sleep(0.05)
    p.kill()
    raise AssertionError("upstream server did not start listening")


def _config(engine: str, port: int, up_port: int, mode: str, cpus: list[int], devs: list[str],
            extra: str = "", admin: int | None = None) -> str:
    steering = f'mode = "{mode}"\n' + extra
    if mode not in ("off", "auto"):
        steering += "device = [" + ", ".join(f'"{d}"' for d in devs) + "]\n"
    admin_section = f'[admin]\nlisten = "127.0.0.1:{admin}"\n' if admin else ""
    return f"""{admin_section}
[runtime]
zones = 2
cpus = [{cpus[0]}, {cpus[1]}]
engine = "{engine}"
max_conns = 1024

[steering]
listen = "cpu"
{steering}
[[upstream]]
name = "app"
servers = ["{U_IP}:{up_port}"]
keepalive = 0

[[server]]
listen = ["{RC_IP}:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
"""


UPSTREAM_LINE = re.compile(
    r"upstream zone_cpu=(\d+) incoming_cpu=(-?\d+) local=[\d.]+:(\d+) peer=\S+ steered=(true|false)")
TOTAL_LINE = re.compile(r"steering \((\w+)\): total: (.*?)(?: \(|$)", re.M)


def _counters(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text)}


def _in_ns(ns: str, fn):
    """Runs fn() on a thread inside network namespace `ns`; returns its result."""
    out: dict = {}

    def run():
        try:
            _setns(ns)
            out["v"] = fn()
        except Exception as e:  # noqa: BLE001 - re-raised below
            out["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=30)
    if "e" in out:
        raise out["e"]
    return out["v"]


def _metrics(ns: str, port: int) -> dict[str, float]:
    """`/metrics` of the admin listener on 127.0.0.1:port in namespace `ns`, summed over
    labels other than `cpu`: name or name{cpu=...} -> value."""
    def get():
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return data.decode()

    out: dict[str, float] = {}
    for name, labels, v in re.findall(r"^(ringx_\w+)(\{[^}]*\})? (\S+)$", _in_ns(ns, get), re.M):
        cpu = re.search(r'cpu="(\w+)"', labels or "")
        key = f"{name}{{cpu={cpu[1]}}}" if cpu else name
        out[key] = out.get(key, 0) + float(v)
    return out


@pytest.mark.parametrize("mode", ["software", "auto", "off"])
@pytest.mark.parametrize("engine", ["epoll", "uring"])
def test_upstream_locality(testbed, ringx, monkeypatch, engine, mode):
    cli_ns, rx_ns, up_ns, rc, ru = testbed
    cpus = _cpus()[:2]
    port, up_port = free_port(), free_port()
    upstream = _start_upstream(up_ns, up_port, cpus[0])
    try:
        monkeypatch.setenv("RUST_LOG", "info,ringx::locality=debug")
        admin = free_port()
        # table_ports = 8: two clients, 24 requests per zone: without the peer-closed release
        # (the upstream closes first, so this side has no TIME_WAIT) the table would run dry.
        r = ringx.make(_config(engine, port, up_port, mode, cpus, [rc, ru], admin=admin,
                               extra="table_ports = 8\n"),
                       engine=engine, start=False, preexec_fn=lambda: _setns(rx_ns))
        r.start()
        log = r.log()
        if mode == "software":
            assert re.search(rf"XDP program on {rc} \(generic mode\)", log), log
            assert re.search(rf"XDP program on {ru} \(generic mode\)", log), log
            assert "steering: mode software on" in log, log
            print("\n" + [ln for ln in log.splitlines() if "steering: mode software" in ln][0])
        elif mode == "auto":
            # No device given: the upstream's route names ringx's upstream-side veth, which
            # has no RSS, so software steering there (client packets are not moved).
            assert re.search(rf"XDP program on {ru} \(generic mode\)", log), log
            assert f"XDP program on {rc}" not in log, log
            assert re.search(rf"steering: mode software \({ru} has no RSS\) on {ru}:", log), log

        conns = _clients(cli_ns, RC_IP, port, cpus, body=b"upstream ok\n")
        n = len(conns)
        r.wait_log("upstream zone_cpu=", timeout=5)
        deadline = time.monotonic() + 5
        while len(UPSTREAM_LINE.findall(r.log())) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        ups = [(int(z), int(i), int(p), s == "true") for z, i, p, s in UPSTREAM_LINE.findall(r.log())]
        assert len(ups) == n, f"{len(ups)} upstream locality lines for {n} requests:\n{r.log()}"
        home = sum(z == i for z, i, _, _ in ups)
        line = f"{engine}/{mode}: upstream: {home}/{n} replies processed on the owning zone's CPU"

        if engine == "epoll":
            seen = _server_side(r.log())
            missing = [c["port"] for c in conns if c["port"] not in seen]
            assert not missing, f"no accept locality line for client ports {missing}:\n{r.log()}"
            down_home = sum(seen[c["port"]][0] == seen[c["port"]][1] for c in conns)
            line += f"; downstream: {down_home}/{n} accepted by the zone on SO_INCOMING_CPU"
            assert down_home == n, line
        print(line)

        met = _metrics(rx_ns, admin)
        assert met["ringx_upstream_locality_total{cpu=home}"] == home, met
        assert met["ringx_upstream_locality_total{cpu=away}"] == n - home, met
        assert met["ringx_steering_table_hits_total"] == (0 if mode == "off" else n), met
        assert met["ringx_steering_hash_evaluations_total"] == 0, met

        # Graceful stop: the steering counters are logged at exit.
        r.signal(signal.SIGTERM)
        assert r.wait_exit(15) == 0, r.log()
        m = TOTAL_LINE.search(r.log())
        assert m, r.log()
        c = _counters(m[2])
        print(f"{engine}/{mode}: exit counters: {m[2]}")
        assert c["connects"] == n and c["failures"] == 0, m[0]
        assert c["locality_home"] + c["locality_away"] == n, m[0]
        assert c["locality_home"] == home, m[0]

        if mode in ("software", "auto"):
            assert home == n, line + f"\n{ups}"
            assert all(s for _, _, _, s in ups), "every upstream connection took a table port"
            assert all(p % 2 == cpus.index(z) for z, _, p, _ in ups), "port & 1 = zone"
            assert c["steered"] == n and c["table_hits"] == n, m[0]
            assert c["hash_evals"] == 0 and c["table_fallbacks"] == 0 and c["kernel_choice"] == 0, m[0]
            xdp = re.search(r"XDP program: (.*)", r.log())
            assert xdp, r.log()
            x = _counters(xdp[1])
            assert x["active"] > 0 and (x["passive"] > 0) == (mode == "software"), xdp[1]
        else:
            assert not any(s for _, _, _, s in ups)
            # The upstream answers from one CPU: home only for the zone pinned there.
            assert 0 < home < n, line
            assert c["kernel_choice"] == n and c["table_hits"] == 0, m[0]
    finally:
        upstream.kill()
        upstream.wait(timeout=5)


def test_fallback_paths(testbed, ringx, monkeypatch):
    """A table port another socket holds (EADDRINUSE) is skipped and counted, then the
    dynamic search, then the kernel's choice; the zone whose port is free reuses it at once
    after each connection the upstream closed. Every request is answered throughout.

    port_range 40000-40003 and table_ports = 1: zone 0's table is {40000}, its residue also
    has 40002; zone 1's table is {40001}. The test holds 40000 and 40002 in the ringx
    namespace, so a zone-0 connect goes: 40000 busy, search -> 40002 busy, search -> nothing
    -> the kernel chooses."""
    cli_ns, rx_ns, up_ns, rc, ru = testbed
    cpus = _cpus()[:2]
    port, up_port = free_port(), free_port()

    def hold():
        socks = []
        for p in (40000, 40002):
            s = socket.socket()
            s.bind((RU_IP, p))
            s.listen(1)
            socks.append(s)
        return socks

    held = _in_ns(rx_ns, hold)
    upstream = _start_upstream(up_ns, up_port, cpus[0])
    try:
        extra = 'port_range = "40000-40003"\ntable_ports = 1\n'
        r = ringx.make(_config("epoll", port, up_port, "software", cpus, [rc, ru], extra=extra),
                       engine="epoll", start=False, preexec_fn=lambda: _setns(rx_ns))
        r.start()

        def requests():
            for _ in range(16):
                with socket.create_connection((RC_IP, port), timeout=5) as s:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    data = b""
                    while chunk := s.recv(4096):
                        data += chunk
                    assert data.endswith(b"upstream ok\n"), data[:200]
                time.sleep(0.05)  # the previous upstream connection is closed and released

        _in_ns(cli_ns, requests)
        r.signal(signal.SIGTERM)
        assert r.wait_exit(15) == 0, r.log()
        zone = {int(z): _counters(t) for z, t in re.findall(r"steering: zone (\d+): (.*)", r.log())}
        print(f"\nzone 0: {zone[0]}\nzone 1: {zone[1]}")
        assert zone[0]["connects"] + zone[1]["connects"] == 16
        assert zone[0]["connects"] > 0 and zone[1]["connects"] > 0, "the client hash used one zone"
        z0, z1 = zone[0], zone[1]
        assert z0["failures"] == 0 and z1["failures"] == 0
        # Zone 0: both its ports are held by another socket.
        assert z0["port_busy"] >= 2 and z0["dynamic_searches"] >= 1 and z0["hash_evals"] >= 1, z0
        assert z0["table_fallbacks"] >= 1 and z0["kernel_choice"] == z0["connects"], z0
        # Zone 1: its one table port, back at once after each connection the upstream closed.
        assert z1["table_hits"] == z1["connects"] == z1["steered"], z1
        assert z1["dynamic_searches"] == 0 and z1["hash_evals"] == 0 and z1["port_busy"] == 0, z1
        assert z1["locality_home"] == z1["connects"], z1
    finally:
        upstream.kill()
        upstream.wait(timeout=5)
        for s in held:
            s.close()
