"""libringx_preload.so and `ringx run -- CMD` (issue #25): ringx's connection locality for
unmodified programs, on the kernel's own TCP stack.

* An unmodified Debian nginx (2 workers, `listen ... reuseport`) in a network namespace,
  clients in another, joined by veth (tests/test_steering.py's bed: veth processes a packet on
  the CPU that sent it, so a client thread pinned to CPU k has its SYN processed on CPU k).
  Without the library the kernel's reuseport hash gives about half of the connections to the
  worker on the other CPU; under `ringx run` every connection is accepted by the worker on the
  SYN's CPU. Measured from both ends: the worker's pid in the body (its CPU affinity), and the
  client socket's SO_INCOMING_CPU (the CPU that processed the worker's response). A reload
  (`nginx -s reload`) keeps it.
* An unmodified Python client under `ringx run --mode software`: each connection's replies are
  processed on the connecting thread's CPU (SO_INCOMING_CPU), against about half without it.
* A differential test: one script exercising non-blocking connect, bind before connect, IPv6,
  UNIX sockets, UDP, refused connections and bad descriptors prints the same transcript with
  and without the library, while the library's counters show it did steer.

Root only (namespaces, veth, eBPF, XDP); skipped with the reason elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import free_port
from preload_util import (PINNED_CLIENT, PORT_ECHO_SERVER, Nginx, haproxy_bin, haproxy_conf,
                          nginx_conf, preload_lib, read_stats)
from test_steering import CLIENT_IP, SERVER_IP, SO_INCOMING_CPU, _cpus, _setns, netns_pair  # noqa: F401

PER_CPU = 40


def _requests(cli_ns: str, port: int, cpus: list[int]) -> list[dict]:
    """PER_CPU requests from a thread pinned to each CPU; per connection: the client's CPU,
    the CPU that processed the response (SO_INCOMING_CPU) and the number in the body (nginx:
    the worker's pid; haproxy: the thread's number)."""
    results, errors, lock = [], [], threading.Lock()

    def run(cpu: int) -> None:
        try:
            _setns(cli_ns)
            os.sched_setaffinity(0, {cpu})
            for _ in range(PER_CPU):
                with socket.create_connection((SERVER_IP, port), timeout=5) as s:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    data = b""
                    while chunk := s.recv(4096):
                        data += chunk
                    assert data.startswith(b"HTTP/1.1 200"), data[:200]
                    answer = int(data.rsplit(b"\r\n\r\n", 1)[1])
                    incoming = s.getsockopt(socket.SOL_SOCKET, SO_INCOMING_CPU)
                    with lock:
                        results.append({"cpu": cpu, "incoming": incoming, "answer": answer})
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append(f"client on CPU {cpu}: {e!r}")

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in cpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(results) == PER_CPU * len(cpus)
    return results


def _home(c: dict, server_cpu: int) -> bool:
    """Whether connection `c` was answered on its client's CPU, by the server's account
    (`server_cpu`: the CPU of the worker or thread that answered), checked against the
    client's (SO_INCOMING_CPU: the CPU that processed the last packet it received). Answered
    on the client's CPU, every packet of the connection is, so the two agree. Answered on the
    other CPU, the client may still have processed the server kernel's immediate ACK of the
    request (sent from the softirq on the client's CPU) last: the two CPUs' backlogs keep no
    order between them, so under load that ACK can come after the response."""
    if server_cpu == c["cpu"]:
        assert c["incoming"] == c["cpu"], (c, server_cpu)
        return True
    assert c["incoming"] in (server_cpu, c["cpu"]), (c, server_cpu)
    return False


def _share(conns: list[dict]) -> tuple[int, int]:
    """(connections answered by the nginx worker on the client's CPU, total)."""
    home = 0
    for c in conns:
        worker_cpus = os.sched_getaffinity(c["answer"])
        assert len(worker_cpus) == 1, (c, worker_cpus)
        home += _home(c, next(iter(worker_cpus)))
    return home, len(conns)


@pytest.mark.parametrize("preload,pin", [(False, False), (True, False), (True, True)],
                         ids=["plain", "ringx-run", "ringx-run-pin"])
def test_nginx_accepts_on_the_syns_cpu(netns_pair, ringx_bin, tmp_path, preload, pin):  # noqa: F811
    """nginx pins its workers (`worker_cpu_affinity auto`), or, with --pin and no affinity
    directive, the library pins each worker to a free CPU as it adds its listener."""
    srv, cli = netns_pair
    cpus = _cpus()[:2]
    preload_lib(ringx_bin)
    port = free_port()
    # nginx workers run as nobody: their counters go to a directory they can reach.
    stats = Path(tempfile.mkdtemp(prefix="ringx-preload-"))
    stats.chmod(0o777)
    conf = nginx_conf(tmp_path, f"{SERVER_IP}:{port}", affinity=not pin)
    wrapper = ([ringx_bin, "run", "--cpus", ",".join(map(str, cpus)), "--stats", str(stats),
                *(["--pin"] if pin else []), "--"] if preload else None)
    ng = Nginx(tmp_path, srv, conf, wrapper)
    try:
        ng.wait_ready(port)
        home, total = _share(_requests(cli, port, cpus))
        print(f"\nnginx {'under ringx run' if preload else 'alone'}{' --pin' if pin else ''}: "
              f"{home}/{total} connections "
              f"accepted by the worker on the SYN's CPU")
        if not preload:
            # The kernel's hash: about half; all or none has probability 2^-79.
            assert 0 < home < total
            return
        assert "steered to the listener of the CPU" in ng.stderr(), ng.stderr()
        assert home == total
        ng.reload()
        home, total = _share(_requests(cli, port, cpus))
        print(f"after nginx -s reload: {home}/{total}")
        assert home == total
    finally:
        ng.stop()
        st = read_stats(stats)
        shutil.rmtree(stats)
    # Two listeners (at start and again at reload), each claimed by its worker, before and
    # after the reload.
    assert st.get("listeners_steered", 0) >= 2, st
    assert st.get("listener_claims", 0) >= 4, st
    assert st.get("threads_pinned", 0) == (4 if pin else 0), st


def _start_server(ns: str, port: int, cpu: int) -> subprocess.Popen:
    def pre():
        _setns(ns)
        os.sched_setaffinity(0, {cpu})

    p = subprocess.Popen([sys.executable, "-c", PORT_ECHO_SERVER, SERVER_IP, str(port)],
                         preexec_fn=pre, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "ss", "-Htln",
                              f"sport = :{port}"], capture_output=True, text=True)
        if str(port) in out.stdout:
            return p
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.05)
    p.kill()
    raise AssertionError("the server did not start listening")


