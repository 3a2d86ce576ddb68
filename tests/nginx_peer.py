"""nginx beside ringx, for tests whose answers must match nginx's: one process (no master),
its own prefix directory, a `server { ... }` block given by the test."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest


def nginx_bin() -> str:
    for p in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip("nginx is not installed (scripts/install-deps.sh installs nginx-light)")


class NginxPeer:
    def __init__(self, tmp: Path, server_block: str, port: int, http_extra: str = "",
                 worker_connections: int = 256):
        self.tmp = Path(tmp)
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi", "logs"):
            (self.tmp / d).mkdir(parents=True, exist_ok=True)
        user = "user root;" if os.geteuid() == 0 else ""
        conf = self.tmp / "nginx.conf"
        conf.write_text(f"""
{user}
daemon off;
master_process off;
worker_processes 1;
pid {self.tmp}/nginx.pid;
error_log {self.tmp}/logs/error.log info;
events {{ worker_connections {worker_connections}; }}
http {{
    access_log off;
    default_type text/plain;
    client_body_temp_path {self.tmp}/body;
    proxy_temp_path {self.tmp}/proxy;
    fastcgi_temp_path {self.tmp}/fastcgi;
    uwsgi_temp_path {self.tmp}/uwsgi;
    scgi_temp_path {self.tmp}/scgi;
    {http_extra}
    {server_block}
}}
""")
        self.log = open(self.tmp / "nginx.stderr", "wb")
        self.proc = subprocess.Popen([nginx_bin(), "-p", str(self.tmp), "-c", str(conf)],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("nginx exited: " + (self.tmp / "nginx.stderr").read_text()
                                     + (self.tmp / "logs/error.log").read_text())
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("nginx did not start listening")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.log.close()
