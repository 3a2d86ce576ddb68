"""Passive-side connection locality (issue #5): with `[steering] listen = "cpu"` every
connection is accepted by the zone pinned to the CPU that processed its SYN; with "hash" only
about 1/zones of them are.

The proof runs ringx (2 zones on 2 CPUs) in one network namespace and the clients in another,
joined by a veth pair. veth has no RSS: a packet is received (softirq) on the CPU that sent it,
so a client thread pinned to CPU k makes the server side process its packets on CPU k, and the
packets ringx sends come back to the client on the sending zone's CPU. Two measurements:

* server side (epoll engine; io_uring's direct descriptors have no fd to ask): ringx logs each
  accepted connection's zone CPU and SO_INCOMING_CPU (`RUST_LOG=ringx::locality=debug`);
  locality is zone_cpu == incoming_cpu == the client's CPU;
* client side (both engines): after the response, the client socket's SO_INCOMING_CPU is the
  CPU of the zone that sent it; locality is that == the client's CPU.

Root only (namespaces, veth, eBPF); skipped with the reason elsewhere. The namespaces are
removed even when a test fails.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import socket
import subprocess
import threading

import pytest

from conftest import free_port

SO_INCOMING_CPU = 49
CLONE_NEWNET = 0x40000000
PER_CPU = 24            # connections per client CPU and case
SERVER_IP = "10.231.0.1"
CLIENT_IP = "10.231.0.2"

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(name: str) -> None:
    """Moves the calling thread (or the child, in preexec_fn) into network namespace `name`."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