@pytest.mark.parametrize("preload", [False, True], ids=["plain", "ringx-run"])
def test_client_replies_on_the_connecting_cpu(netns_pair, ringx_bin, tmp_path, preload):  # noqa: F811
    srv, cli = netns_pair
    if not os.path.isdir("/sys/fs/bpf"):
        pytest.skip("software steering needs BPF (/sys/fs/bpf is missing)")
    cpus = _cpus()[:2]
    preload_lib(ringx_bin)
    port = free_port()
    server = _start_server(srv, port, cpus[0])
    stats = tmp_path / "stats"
    stats.mkdir()
    run = [ringx_bin, "run", "--mode", "software", "--cpus", ",".join(map(str, cpus)),
           "--rss-table", f"{CLIENT_IP} {SERVER_IP} {port}", "--stats", str(stats), "--"]
    try:
        cmd = [sys.executable, "-c", PINNED_CLIENT, SERVER_IP, str(port), str(PER_CPU),
               ",".join(map(str, cpus))]
        p = subprocess.run([*(run if preload else []), *cmd], capture_output=True, text=True,
                           timeout=120, preexec_fn=lambda: _setns(cli))
        assert p.returncode == 0, p.stderr
        rows = [tuple(map(int, ln.split())) for ln in p.stdout.splitlines()]
        assert len(rows) == PER_CPU * len(cpus), p.stdout
        home = sum(cpu == incoming for cpu, incoming, _ in rows)
        print(f"\nclient {'under ringx run --mode software' if preload else 'alone'}: "
              f"{home}/{len(rows)} connections' replies processed on the connecting CPU")
        if not preload:
            assert 0 < home < len(rows)
            return
        assert "XDP program on" in p.stderr, p.stderr
        assert home == len(rows), rows
        # Each connection's port is of its zone's residue (zone i on cpus[i]).
        assert all(lport & 1 == cpus.index(cpu) for cpu, _, lport in rows), rows
        st = read_stats(stats)
        assert st["connects_steered"] == len(rows) and st["table_hits"] == len(rows), st
        assert st["ports_released"] == len(rows) and st["connects_fallback"] == 0, st
        # curl, pinned to the second CPU: its port is that zone's.
        c = subprocess.run([*run, "taskset", "-c", str(cpus[1]), "curl", "-sS",
                            f"http://{SERVER_IP}:{port}/"], capture_output=True, text=True,
                           timeout=30, preexec_fn=lambda: _setns(cli))
        assert c.returncode == 0, c.stderr
        assert int(c.stdout) & 1 == 1, c.stdout
    finally:
        server.kill()
        server.wait()


