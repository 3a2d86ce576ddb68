"""Helpers of tests/test_preload.py: the library beside the binary, `ringx run` command lines,
an unmodified Debian nginx in a network namespace, and the counters the library writes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_steering import _setns


def preload_lib(ringx_bin: str) -> Path:
    """libringx_preload.so beside the binary under test (cargo puts both in target/PROFILE)."""
    lib = Path(ringx_bin).parent / "libringx_preload.so"
    if not lib.is_file():
        pytest.fail(f"{lib} is missing: build it with `cargo build --release -p ringx-preload`")
    return lib


def nginx_bin() -> str:
    for p in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("nginx is not installed (scripts/install-deps.sh installs nginx-light)")


def nginx_conf(tmp: Path, listen: str, affinity: bool) -> Path:
    """2 workers, one reuseport listener each; every response body is the worker's pid."""
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    conf = tmp / "nginx.conf"
    conf.write_text(f"""
daemon off;
master_process on;
worker_processes 2;
{"worker_cpu_affinity auto;" if affinity else ""}
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen {listen} reuseport;
        location / {{ return 200 "$pid\\n"; }}
    }}
}}
""")
    return conf


class Nginx:
    """nginx (optionally under `ringx run`) in network namespace `ns`."""

    def __init__(self, tmp: Path, ns: str, conf: Path, wrapper: list[str] | None):
        self.tmp, self.ns, self.conf = tmp, ns, conf
        self.log = open(tmp / "nginx.stderr", "wb")
        cmd = [*(wrapper or []), nginx_bin(), "-p", str(tmp), "-c", str(conf)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, preexec_fn=lambda: _setns(ns))

    def stderr(self) -> str:
        return (self.tmp / "nginx.stderr").read_text(errors="replace")

    def master_pid(self) -> int:
        return int((self.tmp / "nginx.pid").read_text().strip())

    def workers(self) -> set[int]:
        out = subprocess.run(["pgrep", "-P", str(self.master_pid())], capture_output=True,
                             text=True).stdout
        return {int(p) for p in out.split()}

    def wait_ready(self, port: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"nginx exited {self.proc.returncode}: {self.stderr()}")
            try:
                if len(self.workers()) == 2:
                    out = subprocess.run(["nsenter", f"--net=/run/netns/{self.ns}", "ss", "-Htln",
                                          f"sport = :{port}"], capture_output=True, text=True)
                    if out.stdout.count("\n") >= 2:
                        return
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"nginx did not start 2 workers on :{port}: {self.stderr()}")

    def reload(self, timeout: float = 10.0) -> None:
        """`nginx -s reload`, then waits until only the new workers remain."""
        old = self.workers()
        subprocess.run([nginx_bin(), "-p", str(self.tmp), "-c", str(self.conf), "-s", "reload"],
                       check=True, capture_output=True, preexec_fn=lambda: _setns(self.ns))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = self.workers()
            if len(now) == 2 and not (now & old):
                return
            time.sleep(0.05)
        raise AssertionError(f"old workers {old} still there after reload: {self.workers()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def read_stats(d: Path) -> dict[str, int]:
    """The library's counters, summed over every process that wrote some."""
    total: dict[str, int] = {}
    for f in d.glob("ringx-preload.*"):
        for line in f.read_text().splitlines():
            k, v = line.split()
            total[k] = total.get(k, 0) + int(v)
    return total


# An HTTP/1.0 server whose body is the client's port; run pinned to one CPU, so without
# steering every reply is processed there (veth receives on the sending CPU).
PORT_ECHO_SERVER = r"""
import socket, sys, threading
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2])))
srv.listen(512)
def serve(c, peer):
    with c:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                return
            data += chunk
        body = b"%d\n" % peer[1]
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
while True:
    c, peer = srv.accept()
    threading.Thread(target=serve, args=(c, peer), daemon=True).start()
"""

# An unmodified client: a thread pinned to each CPU given makes N requests; prints one line
# per connection: client CPU, SO_INCOMING_CPU after the response, local port.
PINNED_CLIENT = r"""
import os, socket, sys, threading
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cpus = [int(c) for c in sys.argv[4].split(",")]
out, lock = [], threading.Lock()
def run(cpu):
    os.sched_setaffinity(0, {cpu})
    for _ in range(n):
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            assert data.startswith(b"HTTP/1.0 200"), data
            assert int(data.rsplit(b"\r\n\r\n", 1)[1]) == s.getsockname()[1]
            with lock:
                out.append((cpu, s.getsockopt(socket.SOL_SOCKET, 49), s.getsockname()[1]))
ts = [threading.Thread(target=run, args=(c,)) for c in cpus]
for t in ts: t.start()
for t in ts: t.join()
for cpu, incoming, lport in out:
    print(cpu, incoming, lport)
"""


def haproxy_bin() -> str:
    for p in (shutil.which("haproxy"), "/usr/sbin/haproxy"):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("haproxy is not installed (scripts/install-deps.sh installs it)")


def haproxy_conf(tmp: Path, listen: str, cpus: list[int]) -> Path:
    """2 threads pinned to `cpus`, each with its own listener on `listen` (haproxy binds with
    SO_REUSEPORT: one reuseport group served by two threads); the body is the thread's number."""
    conf = tmp / "haproxy.cfg"
    conf.write_text(f"""
global
    nbthread 2
    cpu-map auto:1/1-2 {cpus[0]}-{cpus[1]}
defaults
    mode http
    timeout client 10s
    timeout connect 10s
    timeout server 10s
frontend f
    bind {listen} thread 1
    bind {listen} thread 2
    http-request return status 200 content-type text/plain lf-string "%[thread]\\n"
""")
    return conf
