#!/usr/bin/env python3
"""What HTTP/2 clients that never open their windows make a proxy hold (issue 36, point 2),
ringx against nginx on the same configuration, and whether a normal client notices.

Both proxies listen h2c (prior knowledge) on CPU 0 and proxy `/` to one nginx upstream (CPU 1)
serving a 256 KiB object and a small one. Per peer and round: a normal client (HTTP/1.1
keep-alive, `GET /small` every 20 ms, its latency from send to response; for nginx on a
second, HTTP/1.1 listener of the same server block, since its h2c port speaks HTTP/2 only) runs quiet for 3 s;
then `--conns` h2c connections (default 40) announce SETTINGS_INITIAL_WINDOW_SIZE = 0 and open
128 GETs of the object each, never opening a window; once every response head is in, the
proxy's RSS is sampled for 3 s (its peak is the growth over the quiet RSS); then the attackers
close, and the time until the proxy's RSS is back within 10 % of the growth (or 5 MB) of
where it was is measured (at most 30 s), with the share of the growth returned 5 s after the
close and the number of upstream connections left. The
normal client's latencies during the attack are also given apart: while the attackers open
their streams (every response head in), and while they hold them (the 3 s of sampling).

ringx: one zone (`zones = 1`). nginx: one worker (`master_process off`), `proxy_http_version
1.1`, default proxy buffering (it reads the upstream's response into its buffers and a temp
file, and lets the upstream connection go).

Usage: bench/h2_held.py [--conns N] [--rounds N] [--base BIN]
Writes bench/results/h2-held-<date>.json and prints a table.
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

# bench/h2.py would shadow the `h2` package the clients use: out of the path once lib is in.
sys.path = [d for d in sys.path if os.path.abspath(d or ".") != lib.BENCH]
sys.path.insert(0, os.path.join(lib.ROOT, "tests"))
from test_h2_held import Stingy, connections_to, rss_kib  # noqa: E402

OBJECT = 256 * 1024


def start_nginx(work, name, server, cpu):
    d = os.path.join(work, name)
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""{"user root;" if os.geteuid() == 0 else ""}
daemon off; master_process off; worker_processes 1; worker_rlimit_nofile 65536;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 32768; }}
http {{ access_log off; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp;
  fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  {server} }}
""")
    p = subprocess.Popen(["taskset", "-c", cpu, lib.nginx_bin(), "-p", d, "-c", conf],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=lib.raise_nofile)
    return p


def start_peer(peer, binary, work, port, up):
    if peer == "nginx":
        p = start_nginx(work, f"front-{port}", f"""
  upstream up {{ server 127.0.0.1:{up}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port} http2; listen 127.0.0.1:{port + 1};
    location / {{ proxy_pass http://up; proxy_http_version 1.1;
      proxy_set_header Connection ""; }} }}""", lib.SERVER_CPU)
        lib.wait_port(port, p)
        return p
    return lib.start_ringx_zone(binary, work, port, f'proxy_pass = "http://127.0.0.1:{up}"',
                                f"ringx-{port}.log")


# The normal client runs in a process of its own: in this one, the attackers' threads would hold
# the interpreter's lock while it waits, and their work would count as the proxy's latency.
NORMAL = r"""
import http.client, sys, time
port, out = int(sys.argv[1]), open(sys.argv[2], "w", buffering=1)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
nxt = time.monotonic()
while True:
    t = time.monotonic()
    try:
        c.request("GET", "/small")
        c.getresponse().read()
        out.write(f"{t} {time.monotonic() - t}\n")
    except (OSError, http.client.HTTPException):
        out.write(f"{t} error\n")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    nxt += 0.02
    time.sleep(max(0.0, nxt - time.monotonic()))
"""


class Normal:
    """GET /small every 20 ms on one keep-alive HTTP/1.1 connection, from another process;
    each request's start and latency kept (CLOCK_MONOTONIC, the same in both processes)."""

    def __init__(self, port, work):
        self.path = os.path.join(work, f"normal-{port}.txt")
        self.p = subprocess.Popen([sys.executable, "-c", NORMAL, str(port), self.path])
        self.marks = [time.monotonic()]

    def mark(self):
        """Ends a window of samples here."""
        self.marks.append(time.monotonic())

    def windows(self):
        """Stops the client; the latencies of each window between marks, and the errors."""
        self.p.kill()
        self.p.wait()
        wins = [[] for _ in self.marks[1:]]
        errors = 0
        with open(self.path) as f:
            for line in f:
                t, lat = line.split()
                if lat == "error":
                    errors += 1
                    continue
                for i, (a, b) in enumerate(zip(self.marks, self.marks[1:])):
                    if a <= float(t) < b:
                        wins[i].append(float(lat))
        return wins, errors


