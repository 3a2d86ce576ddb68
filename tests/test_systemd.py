"""systemd integration: the notification protocol (READY, RELOADING/MONOTONIC_USEC, STOPPING,
MAINPID, STATUS, WATCHDOG) seen on a fake NOTIFY_SOCKET, socket activation through
LISTEN_FDS, and the packaged unit under systemd-run where systemd is the init."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import free_port


def cfg(port: int, body: str, zones: int = 2) -> str:
    return (f"[runtime]\nzones = {zones}\ndrain_timeout = \"5s\"\n"
            f"[[server]]\nlisten = [\"127.0.0.1:{port}\"]\n"
            f"  [[server.location]]\n  path = \"/\"\n"
            f"  return = {{ status = 200, body = \"{body}\" }}\n")


def get(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := c.recv(65536):
            data += chunk
    return data.split(b"\r\n\r\n", 1)[1].decode()


class FakeSystemd:
    """An AF_UNIX datagram socket standing in for systemd's notification socket."""

    def __init__(self, path: Path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.seen: list[dict[str, str]] = []

    def next(self, key: str, timeout: float = 15.0, value: str | None = None) -> dict[str, str]:
        """The next datagram (in order) that has `key` (equal to `value` if given)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {key}= from ringx within {timeout}s; saw {self.seen}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096).decode()
            except socket.timeout:
                continue
            msg = dict(line.split("=", 1) for line in data.split("\n") if "=" in line)
            self.seen.append(msg)
            if key in msg and (value is None or msg[key] == value):
                return msg

    def close(self):
        self.sock.close()


@pytest.fixture
def notify(tmp_path):
    s = FakeSystemd(tmp_path / "notify.sock")
    yield s
    s.close()


def start(ringx_bin, tmp_path, config: str, env: dict[str, str], **kw) -> subprocess.Popen:
    conf = tmp_path / "ringx.toml"
    conf.write_text(config)
    log = open(tmp_path / "stderr.log", "wb")
    full = dict(os.environ, **env)
    return subprocess.Popen([ringx_bin, "serve", "-c", str(conf)], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log, env=full, **kw)


def stop(p: subprocess.Popen):
    if p.poll() is None:
        p.kill()
        p.wait(timeout=10)


def test_ready_reload_watchdog_stopping(ringx_bin, tmp_path, notify):
    port = free_port()
    p = start(ringx_bin, tmp_path, cfg(port, "one"),
              {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"})
    try:
        ready = notify.next("READY")
        assert ready["MAINPID"] == str(p.pid)
        assert "2 zones" in ready["STATUS"]
        # Ready means every zone listens: the first request is answered.
        assert get(port) == "one"
        # The watchdog is fed (every 200 ms), from the control thread, while zones progress.
        notify.next("WATCHDOG")
        notify.next("WATCHDOG")

        # A reload: RELOADING=1 with the monotonic clock, then READY=1 once applied.
        (tmp_path / "ringx.toml").write_text(cfg(port, "two"))
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        p.send_signal(signal.SIGHUP)
        rel = notify.next("RELOADING")
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert before <= int(rel["MONOTONIC_USEC"]) <= after
        done = notify.next("READY")
        assert "generation 2" in done["STATUS"], done
        assert get(port) == "two"

        # A failed reload: the pair still comes, the old configuration serves, and why.
        (tmp_path / "ringx.toml").write_text(cfg(port, "three") + "bogus = 1\n")
        p.send_signal(signal.SIGHUP)
        notify.next("RELOADING")
        failed = notify.next("READY")
        assert "reload failed" in failed["STATUS"] and "bogus" in failed["STATUS"], failed
        assert get(port) == "two"

        # The STATUS= line with connections and the request rate comes every 5 s.
        st = notify.next("STATUS", timeout=20)
        while "requests/s" not in st["STATUS"]:
            st = notify.next("STATUS", timeout=20)
        assert "2 zones" in st["STATUS"] and "connections" in st["STATUS"]

        p.send_signal(signal.SIGTERM)
        notify.next("STOPPING")
        assert p.wait(timeout=15) == 0
    finally:
        stop(p)


def test_watchdog_stops_when_a_zone_is_stuck(ringx_bin, tmp_path, notify):
    """WATCHDOG=1 comes only while the process runs: none while it is stopped (SIGSTOP), and
    the pings resume after SIGCONT. (A single stuck zone cannot be made from outside; the
    rule that every zone must have picked up the last ping is in sdnotify.rs.)"""
    port = free_port()
    p = start(ringx_bin, tmp_path, cfg(port, "w", zones=1),
              {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000"})
    try:
        notify.next("READY")
        notify.next("WATCHDOG")
        os.kill(p.pid, signal.SIGSTOP)
        # Drain what was sent before the stop took effect, then expect silence.
        notify.sock.settimeout(0.5)
        try:
            while True:
                notify.sock.recv(4096)
        except socket.timeout:
            pass
        notify.sock.settimeout(0.6)
        with pytest.raises(socket.timeout):
            notify.sock.recv(4096)
        os.kill(p.pid, signal.SIGCONT)
        notify.next("WATCHDOG")
    finally:
        stop(p)


def test_no_notify_socket_changes_nothing(ringx_bin, tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    conf = tmp_path / "ringx.toml"
    conf.write_text(cfg(port, "plain", zones=1))
    with open(tmp_path / "stderr.log", "wb") as log:
        p = subprocess.Popen([ringx_bin, "serve", "-c", str(conf)], stdout=log, stderr=log,
                             env=env)
    try:
        deadline = time.monotonic() + 15
        while "listening on" not in (tmp_path / "stderr.log").read_text():
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        assert get(port) == "plain"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 0
        assert "NOTIFY_SOCKET" not in (tmp_path / "stderr.log").read_text()
    finally:
        stop(p)


def test_binary_upgrade_names_the_new_main_pid(ringx_bin, tmp_path, notify):
    port = free_port()
    p = start(ringx_bin, tmp_path, cfg(port, "up", zones=1), {"NOTIFY_SOCKET": notify.path})
    new_pid = None
    try:
        notify.next("READY")
        p.send_signal(signal.SIGUSR2)
        # The new process says it is ready (NotifyAccess=all), the old one names it.
        msg = notify.next("MAINPID", value=None)
        while msg.get("MAINPID") == str(p.pid):
            msg = notify.next("MAINPID")
        new_pid = int(msg["MAINPID"])
        assert new_pid != p.pid
        assert p.wait(timeout=15) == 0
        # A lone request right after the old process is gone: its accepts must not have been
        # left on the socket (engine::Driver::quiesce).
        assert get(port) == "up"
        os.kill(new_pid, signal.SIGTERM)
        notify.next("STOPPING")
        deadline = time.monotonic() + 15
        while Path(f"/proc/{new_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop(p)
        if new_pid and Path(f"/proc/{new_pid}").exists():
            os.kill(new_pid, signal.SIGKILL)


def test_socket_activation(ringx_bin, tmp_path):
    """systemd binds the socket (ListenStream=, without ReusePort=) and passes it as
    descriptor 3: ringx serves on it, with its two zones sharing it."""
    port = free_port()
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", port))
    lsock.listen(128)
    fd = lsock.fileno()

    conf = tmp_path / "ringx.toml"
    conf.write_text(cfg(port, "activated"))
    log = tmp_path / "stderr.log"
    env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="http")
    # LISTEN_PID must name the process itself: set in the child before exec (a shell
    # `exec` keeps the pid).
    with open(log, "wb") as lf:
        p = subprocess.Popen(["/bin/sh", "-c", 'LISTEN_PID=$$ exec "$0" "$@"', ringx_bin,
                              "serve", "-c", str(conf)], stdout=lf, stderr=lf, env=env,
                             close_fds=False, preexec_fn=lambda: os.dup2(fd, 3))
    lsock.close()
    try:
        deadline = time.monotonic() + 15
        while "listening on" not in log.read_text():
            assert p.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        text = log.read_text()
        assert f"socket activation: systemd passed 127.0.0.1:{port}" in text, text
        for _ in range(20):
            assert get(port) == "activated"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 0
    finally:
        stop(p)


def test_unit_under_systemd_run(ringx_bin, tmp_path):
    """The packaged unit's Type=notify under the real systemd (only where it is PID 1)."""
    comm = Path("/proc/1/comm").read_text().strip()
    if comm != "systemd":
        pytest.skip(f"systemd is not the init here (PID 1 is {comm!r}); the notify socket "
                    "tests above show the same protocol")
    port = free_port()
    conf = tmp_path / "ringx.toml"
    conf.write_text(cfg(port, "unit", zones=1))
    unit = f"ringx-test-{os.getpid()}"
    subprocess.run(["systemd-run", "--unit", unit, "-p", "Type=notify", "-p", "NotifyAccess=all",
                    "-p", "ExecReload=/bin/kill -HUP $MAINPID", ringx_bin, "serve", "-c",
                    str(conf)], check=True, timeout=60)
    try:
        assert get(port) == "unit"
        conf.write_text(cfg(port, "unit2", zones=1))
        subprocess.run(["systemctl", "reload", unit], check=True, timeout=60)
        deadline = time.monotonic() + 15
        while get(port) != "unit2":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        subprocess.run(["systemctl", "stop", unit], timeout=60)
