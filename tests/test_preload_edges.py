"""libringx_preload.so at its edges (issue #25): what happens when it cannot steer, across
`exec`, and for a CPU without a listener. Each case checks that the program still works as
without the library, and what the library said or counted.

* Without privileges (run as `nobody` with no capabilities) the library cannot create its
  reuseport program: it says why, once, on stderr, and the listeners keep the kernel's hash.
* A program started by `exec` from a shell (and one the shell forks first) is steered as one
  started directly: the settings travel in the environment, the constructor runs again.
* A listener pinned to one CPU while SYNs are processed on another: those connections fall
  back to the kernel's hash and are accepted, none is dropped.

Loopback only; root for the steered cases (eBPF), skipped with the reason elsewhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import free_port
from preload_util import preload_lib, read_stats

# Two reuseport listeners in one thread, then 20 connections from this process, each accepted
# by whichever listener the kernel (or the library's program) gave it to.
LISTENERS = r"""
import os, select, socket, sys
port, n, client_cpu = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if sys.argv[4] != "-":
    os.sched_setaffinity(0, {int(sys.argv[4])})  # the listening thread's CPU
ls = []
for _ in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port)); s.listen(64); ls.append(s)
import threading
conns = []
def client():
    if client_cpu != "-":
        os.sched_setaffinity(0, {int(client_cpu)})  # loopback: the SYN is processed here
    for _ in range(20):
        conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
t = threading.Thread(target=client); t.start()
served = 0
while served < 20:
    r, _, _ = select.select(ls, [], [], 5)
    if not r:
        break
    for s in r:
        a, _ = s.accept(); a.close(); served += 1
t.join()
print("served", served, flush=True)
"""


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)
    print(" ".join(cmd[:6]), "...\n", p.stdout, p.stderr)
    return p


def _lines(stderr: str, what: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("ringx-preload[") and what in ln]


def _need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (eBPF reuseport program, setpriv to drop to nobody)")


def test_without_privileges_it_says_why_once_and_passes_through(ringx_bin, tmp_path):
    _need_root()
    preload_lib(ringx_bin)
    # The system's Python, which `nobody` may run (the test's own may live under /root); the
    # script inline, as pytest's temporary directory is root's alone.
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is missing: the unprivileged program needs a Python nobody can run")
    port = free_port()
    p = _run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
              "--", ringx_bin, "run", "--listen", "cpu", "--",
              python, "-c", LISTENERS, str(port), "2", "-", "-"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "served 20", "the program works as without the library"
    why = _lines(p.stderr, f"listeners on 127.0.0.1:{port} keep the kernel's reuseport hash")
    assert len(why) == 1, f"said once, for two listeners: {p.stderr}"
    assert "Operation not permitted" in why[0] and "CAP_BPF" in why[0], why[0]
    assert not _lines(p.stderr, "are steered"), p.stderr


@pytest.mark.parametrize("shell", ["exec", "fork"])
def test_a_program_started_by_exec_is_steered(ringx_bin, tmp_path, shell):
    _need_root()
    preload_lib(ringx_bin)
    script = tmp_path / "listeners.py"
    script.write_text(LISTENERS)
    stats = tmp_path / "stats"
    stats.mkdir()
    port = free_port()
    inner = f"{sys.executable} {script} {port} 2 - -"
    # `exec`: the shell becomes python; `fork`: the shell forks, the child execs python and
    # the shell waits (it never listens: its own constructor ran and stayed quiet).
    line = f"exec {inner}" if shell == "exec" else f"{inner}; exit $?"
    p = _run([ringx_bin, "run", "--listen", "cpu", "--stats", str(stats), "--", "sh", "-c", line])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "served 20"
    steered = _lines(p.stderr, f"new connections to 127.0.0.1:{port} are steered")
    assert len(steered) == 1, p.stderr
    pids = {re.match(r"ringx-preload\[(\d+)\]", ln).group(1) for ln in _lines(p.stderr, "")}
    assert len(pids) == 1, f"only the program that listens speaks: {p.stderr}"
    st = read_stats(stats)
    assert st["listeners_steered"] == 2, st


def test_a_cpu_without_a_listener_falls_back_to_the_kernels_hash(ringx_bin, tmp_path):
    _need_root()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"needs two CPUs, this process may use {cpus}")
    preload_lib(ringx_bin)
    script = tmp_path / "listeners.py"
    script.write_text(LISTENERS)
    stats = tmp_path / "stats"
    stats.mkdir()
    port = free_port()
    # One listener, its thread pinned to the first CPU; the client's SYNs are processed on
    # the second, which has no listener: the program leaves them to the kernel's hash.
    p = _run([ringx_bin, "run", "--listen", "cpu", "--stats", str(stats), "--",
              sys.executable, str(script), str(port), "1", str(cpus[1]), str(cpus[0])])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "served 20", "no connection lost for want of a listener"
    assert len(_lines(p.stderr, f"new connections to 127.0.0.1:{port} are steered")) == 1, p.stderr
    st = read_stats(stats)
    assert st["listeners_steered"] == 1 and st["listener_claims"] == 1, st
