"""Fixtures for the ringx integration tests.

Run:  python3 -m pytest -q -rs tests/
The binary is this repository's target/release/ringx (`cargo build --release -p ringx`);
RINGX_BIN=/path/to/ringx tests another one.
"""

from __future__ import annotations

import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The repository's own release binary, found from this file (tests/ is at the root).
REPO = Path(__file__).resolve().parent.parent
DEFAULT_BIN = str(REPO / "target" / "release" / "ringx")
FALLBACK_LINE = "using the epoll driver"
ENGINES = ["uring", "epoll"]


def ringx_path() -> str:
    """The binary under test: $RINGX_BIN, else the repository's release build."""
    return os.environ.get("RINGX_BIN", DEFAULT_BIN)


@pytest.fixture(scope="session")
def ringx_bin() -> str:
    path = ringx_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"ringx binary not found at {path} (set RINGX_BIN or run "
                    f"`cargo build --release -p ringx`)")
    return path


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out in this run: never twice, so two servers of one test cannot meet.
_HANDED_OUT: set[int] = set()


def _bindable(p: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def close_listener(sock: socket.socket) -> None:
    """Closes a listening socket that a thread may be blocked on in accept(), or a datagram
    socket one may be blocked on in recvfrom() (woken, it gets b"" from no address).

    close() alone leaves the socket listening until that accept() returns (the kernel holds
    the file): a later connection to the port reaches a server of an earlier test. And an
    accept() the kernel restarts (after the process is stopped and continued, say) is issued
    again with the same descriptor number: if a new socket has that number by then, the old
    thread takes its connections (what a flaky import test's origin showed: a connection it
    never saw, reset by a thread it did not start); a restarted receive takes its datagrams
    so. shutdown() wakes the thread first.
    `no_thread_left_in_accept` checks every module for such a thread."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def threads_in_accept() -> list[str]:
    """The threads of this process waiting in socket.accept(): name and what they run."""
    frames = sys._current_frames()
    out = []
    for t in threading.enumerate():
        f = frames.get(t.ident)
        if f is not None and f.f_code.co_name == "accept" and \
                f.f_code.co_filename.endswith(os.sep + "socket.py"):
            target = getattr(t, "_target", None)
            out.append(f"{t.name} ({getattr(target, '__qualname__', target)})")
    return out


@pytest.fixture(scope="module", autouse=True)
def no_thread_left_in_accept():
    """After each module, once its servers are down: no thread still waits in accept()
    (close_listener says why one must not)."""
    yield
    deadline = time.monotonic() + 5
    while (left := threads_in_accept()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, (f"threads still waiting in accept() after this module: {left}; close "
                      "their listeners with conftest.close_listener")


def metric_samples(admin: int, *prefixes: str) -> dict:
    """{(name, frozenset(labels)): value} of the /metrics samples on admin port `admin` whose
    names start with one of `prefixes`."""
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name.startswith(prefixes):
                out[(smp.name, frozenset(smp.labels.items()))] = smp.value
    return out


def metric_total(samples: dict, name: str, **labels) -> float:
    """The sum of `name`'s samples (as `metric_samples` keys them) that carry `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def free_port() -> int:
    """A port (TCP and UDP) that was free a moment ago, below the kernel's ephemeral range.

    A port read back from bind(0) lies in that range, where any client socket (the test's, or
    a connection a server of an earlier test still makes) may take it as its source port
    before the server under test binds it: "already in use", once in a few hundred runs of
    the suite. Random, so that two runs on one machine rarely pick the same port."""
    low = _ephemeral_low()
    if low > 20000:
        rng = random.Random()
        for _ in range(2000):
            p = rng.randrange(20000, low)
            if p not in _HANDED_OUT and _bindable(p):
                _HANDED_OUT.add(p)
                return p
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def port() -> int:
    return free_port()


# Every ringx process a test module or test has started and not stopped yet: a failed test's
# report carries the end of each one's log, so that a failure seen once in CI says what ringx
# did at the time.
_LIVE: list["Ringx"] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and call.when == "call":
        for r in _LIVE:
            tail = r.log()[-6000:]
            if tail:
                rep.sections.append((f"ringx log {r.log_path}", tail))


class Ringx:
    """One ringx process: writes the config, starts `ringx serve`, waits for
    the "listening on" line, captures stderr into a file, and stops it."""

    def __init__(self, binary: str, workdir: Path, config: str, engine: str | None = None,
                 name: str = "ringx", preexec_fn=None):
        self.binary = binary
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.engine = engine
        self.config_text = config
        self.config_path = self.workdir / f"{name}.toml"
        self.config_path.write_text(config)
        self.log_path = self.workdir / f"{name}.stderr.log"
        self.preexec_fn = preexec_fn
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        _LIVE.append(self)

    # -- process control ------------------------------------------------------
    def start(self, timeout: float = 10.0, wait: bool = True) -> "Ringx":
        self._log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "-c", str(self.config_path)],
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=self._log_file,
            preexec_fn=self.preexec_fn,
        )
        if wait:
            self.wait_log("listening on", timeout)
            log = self.log()
            if self.engine == "uring" and FALLBACK_LINE in log:
                pytest.fail("engine = \"uring\" requested but ringx fell back to epoll:\n" + log)
            if self.engine is not None:
                listening = [ln for ln in log.splitlines() if "listening on" in ln][0]
                if f"engine {self.engine}" not in listening:
                    pytest.fail(f"requested engine {self.engine!r} but ringx runs: {listening}")
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_log(self, needle: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log()
            if needle in text:
                return text
            if self.proc.poll() is not None:
                raise AssertionError(f"ringx exited with {self.proc.returncode} before logging "
                                     f"{needle!r}; stderr:\n{self.log()}")
            time.sleep(0.02)
        raise AssertionError(f"timed out after {timeout}s waiting for {needle!r}; stderr:\n{self.log()}")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Always-safe teardown: SIGKILL if still running, reap, close the log."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self in _LIVE:
            _LIVE.remove(self)


def runtime_section(engine: str | None, zones: int = 1, extra: str = "") -> str:
    out = f"[runtime]\nzones = {zones}\n"
    if engine:
        out += f'engine = "{engine}"\n'
    return out + extra


class RingxFactory:
    def __init__(self, binary: str, workdir: Path):
        self.binary = binary
        self.workdir = Path(workdir)
        self.instances: list[Ringx] = []

    def make(self, config: str, engine: str | None = None, start: bool = True, **kw) -> Ringx:
        name = kw.pop("name", f"ringx{len(self.instances)}")
        r = Ringx(self.binary, self.workdir, config, engine=engine, name=name, **kw)
        self.instances.append(r)
        if start:
            r.start()
        return r

    def stop_all(self) -> None:
        for r in self.instances:
            r.stop()


@pytest.fixture
def ringx(ringx_bin, tmp_path):
    """Function-scoped factory: ringx.make(config_text, engine=...) -> started Ringx."""
    f = RingxFactory(ringx_bin, tmp_path / "ringx")
    yield f
    f.stop_all()


@pytest.fixture(scope="module")
def ringx_module(ringx_bin, tmp_path_factory):
    """Module-scoped factory for servers shared by a whole test module."""
    f = RingxFactory(ringx_bin, tmp_path_factory.mktemp("ringx"))
    yield f
    f.stop_all()


@pytest.fixture(scope="module", params=ENGINES)
def engine(request) -> str:
    """Every test that uses this runs once per engine (module-scoped so that
    module-scoped servers are started once per engine)."""
    return request.param


@pytest.fixture(scope="session")
def quic_go(tmp_path_factory):
    """bench/h3load (a quic-go client) built with the Go install-deps provides, once for
    the HTTP/3 tests (test_h3.py, test_h3_locations.py)."""
    found = [shutil.which("go"), "/usr/local/go/bin/go", *sorted(glob.glob("/usr/lib/go-1.*/bin/go"))]
    go = next((g for g in found if g and os.access(g, os.X_OK)), None)
    if go is None:
        if os.environ.get("CI"):
            pytest.fail("Go is missing: scripts/install-deps.sh installs it")
        pytest.skip("the quic-go client needs Go (scripts/install-deps.sh installs it)")
    out = tmp_path_factory.mktemp("quic-go") / "h3load"
    p = subprocess.run([go, "build", "-o", str(out), "."], cwd=str(REPO / "bench" / "h3load"),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return out
