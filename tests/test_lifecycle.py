"""Signals, graceful drain, `check`, `--version`, privilege drop, bind errors."""

import errno
import os
import pwd
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import free_port, runtime_section
from origin_server import Origin
from util_http import Closed, Conn, request

SIMPLE = """
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok" }}
"""


def simple_cfg(engine, port, extra_runtime=""):
    return runtime_section(engine, extra=extra_runtime) + SIMPLE.format(port=port)


def _new_conn_refused_or_unserved(port) -> str:
    """After the drain started: a new connection must be refused, or at least
    not get a response. Returns a description of what happened."""
    try:
        c = Conn(port, timeout=2)
    except (ConnectionRefusedError, socket.timeout, TimeoutError, OSError) as e:
        return f"refused ({e.__class__.__name__})"
    with c:
        try:
            c.send(request("GET", "/"))
            r = c.read_response(timeout=1.5)
        except (Closed, OSError, TimeoutError):
            return "accepted at TCP level but not served"
        raise AssertionError(f"a connection opened after SIGTERM was served: {r}")


def _idle_keepalive(port) -> Conn:
    """A keep-alive connection left idle after one request. The zone closes it within
    DRAIN_IDLE_GRACE (1 s) of the drain reaching it: how a test knows that the zone, not only
    the control thread (whose "shutting down" line comes first), is draining."""
    c = Conn(port, timeout=5)
    c.send(request("GET", "/"))
    assert c.read_response(timeout=5).status == 200
    return c


def test_sigterm_drains_inflight_request(engine, ringx):
    p = free_port()
    srv = ringx.make(simple_cfg(engine, p), engine=engine)
    with Conn(p, timeout=5) as c, _idle_keepalive(p) as idle:
        c.send(request("POST", "/", headers={"Content-Length": "10"}) + b"01234")
        time.sleep(0.2)
        srv.signal(signal.SIGTERM)
        srv.wait_log("shutting down", timeout=5)
        assert idle.wait_closed(5), "an idle keep-alive connection outlived the drain's grace"
        what = _new_conn_refused_or_unserved(p)
        assert srv.proc.poll() is None, "exited before the in-flight request finished"
        c.send(b"56789")
        r = c.read_response(timeout=5)
        assert (r.status, r.body) == (200, b"ok"), r
        assert c.wait_closed(3), "connection left open after the in-flight response during drain"
    rc = srv.wait_exit(5)
    assert rc == 0, f"exit status {rc} (None = still running); new connection: {what}\n{srv.log()}"
    assert "all zones drained" in srv.log()


def test_drain_response_says_connection_close(engine, ringx):
    """A response finished during the drain is the last on its connection,
    so it should announce it (Connection: close), like a keepalive_requests cut."""
    p = free_port()
    srv = ringx.make(simple_cfg(engine, p), engine=engine)
    with Conn(p, timeout=5) as c, _idle_keepalive(p) as idle:
        c.send(request("POST", "/", headers={"Content-Length": "4"}) + b"01")
        time.sleep(0.2)
        srv.signal(signal.SIGTERM)
        srv.wait_log("shutting down", timeout=5)
        # The rest of the body once the zone drains (sent before, it may be answered first:
        # the drain reaches the zone as a message after the signal).
        assert idle.wait_closed(5), "an idle keep-alive connection outlived the drain's grace"
        c.send(b"23")
        r = c.read_response(timeout=5)
        assert r.status == 200
        assert "close" in r.connection_tokens(), f"last response during drain lacks Connection: close: {r}"


def test_sigterm_idle_keepalive_conn_closed_and_exit(engine, ringx):
    p = free_port()
    srv = ringx.make(simple_cfg(engine, p), engine=engine)
    with Conn(p, timeout=5) as c:
        c.send(request("GET", "/"))
        assert c.read_response().status == 200
        srv.signal(signal.SIGTERM)
        assert c.wait_closed(4), "idle keep-alive connection not closed on drain"
    assert srv.wait_exit(5) == 0, srv.log()


def test_sigint_graceful(engine, ringx):
    p = free_port()
    srv = ringx.make(simple_cfg(engine, p), engine=engine)
    srv.signal(signal.SIGINT)
    assert srv.wait_exit(5) == 0, srv.log()
    assert "all zones drained" in srv.log()


def test_drain_timeout_bounds_stuck_request(engine, ringx):
    p = free_port()
    srv = ringx.make(simple_cfg(engine, p, extra_runtime='drain_timeout = "1s"\n'), engine=engine)
    with Conn(p, timeout=5) as c:
        c.send(request("POST", "/", headers={"Content-Length": "10"}) + b"01")  # never finished
        time.sleep(0.2)
        srv.signal(signal.SIGTERM)
        rc = srv.wait_exit(5)
        assert rc is not None, "ringx still running 5 s after SIGTERM with drain_timeout = 1s"


def test_sigquit_exits_promptly(engine, ringx):
    p = free_port()
    srv = ringx.make(simple_cfg(engine, p), engine=engine)
    with Conn(p, timeout=5) as c:  # an in-flight request must not hold SIGQUIT up
        c.send(request("POST", "/", headers={"Content-Length": "10"}) + b"01")
        time.sleep(0.1)
        srv.signal(signal.SIGQUIT)
        assert srv.wait_exit(3) == 0, srv.log()


# --------------------------------------------------------------------------- CLI

