"""Three XDP stages on one device under `ringx serve`: the [xdp] filter, the [lb] balancer
behind it and [steering] software steering behind the balancer, all on the balancer's veth of
the test bed of test_lb.py (whose fixture this module reuses: its own namespaces, pins and
backends), with ringx serving a listener of its own in the balancer's namespace.

    client --> router --> l0: filter --> balancer --> steering --> ringx's listener
                               |            |
                            blocked      VIP: encapsulated to a backend (XDP_TX)

Checked through the stages' own counters and the server's locality log: blocked sources
never get through; VIP traffic is balanced over the backends; other traffic is passed by the
balancer (pass_not_vip) and steered to the CPU of the zone that accepts it (the client is
pinned to one CPU, the steering program spreads its connections by source port). Then each
stage is replaced while traffic flows (the filter and the balancer by `ringx xdp` and `ringx
lb`, all three by a binary upgrade of `ringx serve`): no request fails, no blocked
connection gets through, no packet to the VIP reaches the balancer namespace's stack (it
would have passed the chain without the balancer), and every connection to ringx's listener
was steered.

Root only (skips with the reason otherwise, like test_lb.py); needs two CPUs for steering to
show.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time

import pytest

from test_lb import (BACKENDS, CLI, LB, PIN, PORT, VIP, bed, in_ns, lb, lb_config,  # noqa: F401
                     lb_stats, many, ns, ringx, setns_to)

LOCAL_PORT = 8081
ADMIN_PORT = 9902
BLOCKED = "10.88.1.3"
SO_INCOMING_CPU = 49
FPIN, LPIN = f"{PIN}/f3", f"{PIN}/lb"
LOCALITY = re.compile(r"accepted zone_cpu=(\d+) incoming_cpu=(-?\d+) listener=\d+ "
                      r"peer=[\d.]+:(\d+)")
STEER_EXIT = re.compile(r"steering: XDP program: (.*)")
PER_CHECK = 48


def cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))[:2]


def passive_zone(addr: str, sport: int, zones: int) -> int:
    """The zone the steering program gives a client's connection (passive_zone() in
    crates/steer/bpf/ringx_steer.bpf.c)."""
    fold = int.from_bytes(socket.inet_aton(addr), "big")
    h = ((fold ^ sport) * 0x9E3779B1) & 0xFFFFFFFF
    return (h * zones) >> 32


def serve_config(pid_file) -> str:
    c = cpus()
    lbc = lb_config().replace('devices = ["l0"]', f'behind_filter = "{FPIN}"\nchain = true')
    assert "behind_filter" in lbc and f'pin_dir = "{LPIN}"' in lbc
    return f"""
[runtime]
zones = 2
cpus = [{c[0]}, {c[1]}]
engine = "epoll"
pid_file = "{pid_file}"

[admin]
listen = "127.0.0.1:{ADMIN_PORT}"

