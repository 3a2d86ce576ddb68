"""Redis for the [cluster] tests: a real redis-server (and redis-sentinel) on a free port, in
its own temporary directory, persisting nothing; stopped and started again on the same port.
On 127.0.0.1, or on an address of a network namespace a test made (`host`, with `enter`, what
moves a thread into it: tests/netns_bed.py's `Bed.setns_to`). Tests that need one skip,
saying why, only where redis-server is not installed (scripts/install-deps.sh installs it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import free_port
from netns_bed import on_thread


def require_redis() -> None:
    for b in ("redis-server", "redis-sentinel"):
        if shutil.which(b) is None:
            pytest.skip(f"{b} is not installed (scripts/install-deps.sh installs it)")


def command(port: int, *args: str | bytes, timeout: float = 5.0, host: str = "127.0.0.1"):
    """One command to host:port; the reply decoded (bytes, int, str, list, None), an error
    reply raised as RuntimeError."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        out = f"*{len(args)}\r\n".encode()
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += f"${len(a)}\r\n".encode() + a + b"\r\n"
        s.sendall(out)
        f = s.makefile("rb")
        return _reply(f)


def _reply(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed mid-reply")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_reply(f) for _ in range(n)]
    raise ValueError(f"unknown reply {line!r}")


def _entered(enter, fn, *args):
    """fn(*args), on a thread that `enter` first moved into a network namespace (setns moves
    only the calling thread), or here without one."""
    if enter is None:
        return fn(*args)
    return on_thread(enter, fn, *args)


class Redis:
    """redis-server (or, with `sentinel_of`, redis-sentinel watching that master)."""

    def __init__(self, workdir: Path, replica_of: int | None = None, host: str = "127.0.0.1",
                 enter=None):
        self.port = free_port()
        self.host, self.enter = host, enter
        self.dir = Path(workdir) / f"redis-{self.port}"
        self.dir.mkdir(parents=True)
        self.replica_of = replica_of
        self.proc: subprocess.Popen | None = None
        self.log_path = self.dir / "redis.log"

    def argv(self) -> list[str]:
        argv = ["redis-server", "--port", str(self.port), "--bind", self.host,
                "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                "--logfile", str(self.log_path)]
        if self.host != "127.0.0.1":
            # On a namespace's address, reached by the bed's hosts only.
            argv += ["--protected-mode", "no"]
        if self.replica_of:
            argv += ["--replicaof", self.host, str(self.replica_of),
                     "--replica-announce-ip", self.host]
        return argv

    def start(self) -> "Redis":
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=self.enter)
        wait_until(f"redis on {self.port} answers", self.answers)
        return self

    def command(self, *args: str | bytes, timeout: float = 5.0):
        """`command` to this server, from its network namespace."""
        return _entered(self.enter,
                        lambda: command(self.port, *args, timeout=timeout, host=self.host))

    def answers(self) -> bool:
        try:
            return self.command("PING", timeout=1) == "PONG"
        except OSError:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"redis exited: {self.log()}")
            return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"


class Sentinel(Redis):
    """redis-sentinel monitoring the master at `master_port` (on the same host) as `name`."""

    def __init__(self, workdir: Path, master_port: int, name: str, host: str = "127.0.0.1",
                 enter=None):
        super().__init__(workdir, host=host, enter=enter)
        self.conf = self.dir / "sentinel.conf"
        self.conf.write_text(
            f"port {self.port}\nbind {host}\ndir {self.dir}\nlogfile {self.log_path}\n"
            f"protected-mode {'no' if host != '127.0.0.1' else 'yes'}\n"
            f"sentinel monitor {name} {host} {master_port} 1\n"
            f"sentinel down-after-milliseconds {name} 1000\n"
            f"sentinel failover-timeout {name} 10000\n")

    def argv(self) -> list[str]:
        return ["redis-sentinel", str(self.conf)]


def wait_until(what: str, cond, timeout: float = 30.0, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting until {what}")


@pytest.fixture
def redis(tmp_path):
    """A redis-server of the test's own, stopped after it (skips where there is none)."""
    require_redis()
    r = Redis(tmp_path).start()
    yield r
    r.stop()