def test_differential(netns_pair, ringx_bin, tmp_path):  # noqa: F811
    """The same script, with and without the library: identical transcripts, and the library
    did steer (its counters)."""
    srv, _ = netns_pair
    preload_lib(ringx_bin)
    port, closed, port6 = free_port(), free_port(), free_port()
    script = Path(__file__).parent / "preload_diff.py"
    stats = tmp_path / "stats"
    stats.mkdir()

    def transcript(wrapper: list[str]) -> str:
        udir = tempfile.mkdtemp(dir=tmp_path)
        p = subprocess.run([*wrapper, sys.executable, str(script), SERVER_IP, str(port),
                            str(closed), str(port6), udir], capture_output=True, text=True,
                           timeout=60, preexec_fn=lambda: _setns(srv))
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.endswith("done\n"), p.stdout
        return p.stdout

    plain = transcript([])
    steered = transcript([
        ringx_bin, "run", "--listen", "cpu", "--pin", "--mode", "software",
        "--rss-table", f"{SERVER_IP} {SERVER_IP} {port}",
        "--rss-table", f"{SERVER_IP} {SERVER_IP} {closed}",
        "--rss-table", f"::1 ::1 {port6}", "--xdp-mode", "generic", "--stats", str(stats), "--"])
    print("\n" + plain)
    assert steered == plain
    st = read_stats(stats)
    print({k: v for k, v in st.items() if v})
    # 2 + 1 reuseport listeners grouped. Table connects: blocking, non-blocking, refused,
    # non-blocking refused, IPv6, raw; passed by: the second connect of a connected socket and
    # the one bound first.
    assert st["listeners_steered"] == 3, st
    assert st["connects_steered"] == 6 and st["connects_prebound"] == 2, st
    assert st["ports_released"] == 6 and st["table_hits"] == 6, st


def _listeners_in_epoll(pid: int, ss_out: str) -> int:
    """How many (epoll set, listener) registrations the process tree of `pid` holds for the
    listening sockets in `ss -e` output (their inodes), read from /proc's fdinfo."""
    inodes = set(re.findall(r"ino:(\d+)", ss_out))
    pids, n = [pid], 0
    for q in pids:
        for t in Path(f"/proc/{q}/task").glob("*/children"):
            try:
                pids += [int(c) for c in t.read_text().split()]
            except OSError:
                pass
        try:
            socks = {}
            for fd in os.listdir(f"/proc/{q}/fd"):
                target = os.readlink(f"/proc/{q}/fd/{fd}")
                if target.startswith("socket:["):
                    socks[fd] = target[8:-1]
            for fd in os.listdir(f"/proc/{q}/fdinfo"):
                info = Path(f"/proc/{q}/fdinfo/{fd}").read_text()
                n += sum(socks.get(t) in inodes for t in re.findall(r"tfd:\s*(\d+)", info))
        except OSError:
            continue
    return n


@pytest.mark.parametrize("preload", [False, True], ids=["plain", "ringx-run"])
def test_haproxy_threads_accept_on_the_syns_cpu(netns_pair, ringx_bin, tmp_path, preload):  # noqa: F811
    """A second unmodified server, multi-threaded rather than multi-process: haproxy with two
    threads pinned to the two CPUs (`cpu-map`), each owning one reuseport listener of the
    address. Each thread adds its listener to its own epoll, which claims it for its CPU."""
    srv, cli = netns_pair
    cpus = _cpus()[:2]
    preload_lib(ringx_bin)
    port = free_port()
    conf = haproxy_conf(tmp_path, f"{SERVER_IP}:{port}", cpus)
    log = open(tmp_path / "haproxy.stderr", "wb")
    cmd = [haproxy_bin(), "-db", "-f", str(conf)]
    if preload:
        cmd = [ringx_bin, "run", "--cpus", ",".join(map(str, cpus)), "--", *cmd]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         preexec_fn=lambda: _setns(srv))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out = subprocess.run(["nsenter", f"--net=/run/netns/{srv}", "ss", "-Htlne",
                                  f"sport = :{port}"], capture_output=True, text=True).stdout
            # Under ringx run a listener is claimed for its thread's CPU when the thread adds
            # it to its epoll; until then the kernel's hash places connections. So wait for
            # both listeners to be in epoll sets, not only listening.
            if out.count("\n") >= 2 and _listeners_in_epoll(p.pid, out) >= 2:
                break
            assert p.poll() is None, (tmp_path / "haproxy.stderr").read_text()
            time.sleep(0.05)
        time.sleep(0.1)  # the claim follows the epoll_ctl call that shows it
        conns = _requests(cli, port, cpus)
        # The thread that answered (pinned by cpu-map), checked against SO_INCOMING_CPU.
        home = sum(_home(c, cpus[c["answer"]]) for c in conns)
        print(f"\nhaproxy {'under ringx run' if preload else 'alone'}: {home}/{len(conns)} "
              f"connections accepted by the thread on the SYN's CPU")
        if preload:
            assert home == len(conns)
        else:
            assert 0 < home < len(conns)
    finally:
        p.terminate()
        p.wait(timeout=10)
        log.close()