def port_free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def measure(peer, binary, work, up, conns):
    port = lib.free_port()
    while not port_free(port + 1):
        port = lib.free_port()
    p = start_peer(peer, binary, work, port, up)
    # nginx's h2c port speaks HTTP/2 only: its HTTP/1.1 clients use the next port.
    plain = port + 1 if peer == "nginx" else port
    try:
        subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null",
                        f"http://127.0.0.1:{port}/obj"], check=True, timeout=30)
        n = Normal(plain, work)
        time.sleep(3)
        n.mark()
        base = rss_kib(p.pid)
        stingy = [Stingy(port, "/obj", 128) for _ in range(conns)]
        deadline = time.monotonic() + 120
        for s in stingy:
            s.wait_heads(deadline)
        n.mark()
        peak, end = 0, time.monotonic() + 3
        while time.monotonic() < end:
            peak = max(peak, rss_kib(p.pid))
            time.sleep(0.05)
        ups_held = connections_to(up)
        n.mark()
        t0 = time.monotonic()
        for s in stingy:
            s.close()
        grown = peak - base
        target = base + max(grown * 0.1, 5 * 1024)
        back, at5 = None, None
        while time.monotonic() < t0 + 30:
            now = time.monotonic()
            if at5 is None and now >= t0 + 5:
                at5 = rss_kib(p.pid)
            if rss_kib(p.pid) <= target:
                back = now - t0
                break
            time.sleep(0.05)
        if at5 is None:
            at5 = rss_kib(p.pid)
        after_rss = rss_kib(p.pid)
        (quiet, opening, held), errors = n.windows()
        during = opening + held
        return {"peer": peer, "streams": conns * 128, "rss_quiet_kib": base,
                "rss_peak_kib": peak, "grown_kib": grown,
                "grown_per_stream_kib": grown / (conns * 128),
                "upstream_conns_during": ups_held, "back_within_s": back,
                "rss_after_kib": after_rss, "rss_5s_after_close_kib": at5,
                "returned_in_5s_pct": 100 * (peak - at5) / grown if grown > 0 else None, "upstream_conns_after": connections_to(up),
                "normal_quiet_p50_ms": lib.pct_ms(quiet, 0.5),
                "normal_quiet_p99_ms": lib.pct_ms(quiet, 0.99),
                "normal_during_p50_ms": lib.pct_ms(during, 0.5),
                "normal_during_p99_ms": lib.pct_ms(during, 0.99),
                "normal_requests_during": len(during), "normal_errors": errors,
                "normal_opening_p99_ms": lib.pct_ms(opening, 0.99), "normal_opening_max_ms":
                lib.pct_ms(opening, 1.0), "normal_requests_opening": len(opening),
                "normal_held_p99_ms": lib.pct_ms(held, 0.99), "normal_requests_held": len(held)}
    finally:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--base", help="another ringx binary, measured beside this build")
    a = ap.parse_args()
    lib.raise_nofile()
    work = tempfile.mkdtemp(prefix="ringx-h2held-")
    www = os.path.join(work, "www")
    os.makedirs(www)
    with open(os.path.join(www, "obj"), "wb") as f:
        f.write(os.urandom(OBJECT))
    with open(os.path.join(www, "small"), "wb") as f:
        f.write(b"small\n")
    up = lib.free_port()
    upstream = start_nginx(work, "upstream", f"""
  server {{ listen 127.0.0.1:{up} backlog=65535; keepalive_requests 1000000;
    location / {{ root {www}; }} }}""", lib.CLIENT_CPU)
    lib.wait_port(up, upstream)
    peers = [("nginx", None), ("ringx", lib.RINGX)] + ([("ringx-base", a.base)] if a.base else [])
    rows = []
    try:
        for r in range(a.rounds):
            for name, binary in peers:
                m = measure("nginx" if name == "nginx" else "ringx", binary, work, up, a.conns)
                m.update(peer=name, round=r)
                rows.append(m)
                print(f"{name} round {r}: {m['streams']} streams, RSS +{m['grown_kib'] / 1024:.1f} MB "
                      f"({m['grown_per_stream_kib']:.1f} KiB a stream), upstream conns "
                      f"{m['upstream_conns_during']}; after close: back in {m['back_within_s']} s, "
                      f"{m['upstream_conns_after']} upstream conns, {m['returned_in_5s_pct']:.0f} % of the growth "
                      f"returned within 5 s; normal p99 quiet "
                      f"{m['normal_quiet_p99_ms']:.1f} ms, during {m['normal_during_p99_ms']:.1f} ms "
                      f"({m['normal_requests_during']} requests, {m['normal_errors']} errors): "
                      f"while streams open {m['normal_opening_p99_ms']:.1f} ms "
                      f"({m['normal_requests_opening']} requests), held "
                      f"{m['normal_held_p99_ms']:.1f} ms", flush=True)
    finally:
        upstream.kill()
        upstream.wait()
    lib.write_results("h2-held", rows)
    if rows:
        for name, _ in peers:
            g = [x["grown_kib"] for x in rows if x["peer"] == name]
            print(f"{name}: median growth {statistics.median(g) / 1024:.1f} MB")


if __name__ == "__main__":
    main()
