#!/usr/bin/env python3
"""Side-by-side HTTP benchmark: ringx (io_uring, epoll) against nginx, on one 2-core machine.

(Not `http.py`: scripts run as `python3 bench/x.py` have bench/ first on sys.path, where a
file named http.py would shadow the standard library's `http` package for every script.)

Method (bench/README.md, after the design brief's "How performance is measured here"): every
server is pinned to CPU 0, the client (wrk or ab) to CPU 1. All peers run at once on their own
ports (an idle server costs nothing) and are measured alternately, A B C A B C ..., so drift
hits them alike. Every figure is reported as a median with min-max over the rounds and as a
ratio to nginx measured in the same run.

Figures per workload and peer:
  cpu_us_per_req  server CPU time (user+sys of every thread, from the CPU counter of a cgroup
                  the server is moved into for the run, v2 cpu.stat or v1 cpuacct.usage, so
                  threads that exit during it, such as io_uring's workers, are counted)
                  divided by the requests served, uncapped run
  rps             requests/s, uncapped
  capped_rps      requests/s with the server limited to 40% of one core (cgroup CPU quota)
  lat_avg_ms / lat_p99_ms   from wrk --latency (closed loop) or ab -c1 (one connection)

Usage: bench/http_bench.py [--quick] [--rounds N] [--duration S] [--only WORKLOAD,...]
                           [--base BIN]
Writes bench/results/<date>.json and regenerates the results part of bench/README.md and the
charts in bench/results/. With --base BIN, another ringx build runs beside this one on both
engines (peers base-uring and base-epoll), alternated with the others: an A/B of two builds
in one run, written to bench/results/<date>-ab.json without touching the README.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import (BODY1K, BODY64, CAP_PCT, CLIENT_CPU, RESULTS, RINGX, SERVER_CPU,  # noqa: E402
                 Cgroup, free_port, host_speed, machine, nginx_bin, proc_tree, run_ab, run_wrk,
                 server_cpu_ns, summarise, versions, wait_port)

# name -> (tool, path, connections, extra args, description)
WORKLOADS = {
    "ka64_c50": ("wrk", "/r64", 50, [], "64-byte body, keep-alive, 50 connections"),
    "ka64_c500": ("wrk", "/r64", 500, [], "64-byte body, keep-alive, 500 connections"),
    "ka1k_c50": ("wrk", "/r1k", 50, [], "1 KB body, keep-alive, 50 connections"),
    "close64_c50": ("wrk", "/r64", 50, ["-H", "Connection: close"], "64-byte body, a new connection per request (Connection: close), 50 concurrent"),
    "ab_c1": ("ab", "/r64", 1, [], "one connection, request after request (ab -n 20000 -c 1 -k)"),
    "file1m_c10": ("wrk", "/static/1m.bin", 10, [], "static 1 MB file, keep-alive, 10 connections"),
    "file4k_c50": ("wrk", "/static/4k.bin", 50, [], "static 4 KB file, keep-alive, 50 connections"),
}
STATIC_FILES = {"1m.bin": 1 << 20, "4k.bin": 4096}
PEERS = ["nginx", "ringx-epoll", "ringx-uring"]
# A reference, not a competitor: bench/yardstick/http_uring.c, a minimal io_uring responder
# (no parsing, a canned 64-byte reply, no Date header), built by gcc at run time, on the
# keep-alive 64-byte workloads it can serve. It marks what is reachable on this machine in
# the same run, so a target below it shows as such.
YARDSTICK = "yardstick"
YARDSTICK_SRC = "yardstick/http_uring.c"
YARDSTICK_WLS = ("ka64_c50", "ka64_c500")  # ab -k needs a Connection: keep-alive header it never sends


class Server:
    def __init__(self, name, workdir, docroot, base=None):
        self.name = name
        self.base = base
        self.port = free_port()
        self.proc = None
        self.workdir = workdir
        self.docroot = docroot

    def start(self):
        if self.name == YARDSTICK:
            self.log = open(os.path.join(self.workdir, "yardstick.log"), "w")
            self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, self.binary, f"127.0.0.1:{self.port}"],
                                         stdout=self.log, stderr=self.log)
            wait_port(self.port, self.proc)
            return
        if self.name == "nginx":
            conf = os.path.join(self.workdir, "nginx.conf")
            open(conf, "w").write(f"""
