"""Redis for the [cluster] tests: a real redis-server (and redis-sentinel) on a free port, in
its own temporary directory, persisting nothing; stopped and started again on the same port.
Tests that need one skip, saying why, only where redis-server is not installed
(scripts/install-deps.sh installs it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import free_port


def require_redis() -> None:
    for b in ("redis-server", "redis-sentinel"):
        if shutil.which(b) is None:
            pytest.skip(f"{b} is not installed (scripts/install-deps.sh installs it)")


def command(port: int, *args: str | bytes, timeout: float = 5.0):
    """One command to 127.0.0.1:port; the reply decoded (bytes, int, str, list, None), an
    error reply raised as RuntimeError."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
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


class Redis:
    """redis-server (or, with `sentinel_of`, redis-sentinel watching that master)."""

    def __init__(self, workdir: Path, replica_of: int | None = None):
        self.port = free_port()
        self.dir = Path(workdir) / f"redis-{self.port}"
        self.dir.mkdir(parents=True)
        self.replica_of = replica_of
        self.proc: subprocess.Popen | None = None
        self.log_path = self.dir / "redis.log"

    def argv(self) -> list[str]:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                "--logfile", str(self.log_path)]
        if self.replica_of:
            argv += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        return argv

    def start(self) -> "Redis":
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(f"redis on {self.port} answers", self.answers)
        return self

    def answers(self) -> bool:
        try:
            return command(self.port, "PING", timeout=1) == "PONG"
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
        return f"127.0.0.1:{self.port}"


class Sentinel(Redis):
    """redis-sentinel monitoring the master at `master_port` as `name`."""

    def __init__(self, workdir: Path, master_port: int, name: str):
        super().__init__(workdir)
        self.conf = self.dir / "sentinel.conf"
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\nlogfile {self.log_path}\n"
            f"sentinel monitor {name} 127.0.0.1 {master_port} 1\n"
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
