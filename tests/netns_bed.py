"""The balancer's test bed, in network namespaces a test creates (one-armed, as Katran runs:
the balancer's one device faces a router, which also carries the answers):

    c (client 10.88.1.2) ──┐
                           │        ┌── l (balancer 10.88.2.2, XDP ringx_lb on l0)
                  r (router, forwards; VIP 10.88.100.1 routed to the balancer)
                           │        ├── b1 (backend 10.88.11.2, VIP on lo, XDP decap)
                           │        ├── b2 (backend 10.88.12.2)
                           │        └── b3 (backend 10.88.13.2)

A client's packet to the VIP goes router -> balancer, which encapsulates it (GUE) and sends
it back out of the same device (XDP_TX) to the router, which routes it to the backend; the
backend's XDP program takes the outer headers off, the server there answers from the VIP,
and the answer goes router -> client without passing the balancer (direct server return).
Every link also carries IPv6 (fd88::/16). The router also has 10.88.200.1 on its loopback,
which every namespace reaches (a place for a service the backends share, such as Redis).

Used by tests/test_lb.py (and test_lb_stages.py through it) and tests/test_cluster_fleet.py,
each with namespaces of its own (`Bed(prefix)`). Commands enter the namespaces with
`nsenter --net` (not `ip netns exec`, which remounts /sys and would hide the pins). Needs
root, netns, XDP, ethtool, iptables and curl (`skip_reason` says which is missing).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import subprocess
import threading

from conftest import ringx_path

TAG = f"{os.getpid() % 100000}"
NAMES = ("c", "r", "l", "b1", "b2", "b3")
VIP = "10.88.100.1"
PORT = 8080
CLI, LB = "10.88.1.2", "10.88.2.2"
BACKENDS = {"b1": "10.88.11.2", "b2": "10.88.12.2", "b3": "10.88.13.2"}
VIP6, CLI6, LB6 = "fd88:100::1", "fd88:1::2", "fd88:2::2"
BACKENDS6 = {"b1": "fd88:11::2", "b2": "fd88:12::2", "b3": "fd88:13::2"}
# The router's own address on its loopback, reached from every namespace.
SHARED = "10.88.200.1"
CLONE_NEWNET = 0x40000000


def on_thread(enter, fn, *args):
    """fn(*args) on a thread of its own that calls `enter` first (a setns, which moves only
    the calling thread); what fn returns or raises is the caller's."""
    out = {}

    def body():
        try:
            enter()
            out["v"] = fn(*args)
        except BaseException as e:  # handed to the caller
            out["e"] = e
    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


def sh(*args, check=True, timeout=60, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                       **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited with {r.returncode}:\n"
                             f"{r.stdout}{r.stderr}")
    return r


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root (XDP and network namespaces need root)"
    for tool in ("ip", "nsenter", "curl", "ethtool", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-deps.sh installs it)"
    if not os.path.isdir("/sys/fs/bpf"):
        return "no /sys/fs/bpf"
    probe = subprocess.run(["ip", "netns", "add", f"lbprobe{TAG}"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"lbprobe{TAG}"], capture_output=True)
    return None


def get(conn: socket.socket | None = None, timeout=3.0, vip=VIP, src: str | None = None,
        path: str = "/", port: int = PORT) -> tuple[str, socket.socket]:
    """GET `path` on `conn` (kept alive) or on a new connection to the VIP (from `src`, else
    the kernel's choice); returns the body (the backend's name) and the connection."""
    if conn is None:
        conn = socket.create_connection((vip, port), timeout=timeout,
                                        source_address=(src, 0) if src else None)
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: vip\r\n\r\n".encode())
    buf = b""
    while True:
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep:
            length = int([h.split(b":")[1] for h in head.split(b"\r\n")
                          if h.lower().startswith(b"content-length")][0])
            if len(body) >= length:
                assert head.startswith(b"HTTP/1.1 200"), head
                return body[:length].decode().strip(), conn
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed after {buf!r}")
        buf += chunk


