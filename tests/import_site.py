"""What the `ringx import` tests (test_import*.py) share: a configuration from
tests/nginx_configs/ copied into a temp dir and made to run on this machine, then served by
nginx (its own file) or by ringx (the file `ringx import` makes of it), one after the other on
the same ports, document root and upstreams.

The committed files stay as they came: `Site` rewrites only what belongs to a machine (listen
ports, paths, the upstreams' addresses, CPUs, users)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import time
import warnings
from pathlib import Path

from conftest import free_port
from nginx_peer import nginx_bin

CONFIGS = Path(__file__).resolve().parent / "nginx_configs"
COUNTS = re.compile(r"^translated (\d+), approximated (\d+), refused (\d+), irrelevant (\d+)$", re.M)
# Snippets written for conf.d/ (no http block of their own) go into Debian's nginx.conf.
SNIPPETS = {"grafana/grafana.conf", "mozilla/intermediate.conf"}
# The hosts and sockets the HTTP examples proxy to, all pointed at the test's echoing origin.
HTTP_UPSTREAMS = ("unix:/tmp/gunicorn.sock", "srv1.example.com", "srv2.example.com",
                  "srv3.example.com", "localhost:3000")
# nginx's prefix-relative paths ring the same under the test's prefix: `html` is the docroot.
ROOTS = ("/var/www/html", "/path/to/app/current/public", "/usr/share/nginx/html")
STREAM_SO = Path("/usr/lib/nginx/modules/ngx_stream_module.so")
LISTEN = re.compile(r"(?m)^(\s*listen\s+)(\[::1?\]:|\*:|[\d.]+:)?(\d+)([^;]*);")


def run_import(ringx_bin, conf: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([ringx_bin, "import", *extra, str(conf)], capture_output=True,
                          text=True, timeout=60)


class Site:
    """A configuration copied into `tmp` and made to run here. `subst` maps what the
    configuration names (an upstream's host:port, a certificate's path) to this machine's."""

    def __init__(self, tmp: Path, name: str, subst: dict[str, str]):
        self.tmp = tmp
        self.www = tmp / "www"
        self.www.mkdir()
        (self.www / "index.html").write_text("<h1>index</h1>\n" * 40)
        (self.www / "style.css").write_text("body { color: red }\n" * 30)
        for d in ("dir", "search"):
            (self.www / d).mkdir()
            (self.www / d / "index.html").write_text(f"{d} index\n")
        (self.www / "500.html").write_text("an error page\n")
        (self.tmp / "html").symlink_to(self.www)
        src = CONFIGS / name
        shutil.copytree(src.parent, tmp / "conf")
        if name in SNIPPETS:
            shutil.copytree(CONFIGS / "debian", tmp / "conf", dirs_exist_ok=True)
            (tmp / "conf" / "conf.d").mkdir(exist_ok=True)
            shutil.copy(src, tmp / "conf" / "conf.d" / src.name)
            self.main = tmp / "conf" / "nginx.conf"
            # Debian's default site would claim the same port: only the snippet is served.
            (tmp / "conf" / "nginx.conf").write_text(
                (tmp / "conf" / "nginx.conf").read_text()
                .replace("include /etc/nginx/sites-enabled/*;", ""))
        else:
            self.main = tmp / "conf" / src.name
            # Other configurations that live beside it are not part of it.
            for other in (tmp / "conf").glob("*.conf"):
                if other != self.main:
                    other.unlink()
        if name.startswith("debian/"):
            (tmp / "conf" / "sites-enabled").mkdir()
            shutil.copy(tmp / "conf" / "sites-available" / "default",
                        tmp / "conf" / "sites-enabled" / "default")
        self.ports: dict[str, int] = {}
        self.udp: set[int] = set()
        for f in (tmp / "conf").rglob("*"):
            if f.is_file() and f.suffix != ".types":
                f.write_text(self.localise(f.read_text(), subst))
        (tmp / "logs").mkdir()

    def port(self, orig: str) -> int:
        return self.ports.setdefault(orig, free_port())

    def _listen(self, m: re.Match) -> str:
        port = self.port(m.group(3))
        if re.search(r"\budp\b", m.group(4)):
            self.udp.add(port)
        return f"{m.group(1)}{m.group(2) or ''}{port}{m.group(4)};"

    def localise(self, text: str, subst: dict[str, str]) -> str:
        t = self.tmp
        text = re.sub(r"(?m)^\s*user\s+[^;]*;", "", text)
        if re.search(r"(?m)^\s*(http|stream)\s*\{", text) and "events" not in text:
            # The documentation's examples leave out the events block nginx requires.
            text = "events {}\n" + text
        if re.search(r"(?m)^\s*http\s*\{", text) and not LISTEN.search(text):
            # A server without `listen` is on *:80 (as root): the example's port, made free.
            text = re.sub(r"(?m)^(\s*server\s*\{)", r"\1\n        listen 80;", text)
        text = LISTEN.sub(self._listen, text)
        text = text.replace("/etc/nginx/", f"{t}/conf/")
        text = re.sub(r"/var/log/nginx/", f"{t}/logs/", text)
        text = re.sub(r"pid\s+\S+;", f"pid {t}/nginx.pid;", text)
        for root in ROOTS:
            text = text.replace(root, str(self.www))
        for what, here in subst.items():
            text = text.replace(what, here)
        # One worker on CPU 0: nginx runs without its master here, and a second reuseport
        # socket would be served by no process; this machine may not have the CPUs named.
        text = re.sub(r"worker_processes\s+\w+;", "worker_processes 1;", text)
        text = re.sub(r"worker_cpu_affinity[^;]*;", "worker_cpu_affinity 01;", text)
        return text

    def nginx(self) -> subprocess.Popen:
        log = open(self.tmp / "nginx.stderr", "ab")
        g = "daemon off; master_process off;"
        if re.search(r"(?m)^\s*stream\s*\{", self.main.read_text()) and STREAM_SO.exists():
            # Debian builds the stream module as a module its own nginx.conf loads.
            g += f" load_module {STREAM_SO};"
        p = subprocess.Popen([nginx_bin(), "-p", str(self.tmp), "-c", str(self.main), "-g", g],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.wait_ports(p, "nginx")
        return p

    def ringx(self, ringx_bin) -> subprocess.Popen:
        out = self.tmp / "ringx.toml"
        p = run_import(ringx_bin, self.main, "--prefix", str(self.tmp), "-o", str(out))
        assert p.returncode == 0, p.stderr + out.read_text()
        assert "passes `ringx check`" in p.stderr
        self.report = p.stderr
        chk = subprocess.run([ringx_bin, "check", "-c", str(out)], capture_output=True, text=True)
        assert chk.returncode == 0, chk.stderr
        log = open(self.tmp / "ringx.stderr", "ab")
        proc = subprocess.Popen([ringx_bin, "serve", "-c", str(out)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log)
        self.wait_ports(proc, "ringx")
        return proc

    def serve(self, who: str, ringx_bin) -> subprocess.Popen:
        return self.nginx() if who == "nginx" else self.ringx(ringx_bin)

    def wait_ports(self, proc, who):
        """Until every TCP port answers (a UDP port has nothing to connect to: the
        datagram tests retry their first exchange instead)."""
        deadline = time.monotonic() + 15
        for port in set(self.ports.values()) - self.udp:
            while True:
                if proc.poll() is not None:
                    raise AssertionError(f"{who} exited: "
                                         + read_or_empty(self.tmp / f"{who}.stderr")
                                         + read_or_empty(self.tmp / "logs" / "error.log"))
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"{who} does not listen on {port}"
                    time.sleep(0.05)


def tcp_counters() -> dict[str, int]:
    """The kernel's TCP counters: /proc/net/snmp's `Tcp` and /proc/net/netstat's `TcpExt`
    lines (what `nstat` reads), by name."""
    out: dict[str, int] = {}
    for f in ("/proc/net/snmp", "/proc/net/netstat"):
        lines = read_or_empty(Path(f)).splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            kind, *keys = names.split()
            if kind in ("Tcp:", "TcpExt:"):
                out.update({kind[:-1] + k: int(v) for k, v in zip(keys, values.split()[1:])})
    return out


def counters_moved(before: dict[str, int], after: dict[str, int]) -> str:
    """The counters that changed between two `tcp_counters()` readings, with the change: what
    the kernel did with a connection the test cannot see (a reset, a listen overflow). They
    count the whole network namespace: whatever else runs meanwhile counts too. The gauge
    among them (`CurrEstab`) is left out."""
    moved = [f"{k} {after[k] - before.get(k, 0):+d}" for k in sorted(after)
             if after[k] != before.get(k, 0) and k != "TcpCurrEstab"]
    return ", ".join(moved) or "none"


class ResetTrace:
    """The kernel's account of the TCP resets and state changes around `port`, while the
    `with` block runs: which path sent each reset (`tcp_send_reset`'s reason, the task it ran
    in and its kernel stack: a close with unread data, a listener that found no connection),
    each reset received, each state change. A reset received with none sent was not made by
    TCP (a netfilter rule). Read off a tracefs instance of its own, removed on exit; where
    tracefs cannot be written (not root, not mounted) `lines` stays empty.

        with ResetTrace(origin.port) as t:
            ...
        t.lines"""

    EVENTS = ("sock/inet_sock_set_state", "tcp/tcp_receive_reset", "tcp/tcp_send_reset")
    # A reset sent by a close(2) with unread data: this process's own closes in the
    # milliseconds before it, which name the descriptor and thread (an in-process origin's
    # socket closed by a stale descriptor number shows there).
    CLOSES_BEFORE_S = 0.002

    def __init__(self, port: int):
        self.port, self.lines = port, []
        base = Path("/sys/kernel/tracing/instances") / f"ringx-test-{os.getpid()}-{port}"
        self.inst: Path | None = base
        self.closes: Path | None = base.with_name(base.name + "-close")

    def _write(self, rel: str, text: str, inst: Path | None = None) -> None:
        ((inst or self.inst) / rel).write_text(text)

    def _trace_closes(self) -> None:
        """This process's close(2) calls, its threads' and those they start, in an instance
        of their own (`set_event_pid` would filter the TCP events, which run in other
        tasks' contexts)."""
        try:
            self.closes.mkdir()
            self._write("set_event_pid", " ".join(os.listdir("/proc/self/task")), self.closes)
            self._write("options/event-fork", "1", self.closes)
            self._write("events/syscalls/sys_enter_close/enable", "1", self.closes)
        except OSError:
            self._remove_closes()

    def _remove_closes(self) -> None:
        if self.closes is None:
            return
        try:
            self._write("events/syscalls/sys_enter_close/enable", "0", self.closes)
        except OSError:
            pass
        try:
            self.closes.rmdir()
        except OSError:
            pass
        self.closes = None

    def __enter__(self) -> "ResetTrace":
        try:
            self.inst.mkdir()
        except OSError:
            self.inst = None
            self.closes = None
            return self
        self._trace_closes()
        p = self.port
        try:
            self._write("events/sock/inet_sock_set_state/filter",
                        f"protocol == 6 && (sport == {p} || dport == {p})")
            self._write("events/tcp/tcp_receive_reset/filter", f"sport == {p} || dport == {p}")
            for ev in self.EVENTS:
                self._write(f"events/{ev}/enable", "1")
            self._write("events/tcp/tcp_send_reset/trigger", "stacktrace")
        except OSError:
            self._remove()
        return self

    def _remove(self) -> None:
        for rel, text in [("events/tcp/tcp_send_reset/trigger", "!stacktrace"),
                          *((f"events/{ev}/enable", "0") for ev in self.EVENTS)]:
            try:
                self._write(rel, text)
            except OSError:
                pass
        try:
            self.inst.rmdir()
        except OSError:
            pass
        self.inst = None
        self._remove_closes()

    def __exit__(self, *exc) -> bool:
        if self.inst is None:
            return False
        text = read_or_empty(self.inst / "trace")
        closes = read_or_empty(self.closes / "trace") if self.closes else ""
        self._remove()
        # tcp_send_reset cannot be filtered by port: its lines (and the stack after each)
        # are kept where they name the port.
        keep, stack = [], False
        for line in text.splitlines():
            if line.startswith("#") or "<stack trace>" in line:
                continue
            if line.lstrip().startswith("=> "):
                if stack:
                    keep.append(line)
                continue
            stack = "tcp_send_reset" in line and f":{self.port} " in line
            if stack or "tcp_send_reset" not in line:
                keep.append(line)
        self.lines = keep + self._closes_before_resets(keep, closes)
        return False

    def _closes_before_resets(self, kept: list[str], closes: str) -> list[str]:
        """The close(2) calls of this process in the CLOSES_BEFORE_S before each reset that a
        close with unread data sent on the port."""
        stamp = re.compile(r"\s(\d+\.\d+):\s")
        ends = [float(m.group(1)) for line in kept
                if "TCP_ABORT_ON_CLOSE" in line and (m := stamp.search(line))]
        out = []
        for t in ends:
            out.append(f"this process's closes in the {self.CLOSES_BEFORE_S * 1000:.0f} ms "
                       f"before the reset at {t:.6f} (fd in hex):")
            for line in closes.splitlines():
                m = stamp.search(line)
                if m and t - self.CLOSES_BEFORE_S <= float(m.group(1)) <= t:
                    out.append(line)
        return out


def read_or_empty(p: Path) -> str:
    """The text of `p`; nothing where it cannot be read (a log not written yet)."""
    try:
        return p.read_text()
    except OSError:
        return ""


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
        p.wait(timeout=10)


def tls_client(ca: Path | None, version: ssl.TLSVersion | None = None,
               ciphers: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if ca:
        ctx.load_verify_locations(ca)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if version:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ctx.maximum_version = version
        # OpenSSL 3 offers nothing below TLS 1.2 at its default level: ask at level 0, so a
        # refusal is the server's.
        ctx.set_ciphers((ciphers or "DEFAULT") + ":@SECLEVEL=0")
    elif ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


def handshake(port: int, ctx: ssl.SSLContext, sni: str | None, payload: bytes = b"ping"):
    """(protocol, cipher's name, the served certificate's names, what came back) of a TLS
    connection, or "refused" where the server refused the handshake (with an alert of its
    choice: nginx's OpenSSL and ringx's rustls name different ones)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=sni) as s:
                cert = s.getpeercert()
                names = sorted(v for k, v in cert.get("subjectAltName", ())) if cert else None
                got = None
                if payload:
                    s.sendall(payload)
                    got = s.recv(65536)
                return s.version(), s.cipher()[0], names, got
    except ssl.SSLError as e:
        # A client that offered nothing would not test the server: that is an error here.
        assert e.reason not in ("NO_PROTOCOLS_AVAILABLE", "NO_CIPHERS_AVAILABLE"), e
        return "refused"
    except ConnectionResetError:
        return "refused"