[[server]]
listen = ["{LB}:{LOCAL_PORT}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "lb host\\n" }}

[xdp]
dev = "l0"
pin_dir = "{FPIN}"
chain = true
block = ["{BLOCKED}/32"]

[steering]
mode = "software"
device = "l0"
listen = "cpu"
{lbc}"""


def local_requests(n: int, cpu: int) -> list[int]:
    """n connections to ringx's own listener from CLI, one request each, from a thread pinned
    to `cpu` in the client namespace; their source ports."""
    def run():
        os.sched_setaffinity(0, {cpu})
        ports = []
        for _ in range(n):
            with socket.create_connection((LB, LOCAL_PORT), timeout=5,
                                          source_address=(CLI, 0)) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
                assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"lb host\n"), data
                ports.append(s.getsockname()[1])
        return ports
    return in_ns("c", run)


def check_steered(log: str, ports: list[int]):
    """Every connection was accepted on the CPU the steering program chose for it (the
    client sent everything from one CPU, so without steering every connection would arrive
    there), and both zones got some."""
    c = cpus()
    seen = {int(m[3]): (int(m[1]), int(m[2])) for m in LOCALITY.finditer(log)}
    missing = [p for p in ports if p not in seen]
    assert not missing, f"no accept line for client ports {missing}:\n{log[-3000:]}"
    want = {p: c[passive_zone(CLI, p, 2)] for p in ports}
    wrong = {p: (seen[p], want[p]) for p in ports if seen[p] != (want[p], want[p])}
    assert not wrong, f"(zone CPU, incoming CPU) vs the steered CPU: {wrong}"
    assert {want[p] for p in ports} == set(c), want


def check_incoming(log: str, ports: list[int]):
    """Every connection's SYN was steered to the CPU the steering program chose for it (the
    zone that accepted it is not checked: while a binary upgrade hands the listeners over,
    the kernel's reuseport hash picks)."""
    seen = {int(m[3]): int(m[2]) for m in LOCALITY.finditer(log)}
    missing = [p for p in ports if p not in seen]
    assert not missing, f"no accept line for client ports {missing[:20]}:\n{log[-3000:]}"
    c = cpus()
    wrong = {p: (seen[p], c[passive_zone(CLI, p, 2)]) for p in ports
             if seen[p] != c[passive_zone(CLI, p, 2)]}
    assert not wrong, f"(incoming CPU, steered CPU) of {len(wrong)} of {len(ports)}: {wrong}"


def from_blocked(dst: str, port: int, timeout: float = 1.0) -> bool:
    try:
        socket.create_connection((dst, port), timeout=timeout,
                                 source_address=(BLOCKED, 0)).close()
    except OSError:
        return False
    return True


def filter_stats() -> dict:
    return json.loads(ringx("xdp", "--pin-dir", FPIN, "stats", "--json").stdout)


def reason(stats: dict, name: str) -> int:
    return stats["reasons"][name]["packets"]


class Traffic:
    """Requests that go on while stages are replaced, from the client namespace: new
    connections to the VIP and to ringx's listener, and connection attempts from the blocked
    source. Every failure is kept with what failed."""

    def __init__(self):
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.done = {"vip": 0, "local": 0, "blocked": 0}
        self.failures: list[str] = []
        self.got_through = 0
        # Client ports of the connections to ringx's listener (sent from one CPU).
        self.local_ports: list[int] = []
        self.threads = [threading.Thread(target=in_ns, args=("c", self.loop, k), daemon=True)
                        for k in self.done]

    def once(self, kind: str):
        if kind == "blocked":
            ok = from_blocked(LB if self.done[kind] % 2 else VIP,
                              LOCAL_PORT if self.done[kind] % 2 else PORT, timeout=0.2)
            with self.lock:
                self.got_through += ok
            return
        dst, port = (VIP, PORT) if kind == "vip" else (LB, LOCAL_PORT)
        with socket.create_connection((dst, port), timeout=5, source_address=(CLI, 0)) as s:
            if kind == "local":
                with self.lock:
                    self.local_ports.append(s.getsockname()[1])
            s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        want = b"lb host\n" if kind == "local" else None
        assert data.startswith(b"HTTP/1.1 200"), data
        if want:
            assert data.endswith(want), data
        else:
            assert data.split(b"\r\n\r\n", 1)[1].strip().decode() in BACKENDS, data

    def loop(self, kind: str):
        if kind == "local":
            os.sched_setaffinity(0, {cpus()[0]})
        while not self.stop.is_set():
            try:
                self.once(kind)
            except Exception as e:  # noqa: BLE001 - counted, reported by the test
                with self.lock:
                    self.failures.append(f"{kind} #{self.done[kind]}: {e!r}")
            with self.lock:
                self.done[kind] += 1

    def counts(self) -> dict:
        with self.lock:
            return dict(self.done)

    def progress(self, what: str, seconds: float = 2.5):
        """Traffic of every kind went on for `seconds` after `what` (long enough for a SYN
        that the busy test machine lost anyway to be sent again after its second)."""
        before = self.counts()
        time.sleep(seconds)
        after = self.counts()
        stalled = [k for k in after if after[k] <= before[k]]
        assert not stalled, f"no {stalled} requests completed after {what}: {before} {after}"

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


def stack_saw_vip() -> int:
    """Packets to the VIP that reached the balancer namespace's own stack: each one passed
    the chain without the balancer (a gap while a stage was replaced)."""
    out = ns("l", "iptables", "-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n").stdout
    rows = (ln.split() for ln in out.splitlines()[2:])
    return sum(int(f[0]) for f in rows if f and f[-1] == VIP)


def running(pid: int) -> bool:
    """Not this test's child (the old process started it): done when its /proc entry is gone
    or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pid_file(pid_file):
    try:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def test_filter_balancer_and_steering_on_one_device_under_serve(bed, monkeypatch):
    if len(cpus()) < 2:
        pytest.skip("steering needs two CPUs to show (one here)")
    c = cpus()
    ns("c", "ip", "addr", "add", f"{BLOCKED}/24", "dev", "c0")
    # The bed's balancer leaves its own link on l0: ringx serve builds the three stages.
    lb("detach", "--dev", "l0")
    pid_file = bed["tmp"].mktemp("stages") / "ringx.pid"
    monkeypatch.setenv("RUST_LOG", "info,ringx::locality=debug")
    srv = bed["factory"].make(serve_config(pid_file), name="lb-stages",
                              preexec_fn=setns_to("l"))
    try:
        log = srv.log()
        assert "attached the filter to l0" in log, log
        assert "the balancer (program" in log and f"is behind the filter in {FPIN}" in log, log
        assert (f"steering: XDP program behind the [lb] balancer on l0 (its chain slot "
                f"{LPIN}/lb_chain)") in log, log

        # Blocked sources: the filter drops them, to the VIP and to ringx's listener alike.
        f0, s0 = filter_stats(), lb_stats()
        assert not in_ns("c", from_blocked, VIP, PORT)
        assert not in_ns("c", from_blocked, LB, LOCAL_PORT)
        assert reason(filter_stats(), "drop_block") - reason(f0, "drop_block") >= 2

        # VIP traffic: balanced over the three backends.
        got = many(600)
        assert sum(got.values()) == 600 and set(got) == set(BACKENDS), got
        s1 = lb_stats()
        assert s1["services"][0]["new_flows"] - s0["services"][0]["new_flows"] >= 600

        # Everything else: passed by the balancer, steered, answered by ringx.
        ports = local_requests(PER_CHECK, c[0])
        s2 = lb_stats()
        assert reason(s2, "pass_not_vip") - reason(s1, "pass_not_vip") >= 3 * PER_CHECK, s2
        check_steered(srv.log(), ports)

        # Each stage replaced while traffic flows: no gap.
        cfg = bed["tmp"].mktemp("stages") / "lb.toml"
        cfg.write_text(serve_config(pid_file))
        ns("l", "iptables", "-t", "raw", "-A", "PREROUTING", "-d", VIP)
        fb = reason(filter_stats(), "drop_block")
        with Traffic() as t:
            t.progress("the start")
            out = ringx("xdp", "--pin-dir", FPIN, "attach", "--dev", "l0", "--chain").stdout
            assert "replaced the program on l0's link" in out, out
            t.progress("the filter's replacement")
            out = lb("attach", "-c", cfg).stdout
            assert "swapped the stage behind the filter" in out, out
            assert "goes on to program" in out, out  # steering stays behind it
            t.progress("the balancer's replacement")
            old = srv.pid
            srv.signal(signal.SIGUSR2)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                try:
                    if int(pid_file.read_text()) != old:
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            assert int(pid_file.read_text()) != old, srv.log()
            assert srv.wait_exit(15) == 0, srv.log()
            t.progress("the binary upgrade")
        counts = t.counts()
        assert not t.failures, (counts, t.failures[:10])
        assert t.got_through == 0, counts
        # No packet to the VIP went past the chain without the balancer (it would have
        # reached this namespace's stack, and been sent again by the client a second later).
        assert stack_saw_vip() == 0, counts
        # Nor did one of ringx's own connections miss the steering stage.
        check_incoming(srv.log(), t.local_ports)
        assert reason(filter_stats(), "drop_block") - fb >= counts["blocked"], counts
        print(f"\nwhile the stages were replaced: {counts}")

        log = srv.log()
        assert "replaced the filter on l0" in log, log
        # The new process steers its listeners by CPU with its own reuseport map (the old
        # one gave the sockets up), not by the old process's map for the old process's zones.
        assert log.count("are steered by CPU with the eBPF reuseport program") == 2, log
        assert re.search(r"swapped the stage behind the filter in \S+ \(program \d+ -> \d+\)",
                         log), log
        # The old process left the steering slot to the new one, which steers as before.
        before = srv.log()
        ports = local_requests(PER_CHECK, c[0])
        check_steered(srv.log()[len(before):], ports)
        assert sum(many(300).values()) == 300

        new = int(pid_file.read_text())
        os.kill(new, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and running(new):
            time.sleep(0.05)
        exits = STEER_EXIT.findall(srv.log())
        assert len(exits) == 2, srv.log()
        for e in exits:
            x = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", e)}
            assert x["passive"] >= 3 * PER_CHECK and x["redirected"] > 0, e
        # Without ringx, the filter and the balancer stay (pinned links), steering goes.
        assert sum(many(100).values()) == 100
        assert not in_ns("c", from_blocked, VIP, PORT)
    finally:
        kill_pid_file(pid_file)
        srv.stop()
        ringx("xdp", "--pin-dir", FPIN, "detach", "--dev", "l0", check=False)