worker_processes 1;
daemon off;
master_process on;
pid {self.workdir}/nginx.pid;
error_log {self.workdir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  default_type text/plain;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 75s;
  keepalive_requests 1000;
  client_body_temp_path {self.workdir}/nginx-body;
  proxy_temp_path {self.workdir}/nginx-proxy;
  fastcgi_temp_path {self.workdir}/nginx-fastcgi;
  uwsgi_temp_path {self.workdir}/nginx-uwsgi;
  scgi_temp_path {self.workdir}/nginx-scgi;
  server {{
    listen 127.0.0.1:{self.port} backlog=4096;
    location = /r64 {{ return 200 "{BODY64}"; }}
    location = /r1k {{ return 200 "{BODY1K}"; }}
    location /static/ {{ root {self.docroot}; }}
  }}
}}
""")
            cmd = ["taskset", "-c", SERVER_CPU, nginx_bin(), "-c", conf, "-e", f"{self.workdir}/nginx-error.log"]
        else:
            engine = self.name.split("-")[1]
            conf = os.path.join(self.workdir, f"{self.name}.toml")
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{SERVER_CPU}]
engine = "{engine}"
log_level = "warn"
[http]
keepalive_timeout = "75s"
keepalive_requests = 1000
[[server]]
listen = ["127.0.0.1:{self.port}"]
  [[server.location]]
  path = "/r64"
  exact = true
  return = {{ status = 200, body = "{BODY64}" }}
  [[server.location]]
  path = "/r1k"
  exact = true
  return = {{ status = 200, body = "{BODY1K}" }}
  [[server.location]]
  path = "/static/"
  root = "{self.docroot}"
""")
            cmd = ["taskset", "-c", SERVER_CPU, lib.ringx_binary(self.name, self.base), "serve", "-c", conf]
        self.log = open(os.path.join(self.workdir, f"{self.name}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        wait_port(self.port, self.proc)
        if self.name.startswith(("ringx", "base")):
            time.sleep(0.2)
            txt = open(os.path.join(self.workdir, f"{self.name}.log")).read()
            if "using the epoll driver" in txt and self.name.endswith("-uring"):
                raise RuntimeError(f"{self.name} fell back to epoll: " + txt)

    def pids(self):
        return proc_tree(self.proc.pid)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name.startswith(("ringx", "base")) else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def build_yardstick(work):
    """Compiles bench/yardstick/http_uring.c (liburing); returns its path, or None with the
    reason printed (its rows are then left out)."""
    out = lib.build_c(YARDSTICK_SRC, os.path.join(work, "http_uring"), ["-luring"])
    if out is None:
        print("bench: no yardstick (install liburing-dev: scripts/install-deps.sh): its rows are left out",
              flush=True)
    return out


def measure(server, wl, secs, ab_n, cg, capped, free=None):
    """One run. The server is moved into `cg` (capped) or `free` (uncapped) for its duration,
    and its CPU read from that cgroup."""
    tool, path, conns, extra, _ = WORKLOADS[wl]
    pids = server.pids()
    into = cg if capped else free
    if into is not None:
        into.move(pids, True)
    try:
        before = server_cpu_ns(pids, into)
        if tool == "wrk":
            r = run_wrk(server.port, path, conns, secs, extra)
        else:
            r = run_ab(server.port, path, ab_n)
        after = server_cpu_ns(pids, into)
    finally:
        if into is not None:
            into.move(pids, False)
    r["cpu_us_per_req"] = (after - before) / 1000 / max(r["requests"], 1)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 rounds of 1 s: a smoke run")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--only", help="comma-separated workloads")
    ap.add_argument("--no-report", action="store_true", help="do not rewrite bench/README.md")
    ap.add_argument("--base", help="another ringx binary to alternate with this tree's (A/B)")
    args = ap.parse_args()
    # Five short rounds rather than three long ones: on a noisy host the median of more,
    # finer-alternated samples moves less.
    rounds = args.rounds or (2 if args.quick else 5)
    secs = args.duration or (1 if args.quick else 2)
    ab_n = 5000 if args.quick else 20000
    wls = args.only.split(",") if args.only else list(WORKLOADS)
    if os.geteuid() != 0:
        sys.exit("bench: needs root (cgroup CPU cap)")
    if not os.path.exists(RINGX):
        sys.exit(f"bench: {RINGX} missing: run `make release`")
    work = tempfile.mkdtemp(prefix="ringx-bench-")
    docroot = os.path.join(work, "www")
    os.makedirs(os.path.join(docroot, "static"))
    for name, size in STATIC_FILES.items():
        with open(os.path.join(docroot, "static", name), "wb") as f:
            f.write(os.urandom(size))
        os.chmod(os.path.join(docroot, "static", name), 0o644)
    # nginx's workers run as an unprivileged user: the document root must be readable to all.
    for d in (work, docroot, os.path.join(docroot, "static")):
        os.chmod(d, 0o755)
    cg = Cgroup("ringx-bench-cap")
    free = Cgroup("ringx-bench-free")
    cg.cap(CAP_PCT)
    peers = PEERS + lib.base_peers(args.base)
    servers = {p: Server(p, work, docroot, args.base) for p in peers}
    yardstick = build_yardstick(work) if any(w in YARDSTICK_WLS for w in wls) else None
    if yardstick:
        servers[YARDSTICK] = Server(YARDSTICK, work, docroot)
        servers[YARDSTICK].binary = yardstick
    rows = []
    started = time.time()
    speed_before = host_speed()
    try:
        for s in servers.values():
            s.start()
        for wl in wls:
            for rnd in range(rounds):
                for peer in servers:
                    if peer == YARDSTICK and wl not in YARDSTICK_WLS:
                        continue
                    s = servers[peer]
                    r = measure(s, wl, secs, ab_n, cg, capped=False, free=free)
                    row = {"workload": wl, "peer": peer, "round": rnd, **r}
                    if WORKLOADS[wl][0] == "wrk":
                        c = measure(s, wl, secs, ab_n, cg, capped=True)
                        row["capped_rps"] = c["rps"]
                        row["capped_cmd"] = f"cgroup cpu quota {CAP_PCT}% + " + c["cmd"]
                        if c["errors"]:
                            row["errors"] += " capped:" + c["errors"]
                    if row["errors"]:
                        # A peer that answers errors is not doing the same work: stop rather
                        # than report a meaningless ratio.
                        raise RuntimeError(f"{peer} on {wl}: {row['errors']}")
                    rows.append(row)
                    print(f"{wl:12s} r{rnd} {peer:12s} rps={row['rps']:>9.0f} cpu/req={row['cpu_us_per_req']:6.2f}us "
                          f"capped={row.get('capped_rps', 0):>9.0f} avg={row['lat_avg_ms']} p99={row['lat_p99_ms']} {row['errors']}",
                          flush=True)
    finally:
        for s in servers.values():
            s.stop()
        cg.remove()
        free.remove()
    elapsed = time.time() - started
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "rounds": rounds, "duration_s": secs, "ab_requests": ab_n, "cap_pct": CAP_PCT,
        "elapsed_s": round(elapsed, 1),
        "machine": machine(), "versions": versions(),
        "host_speed": {"before": speed_before, "after": host_speed()},
        "method": {"server_cpu": SERVER_CPU, "client_cpu": CLIENT_CPU,
                   "cpu": ("sum of /proc/PID/task/*/schedstat run time over the server's live threads"
                           if lib.METER_FALLBACK else
                           "CPU usage of a cgroup the server's processes are moved into for each run "
                           "(v2 cpu.stat usage_usec, v1 cpuacct.usage): exited threads included"),
                   "workloads": {k: v[4] for k, v in WORKLOADS.items()}},
        "rows": rows,
        "summary": summarise(rows, WORKLOADS, peers + [YARDSTICK]),
        "base": lib.shown(args.base and os.path.abspath(args.base)),
    }
    os.makedirs(RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "") + ("-ab" if args.base else "")
    path = os.path.join(RESULTS, f"{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench: wrote {path} in {elapsed:.0f} s")
    if not args.no_report and not args.base:
        import report
        report.write(result, name)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