class Bed:
    """One bed's namespaces (named PREFIX + role + TAG), pins, and what runs commands in
    them. `build()` makes it (the backends' servers are the caller's to start), `teardown()`
    removes all of it, also what an earlier run of this process left."""

    def __init__(self, prefix: str):
        self.ns = {k: f"{prefix}{k}{TAG}" for k in NAMES}
        self.pin = f"/sys/fs/bpf/ringx-{prefix}test-{TAG}"

    def run(self, name, *args, **kw):
        """Runs a command in namespace `name` (network only; mounts are the host's)."""
        return sh("nsenter", f"--net=/run/netns/{self.ns[name]}", *args, **kw)

    def ringx(self, *args, check=True, where="l"):
        return self.run(where, ringx_path(), *args, check=check)

    def lb(self, *args, check=True):
        return self.ringx("lb", "--pin-dir", f"{self.pin}/lb", *args, check=check)

    def lb_stats(self) -> dict:
        return json.loads(self.lb("stats", "--json").stdout)

    def setns_to(self, name):
        """A preexec_fn that moves the child (or the calling thread) into the network
        namespace `name` only."""
        path = f"/run/netns/{self.ns[name]}"

        def enter():
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(path, os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
        return enter

    def in_ns(self, name, fn, *args):
        """Runs fn(*args) on a thread inside namespace `name` (setns(CLONE_NEWNET) moves only
        the calling thread); sockets it makes stay in that namespace."""
        return on_thread(self.setns_to(name), fn, *args)

    def veth(self, a: str, a_dev: str, a_addr: str, b: str, b_dev: str, b_addr: str, mtu: int,
             a6: str, b6: str):
        sh("ip", "link", "add", f"t{a_dev}{TAG}", "type", "veth", "peer", "name",
           f"t{b_dev}{TAG}")
        for k, dev, addr, addr6 in ((a, a_dev, a_addr, a6), (b, b_dev, b_addr, b6)):
            sh("ip", "link", "set", f"t{dev}{TAG}", "netns", self.ns[k])
            sh("ip", "-n", self.ns[k], "link", "set", f"t{dev}{TAG}", "name", dev)
            sh("ip", "-n", self.ns[k], "link", "set", dev, "mtu", mtu)
            sh("ip", "-n", self.ns[k], "addr", "add", addr, "dev", dev)
            sh("ip", "-n", self.ns[k], "addr", "add", addr6, "dev", dev, "nodad")
            sh("ip", "-n", self.ns[k], "link", "set", dev, "up")
            # Full checksums in software: a frame the balancer re-sends with XDP_TX is a new
            # frame, so a checksum left for the NIC to finish would stay unfinished.
            self.run(k, "ethtool", "-K", dev, "tx", "off", check=False)

    def teardown(self):
        for n in self.ns.values():
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        shutil.rmtree(self.pin, ignore_errors=True)

    def build(self):
        """The namespaces, links, routes, the router's filter and counters, and each
        backend's decapsulation; the caller starts the backends' servers and attaches the
        balancer (`lb attach --dev l0 -c ...`, `lb_config()`)."""
        self.teardown()
        ns, run = self.ns, self.run
        for n in ns.values():
            sh("ip", "netns", "add", n)
        for k in ns:
            sh("ip", "-n", ns[k], "link", "set", "lo", "up")
        self.veth("c", "c0", f"{CLI}/24", "r", "rc", "10.88.1.1/24", 1500, f"{CLI6}/64",
                  "fd88:1::1/64")
        # Links that carry encapsulated packets have room for the outer headers.
        self.veth("l", "l0", f"{LB}/24", "r", "rl", "10.88.2.1/24", 1600, f"{LB6}/64",
                  "fd88:2::1/64")
        for i, b in enumerate(("b1", "b2", "b3"), 1):
            self.veth(b, f"{b}0", f"{BACKENDS[b]}/24", "r", f"r{b}", f"10.88.1{i}.1/24", 1600,
                      f"{BACKENDS6[b]}/64", f"fd88:1{i}::1/64")
            sh("ip", "-n", ns[b], "route", "add", "default", "via", f"10.88.1{i}.1")
            sh("ip", "-n", ns[b], "-6", "route", "add", "default", "via", f"fd88:1{i}::1")
            sh("ip", "-n", ns[b], "addr", "add", f"{VIP}/32", "dev", "lo")
            sh("ip", "-n", ns[b], "addr", "add", f"{VIP6}/128", "dev", "lo", "nodad")
            # The answer leaves from the VIP, which no route here says arrives on b*0.
            run(b, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")
            run(b, "sysctl", "-qw", f"net.ipv4.conf.{b}0.rp_filter=0")
        sh("ip", "-n", ns["c"], "route", "add", "default", "via", "10.88.1.1")
        sh("ip", "-n", ns["l"], "route", "add", "default", "via", "10.88.2.1")
        sh("ip", "-n", ns["c"], "-6", "route", "add", "default", "via", "fd88:1::1")
        sh("ip", "-n", ns["l"], "-6", "route", "add", "default", "via", "fd88:2::1")
        sh("ip", "-n", ns["r"], "addr", "add", f"{SHARED}/32", "dev", "lo")
        run("r", "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        sh("ip", "-n", ns["r"], "-6", "route", "add", f"{VIP6}/128", "via", LB6)
        run("r", "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for conf in ("all", "default", "rc", "rl", "rb1", "rb2", "rb3"):
            run("r", "sysctl", "-qw", f"net.ipv4.conf.{conf}.rp_filter=0")
        sh("ip", "-n", ns["r"], "route", "add", f"{VIP}/32", "via", LB)
        # A veth delivers frames its peer sent with XDP_TX only when it runs an XDP program
        # itself (GRO alone is not enough on this kernel): the router runs ringx's filter,
        # with no rules, on the balancer's link.
        self.ringx("xdp", "--pin-dir", f"{self.pin}/r", "attach", "--dev", "rl", where="r")
        # Counters of the path: answers from the VIP forwarded backend -> client by the
        # router, and anything from the VIP reaching the balancer's stack.
        for b in ("b1", "b2", "b3"):
            run("r", "iptables", "-A", "FORWARD", "-s", VIP, "-i", f"r{b}", "-o", "rc")
        run("r", "iptables", "-A", "FORWARD", "-s", VIP, "-i", "rl")
        run("l", "iptables", "-t", "raw", "-A", "PREROUTING", "-s", VIP)
        for b in ("b1", "b2", "b3"):
            self.ringx("lb", "--pin-dir", f"{self.pin}/{b}", "backend", "--dev", f"{b}0",
                       "--gue-port", "6080", where=b)

    def lb_config(self, backends=("b1", "b2", "b3"), weights: dict | None = None,
                  health=False, v6=False) -> str:
        w = weights or {}
        bl = ", ".join(f'{{ addr = "{BACKENDS[b]}", weight = {w.get(b, 1)} }}'
                       for b in backends)
        h = ('health = { check = "http", interval = "200ms", timeout = "200ms", rise = 2, '
             'fall = 2 }') if health else ""
        return f"""
[lb]
devices = ["l0"]
mode = "native"
encap = "gue"
gue_port = 6080
source_v4 = "{LB}"
source_v6 = "{LB6}"
pin_dir = "{self.pin}/lb"
conn_table_size = 65536

[[lb.service]]
vip = "{VIP}:{PORT}"
backends = [{bl}]
{h}
""" + ("" if not v6 else f"""
[[lb.service]]
vip = "[{VIP6}]:{PORT}"
backends = [{", ".join(f'"{BACKENDS6[b]}"' for b in backends)}]
""")
