"""The error log: `[runtime] error_log = FILE` at the level `log_level` names (nginx's level
names), opened before privileges are dropped, reopened on SIGUSR1 like the access log."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
import urllib.request

import pytest

from conftest import free_port


def wait_for(path, needle, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text(errors="replace"):
            return path.read_text(errors="replace")
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never appeared in {path}: "
                         f"{path.read_text(errors='replace') if path.exists() else '(none)'}")


def config(port, log, level, user=""):
    return f"""
[runtime]
zones = 1
error_log = "{log}"
log_level = "{level}"
{user}
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "= /loop"
  rewrite = ["^ /loop last"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok" }}
"""


def hit(port, path):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read()
    except urllib.error.HTTPError:
        pass


def test_lines_go_to_the_file_and_reopen_on_sigusr1(ringx, tmp_path):
    port = free_port()
    log = tmp_path / "error.log"
    r = ringx.make(config(port, log, "info"), start=False)
    r.start(wait=False)
    text = wait_for(log, "listening on")
    assert "listening on" not in r.log(), "the file, not standard error, gets the lines"
    hit(port, "/loop")
    wait_for(log, "rewrite or internal redirection cycle")
    rotated = tmp_path / "error.log.1"
    log.rename(rotated)
    r.signal(signal.SIGUSR1)
    wait_for(log, "reopened")
    hit(port, "/loop")
    wait_for(log, "rewrite or internal redirection cycle")
    old = rotated.read_text()
    assert old.count("redirection cycle") == 1, "nothing more went to the rotated file"
    assert "ERROR" in text or "INFO" in text


def test_the_level_filters(ringx, tmp_path):
    port = free_port()
    log = tmp_path / "error.log"
    r = ringx.make(config(port, log, "crit"), start=False)
    r.start(wait=False)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            hit(port, "/")
            break
        except OSError:
            time.sleep(0.05)
    hit(port, "/loop")
    text = wait_for(log, "redirection cycle")
    assert "listening on" not in text, "an info line at level crit"


def test_check_names_a_bad_level(ringx_bin, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(config(1, tmp_path / "e.log", "verbose"))
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert out.returncode != 0
    assert f"{cfg}:5:13: " in out.stderr and "notice" in out.stderr, out.stderr
    cfg.write_text(config(1, tmp_path / "missing-dir" / "e.log", "warn"))
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert out.returncode != 0 and f"{cfg}:4:13: " in out.stderr, out.stderr
    assert "directory does not exist" in out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_opened_before_privileges_are_dropped(ringx, tmp_path):
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' on this machine")
    port = free_port()
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o700)  # only root may create files here
    log = logs / "error.log"
    r = ringx.make(config(port, log, "info", 'user = "nobody"'), start=False)
    r.start(wait=False)
    wait_for(log, "listening on")
    assert log.stat().st_uid == pwd.getpwnam("nobody").pw_uid, "given to the user"
    hit(port, "/loop")
    wait_for(log, "redirection cycle")
