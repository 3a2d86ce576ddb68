"""io_uring with kernel submission polling (`sqpoll = true`): same answers, one shared SQ
thread for all zones."""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import free_port, runtime_section
from test_echo import frame, read_exact, start_echo, stop_echo
from test_ops import samples, scrape, total


def test_sqpoll_serves_and_shares_one_sq_thread(ringx):
    port = free_port()
    body = "x" * 64
    cfg = runtime_section("uring", zones=2, extra="sqpoll = true\n") + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{body}" }}
"""
    r = ringx.make(cfg, engine="uring")
    out = subprocess.run(["ab", "-n", "3000", "-c", "10", "-k", f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"Complete requests:\s+3000", out), out
    assert re.search(r"Failed requests:\s+0", out), out
    assert "Non-2xx" not in out, out
    # One kernel SQ thread, attached to by both zones (IORING_SETUP_ATTACH_WQ).
    names = []
    for tid in os.listdir(f"/proc/{r.pid}/task"):
        try:
            names.append(open(f"/proc/{r.pid}/task/{tid}/comm").read().strip())
        except OSError:
            pass
    sq = [n for n in names if n.startswith("iou-sqp")]
    assert len(sq) == 1, names


def _wait_syscalls(admin_port):
    """io_uring_enter calls of all zones so far, and requests served so far, from ringx's own
    accounting (/metrics)."""
    s = samples(scrape(admin_port)[2])
    return int(total(s, "ringx_zone_wait_syscalls_total")), int(total(s, "ringx_requests_total"))


def test_sqpoll_steady_state_makes_no_system_calls(ringx):
    """Issue #7: with the SQ thread on a core of its own and a zone that polls its completion
    queue, a busy zone makes no system call. Counted by ringx's own accounting of
    io_uring_enter calls (/metrics), over a window inside a constant keep-alive load."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"needs 2 CPUs (zone and SQ thread apart), this process may use {cpus}")
    if not shutil.which("wrk"):
        pytest.skip("wrk not installed (scripts/install-deps.sh installs it)")
    port, admin = free_port(), free_port()
    zone_cpu, other = cpus[0], cpus[1]
    cfg = runtime_section("uring", zones=1, extra=(
        f"cpus = [{zone_cpu}]\nsqpoll = true\nsqpoll_cpu = {other}\nsqpoll_spin = \"50ms\"\n")) + f"""
[admin]
listen = "127.0.0.1:{admin}"
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok" }}
"""
    ringx.make(cfg, engine="uring")
    load = subprocess.Popen(["taskset", "-c", str(other), "wrk", "-t1", "-c8", "-d4s",
                             f"http://127.0.0.1:{port}/"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # connections set up, SQ thread awake
        before = _wait_syscalls(admin)
        time.sleep(1.5)
        after = _wait_syscalls(admin)
    finally:
        out = load.communicate(timeout=30)[0]
    m = re.search(r"(\d+) requests in", out)
    assert m and int(m.group(1)) > 2000, out
    # The window lies inside the load: no io_uring_enter while the SQ thread runs. Each stall
    # of the host longer than the 50 ms spin (a loaded or shared machine: the SQ thread does
    # not get its CPU) puts it to sleep and costs one call to wake it; a zone without a
    # working SQ thread makes one or more per batch of completions, thousands in the window.
    # With 8 connections a zone without one makes at least one call per 8 requests; allowed
    # here: one per 40 requests served, and never more than one per 50 ms of the window (a
    # machine so loaded that the SQ thread sleeps that often serves few requests too).
    enters, served = after[0] - before[0], after[1] - before[1]
    assert served > 0, "no request served in the window"
    assert enters <= max(1, min(served // 40, 30)), (
        f"{enters} io_uring_enter calls for {served} requests in 1.5 s of steady load")


def _perf_counts_syscalls():
    """Whether `perf stat -e raw_syscalls:sys_enter` works here (root or a low
    perf_event_paranoid, and tracefs)."""
    if not shutil.which("perf"):
        return False, "perf not installed (scripts/install-deps.sh installs linux-perf)"
    r = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "--", "true"],
                       capture_output=True, text=True)
    if r.returncode != 0 or "sys_enter" not in r.stderr or "<not" in r.stderr:
        return False, f"perf cannot count raw_syscalls:sys_enter here: {r.stderr.strip()[:200]}"
    return True, ""


def _echo_wave(port, conns=300, rounds=10):
    """Opens `conns` connections, echoes `rounds` 1 KB messages on each, closes them all."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(conns)]
    try:
        msg = frame(os.urandom(1024))
        for _ in range(rounds):
            for s in socks:
                s.sendall(msg)
            for s in socks:
                assert read_exact(s, len(msg)) == msg
    finally:
        for s in socks:
            s.close()


def test_sqpoll_echo_reconnect_wave_makes_no_system_call_at_all(ringx_bin):
    """Issue #7: zero system calls in steady state with SQPOLL, counting every system call of
    the server process (perf's raw_syscalls:sys_enter), not only io_uring_enter. A wave of 300
    connections that connect, echo and close after a warm-up wave of the same: accepts, receives,
    sends and closes all go through the rings, and the allocator must not trim its heaps after
    one wave and grow them again in the next (brk/mprotect/madvise were what remained)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"needs 2 CPUs (zone and SQ thread apart), this process may use {cpus}")
    ok, why = _perf_counts_syscalls()
    if not ok:
        pytest.skip(why)
    zone_cpu, other = cpus[0], cpus[1]
    port = free_port()
    # The zone polls its completion queue and the SQ thread its ring for 3 s before sleeping,
    # longer than the gap between the waves (perf attaching): a sleep would be a system call.
    proc = start_echo(ringx_bin, port, ["--zones", "1", "--cpus", str(zone_cpu), "--engine", "uring", "--sqpoll",
                                        "--sqpoll-cpu", str(other), "--sqpoll-idle-ms", "3000",
                                        "--sqpoll-spin-us", "3000000"], cpu=zone_cpu)
    try:
        _echo_wave(port)  # warm-up: connection table, buffers and heaps reach their high-water mark
        out = os.path.join(tempfile.mkdtemp(prefix="ringx-sqpoll-perf-"), "perf.txt")
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-o", out,
                                 "-p", str(proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attach
        _echo_wave(port)
        perf.send_signal(signal.SIGINT)
        perf.wait(10)
        text = open(out).read()
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        m = re.search(r"^(\d+),[^,]*,raw_syscalls:sys_enter", text, re.M)
        assert m, f"no count in perf's output: {text}"
        n = int(m.group(1))
        # One is tolerated for a host stall longer than the 3 s polls (this runs on shared VMs).
        assert n <= 1, f"{n} system calls while 300 connections connected, echoed 10 messages and closed"
    finally:
        stop_echo(proc, "uring")