@pytest.fixture
def netns_pair():
    """(server namespace, client namespace) joined by veth, SERVER_IP <-> CLIENT_IP."""
    if os.geteuid() != 0:
        pytest.skip("namespace locality proof needs root (network namespaces, veth, eBPF)")
    if shutil.which("ip") is None:
        pytest.skip("namespace locality proof needs iproute2's `ip`")
    if len(_cpus()) < 2:
        pytest.skip(f"namespace locality proof needs 2 CPUs, this process may use {_cpus()}")
    tag = f"{os.getpid() % 100000}"
    srv, cli = f"rxsteer-s{tag}", f"rxsteer-c{tag}"
    vs, vc = f"rxv{tag}s", f"rxv{tag}c"
    for ns in (srv, cli):
        _ip("netns", "del", ns, check=False)
    try:
        try:
            _ip("netns", "add", srv)
            _ip("netns", "add", cli)
            _ip("link", "add", vs, "netns", srv, "type", "veth", "peer", "name", vc, "netns", cli)
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot create namespaces and veth here: {e.stderr.strip()}")
        for ns, dev, addr in ((srv, vs, SERVER_IP), (cli, vc, CLIENT_IP)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        # Static neighbours: a SYN that waits for ARP is sent later from the CPU that received
        # the ARP reply, which need not be its sender's, and would be steered there.
        mac = {ns: json.loads(_ip("-n", ns, "-j", "link", "show", "dev", dev).stdout)[0]["address"]
               for ns, dev in ((srv, vs), (cli, vc))}
        _ip("-n", cli, "neigh", "replace", SERVER_IP, "lladdr", mac[srv], "dev", vc, "nud", "permanent")
        _ip("-n", srv, "neigh", "replace", CLIENT_IP, "lladdr", mac[cli], "dev", vs, "nud", "permanent")
        yield srv, cli
    finally:
        for ns in (srv, cli):
            _ip("netns", "del", ns, check=False)


def _config(engine: str, port: int, listen: str, cpus: list[int]) -> str:
    return f"""
[runtime]
zones = 2
cpus = [{cpus[0]}, {cpus[1]}]
engine = "{engine}"
max_conns = 1024

[steering]
listen = "{listen}"

[[server]]
listen = ["{SERVER_IP}:{port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok\\n" }}
"""


def _clients(cli_ns: str, ip: str, port: int, cpus: list[int], body: bytes = b"") -> list[dict]:
    """PER_CPU requests to ip:port from a thread pinned to each CPU, inside the client
    namespace, each answered 200 with a body ending in `body`; per connection: the client's
    CPU, its local port, and its socket's SO_INCOMING_CPU after the whole response arrived.
    Shared with test_steering_active."""
    results: list[dict] = []
    errors: list[str] = []
    lock = threading.Lock()

    def run(cpu: int) -> None:
        try:
            _setns(cli_ns)
            os.sched_setaffinity(0, {cpu})
            for _ in range(PER_CPU):
                with socket.create_connection((ip, port), timeout=5) as s:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    data = b""
                    while chunk := s.recv(4096):
                        data += chunk
                    assert data.startswith(b"HTTP/1.1 200") and data.endswith(body), data[:200]
                    with lock:
                        results.append({
                            "cpu": cpu,
                            "port": s.getsockname()[1],
                            "incoming": s.getsockopt(socket.SOL_SOCKET, SO_INCOMING_CPU),
                        })
        except Exception as e:  # noqa: BLE001 - reported by the caller
            with lock:
                errors.append(f"client on CPU {cpu}: {e!r}")

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in cpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "clients did not finish within 60 s"
    assert not errors, errors
    assert len(results) == PER_CPU * len(cpus)
    return results


LOCALITY = re.compile(r"accepted zone_cpu=(\d+) incoming_cpu=(-?\d+) listener=\d+ peer=[\d.]+:(\d+)")


def _server_side(log: str) -> dict[int, tuple[int, int]]:
    """client port -> (zone CPU, SO_INCOMING_CPU) from ringx's locality log lines."""
    return {int(m[3]): (int(m[1]), int(m[2])) for m in LOCALITY.finditer(log)}


@pytest.mark.parametrize("listen", ["cpu", "hash"])
@pytest.mark.parametrize("engine", ["epoll", "uring"])
def test_namespace_locality(netns_pair, ringx, monkeypatch, engine, listen):
    srv_ns, cli_ns = netns_pair
    cpus = _cpus()[:2]
    port = free_port()
    monkeypatch.setenv("RUST_LOG", "info,ringx::locality=debug")
    r = ringx.make(_config(engine, port, listen, cpus), engine=engine, start=False,
                   preexec_fn=lambda: _setns(srv_ns))
    r.start()
    log = r.log()
    if listen == "cpu":
        assert "steered by CPU" in log, log
        method = [ln for ln in log.splitlines() if "steered by CPU" in ln][0]
        print(f"\n{engine}/{listen}: {method.split(' are steered ', 1)[1]}")
    else:
        assert "steered" not in log, log

    conns = _clients(cli_ns, SERVER_IP, port, cpus)

    # Client side: the zone that answered ran on the client's CPU.
    home = sum(c["incoming"] == c["cpu"] for c in conns)
    assert all(c["incoming"] in cpus for c in conns), conns
    line = f"{engine}/{listen}: client side: {home}/{len(conns)} answered from the client's CPU"

    # Server side (epoll): the accepting zone's CPU processed the handshake.
    if engine == "epoll":
        r.wait_log("accepted zone_cpu=", timeout=5)
        seen = _server_side(r.log())
        missing = [c["port"] for c in conns if c["port"] not in seen]
        assert not missing, f"no locality line for client ports {missing}:\n{r.log()}"
        server_home = 0
        for c in conns:
            zone_cpu, incoming = seen[c["port"]]
            assert incoming == c["cpu"], (
                f"handshake from a client on CPU {c['cpu']} processed on CPU {incoming}: "
                "veth did not keep the sender's CPU, the proof does not apply")
            server_home += zone_cpu == incoming
        line += f"; server side: {server_home}/{len(conns)} accepted by the zone on SO_INCOMING_CPU"
        assert server_home == home, "the two measurements disagree"
    print(line)

    if listen == "cpu":
        assert home == len(conns), line + f"\n{conns}"
    else:
        # The kernel's hash: about half; all or none has probability 2^-47.
        assert 0 < home < len(conns), line