def test_version(ringx_bin):
    cp = subprocess.run([ringx_bin, "--version"], capture_output=True, text=True, timeout=10)
    assert cp.returncode == 0
    assert re.fullmatch(r"ringx \d+\.\d+\.\d+\S*\n", cp.stdout), cp.stdout


def test_default_config_is_valid(ringx_bin, tmp_path):
    cp = subprocess.run([ringx_bin, "default-config"], capture_output=True, text=True, timeout=10)
    assert cp.returncode == 0 and "[[server]]" in cp.stdout
    f = tmp_path / "default.toml"
    f.write_text(cp.stdout)
    cp = subprocess.run([ringx_bin, "check", "-c", str(f)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr


def test_check_valid(ringx_bin, tmp_path):
    f = tmp_path / "ok.toml"
    f.write_text(simple_cfg("epoll", 8080))
    cp = subprocess.run([ringx_bin, "check", "-c", str(f)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert "is valid" in cp.stdout + cp.stderr


BROKEN = [
    # id, config text, expected line
    ("bad_engine", '[runtime]\nengine = "kqueue"\n', 2),
    ("bad_duration", '[http]\n\nkeepalive_timeout = "5 parsecs"\n', 3),
    ("bad_size", '[http]\nclient_max_body_size = "1q"\n', 2),
    ("unknown_key", '[runtime]\nzones = 1\nbogus = 3\n', 3),
    ("toml_syntax", '[runtime]\nzones = = 1\n', 2),
    ("bad_listen", '[[server]]\nlisten = ["not-an-address"]\n', 2),
    ("both_root_and_return", '[[server]]\nlisten = ["127.0.0.1:1"]\n  [[server.location]]\n  path = "/"\n'
                             '  root = "/tmp"\n  return = { status = 200 }\n', None),
]


@pytest.mark.parametrize("text,line", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_check_broken(ringx_bin, tmp_path, text, line):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    cp = subprocess.run([ringx_bin, "check", "-c", str(f)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1, (cp.returncode, cp.stdout, cp.stderr)
    m = re.search(rf"ringx: {re.escape(str(f))}:(\d+):(\d+): \S", cp.stderr)
    assert m, cp.stderr
    if line is not None:
        assert int(m.group(1)) == line, cp.stderr


def test_serve_broken_config_fails(ringx_bin, tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[runtime]\nengine = "kqueue"\n')
    cp = subprocess.run([ringx_bin, "serve", "-c", str(f)], capture_output=True, text=True, timeout=10)
    assert cp.returncode != 0
    assert f"{f}:2:" in cp.stderr


# --------------------------------------------------------------------------- privileges / binding

def test_user_nobody_drops_privileges(engine, ringx):
    if os.geteuid() != 0:
        pytest.skip("privilege drop needs root")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user on this system")
    p = free_port()
    srv = ringx.make(simple_cfg(engine, p, extra_runtime='user = "nobody"\n'), engine=engine)
    status = open(f"/proc/{srv.pid}/status").read()
    uids = re.search(r"^Uid:\s+(.*)$", status, re.M).group(1).split()
    gids = re.search(r"^Gid:\s+(.*)$", status, re.M).group(1).split()
    assert uids == [str(nobody.pw_uid)] * 4, status
    assert gids == [str(nobody.pw_gid)] * 4, status
    # every thread (zone) dropped too, not only the main thread
    for tid in os.listdir(f"/proc/{srv.pid}/task"):
        t = open(f"/proc/{srv.pid}/task/{tid}/status").read()
        assert re.search(r"^Uid:\s+(.*)$", t, re.M).group(1).split() == [str(nobody.pw_uid)] * 4, (tid, t)
    with Conn(p) as c:
        c.send(request("GET", "/"))
        assert c.read_response().status == 200


def test_listen_address_in_use_fails(engine, ringx):
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(8)
        p = blocker.getsockname()[1]
        srv = ringx.make(simple_cfg(engine, p), engine=engine, start=False)
        srv.start(wait=False)
        rc = srv.wait_exit(10)
        assert rc is not None and rc != 0, f"ringx did not fail on a busy address (rc={rc}):\n{srv.log()}"
        assert f"127.0.0.1:{p}" in srv.log(), srv.log()
        assert "listening on" not in srv.log()
    finally:
        blocker.close()


def test_a_restart_at_once_after_sigkill_gets_its_port(engine, ringx):
    """A ringx killed with SIGKILL while it holds pooled upstream connections keeps its
    sockets some milliseconds past its exit (io_uring's are closed when the kernel tears the
    ring down): one started at once on the same port, as a supervisor restarting it at once
    would, waits for them to go and serves, where it used to refuse the address (a third of
    the restarts)."""
    origin = Origin()
    origin.route("/", body=b"up")
    try:
        p = free_port()
        cfg = runtime_section(engine, zones=2) + f"""
[[upstream]]
name = "u"
servers = [{{ addr = "{origin.addr}" }}]
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  proxy_pass = "http://u"
"""
        for i in range(20):
            srv = ringx.make(cfg, engine=engine, name=f"restart{i}")
            for _ in range(3):
                with Conn(p) as c:
                    c.send(request("GET", "/"))
                    r = c.read_response()
                    assert (r.status, r.body) == (200, b"up"), (i, r.status, srv.log())
            srv.signal(signal.SIGKILL)
            assert srv.wait_exit(10) is not None
    finally:
        origin.close()
