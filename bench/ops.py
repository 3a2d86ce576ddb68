#!/usr/bin/env python3
"""Park/wake benchmark (issue #8, seed 000 §3.3/§4.3): what the unified blocking wait costs
and saves.

1. Idle CPU: ringx (2 zones, parking) vs nginx (2 workers) vs ringx forced to busy-poll,
   each left idle; CPU of every thread of the server (schedstat, ns) over the window.
2. Low load: one zone pinned to CPU 0, an open-loop paced client on CPU 1 (one keep-alive
   connection, latency measured from each request's scheduled send time, so a late
   response delays the next send but is still charged in full: no coordinated omission),
   at a few fixed rates, for several `busy_poll_us` budgets: 0 (park at once), small
   spins, and 1 s (pure busy polling: at these rates the zone never parks). Server CPU%,
   CPU per request, wait syscalls per request (from /metrics) and latency percentiles.
   nginx at the same rates for reference.

Writes bench/results/ops-<date>[-quick].json and, for a full run, the tables of the "Park and
wake" section of bench/README.md (between <!-- ops:begin --> and <!-- ops:end -->).
Usage: python3 bench/ops.py [--quick] [--no-readme]
"""

import argparse
import datetime
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import cpu_ns, free_port, machine, nginx_bin, proc_tree, versions, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
RINGX = os.environ.get("RINGX_BIN", os.path.join(ROOT, "target", "release", "ringx"))
BODY = "0123456789abcdef" * 4
REQ = b"GET /r64 HTTP/1.1\r\nHost: bench\r\n\r\n"
BUSY_US = -1  # never park: pure busy polling


class Server:
    def __init__(self, kind, workdir, zones=1, cpus="0", busy_poll_us=0, engine="uring"):
        self.kind, self.workdir = kind, workdir
        self.zones, self.cpus, self.busy, self.engine = zones, cpus, busy_poll_us, engine
        self.port, self.admin = free_port(), free_port()
        self.proc = None

    def start(self):
        log = open(os.path.join(self.workdir, f"{self.kind}-{self.port}.log"), "w")
        if self.kind == "nginx":
            conf = os.path.join(self.workdir, f"nginx-{self.port}.conf")
            w = self.workdir
            open(conf, "w").write(f"""
worker_processes {self.zones};
worker_cpu_affinity auto;
daemon off;
pid {w}/nginx-{self.port}.pid;
error_log {w}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 100000000;
  client_body_temp_path {w}/nb; proxy_temp_path {w}/np; fastcgi_temp_path {w}/nf;
  uwsgi_temp_path {w}/nu; scgi_temp_path {w}/ns;
  server {{ listen 127.0.0.1:{self.port}; location = /r64 {{ return 200 "{BODY}"; }} }}
}}
""")
            cmd = ["taskset", "-c", self.cpus, nginx_bin(), "-c", conf, "-e", f"{w}/nginx-error.log"]
        else:
            conf = os.path.join(self.workdir, f"ringx-{self.port}.toml")
            cpus = ", ".join(self.cpus.split(","))
            open(conf, "w").write(f"""
[runtime]
zones = {self.zones}
cpus = [{cpus}]
engine = "{self.engine}"
log_level = "warn"
busy_poll_us = {self.busy}
[http]
keepalive_requests = 100000000
[admin]
listen = "127.0.0.1:{self.admin}"
[[server]]
listen = ["127.0.0.1:{self.port}"]
  [[server.location]]
  path = "/r64"
  return = {{ status = 200, body = "{BODY}" }}
""")
            cmd = ["taskset", "-c", self.cpus, RINGX, "serve", "-c", conf]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        wait_port(self.port, self.proc)
        time.sleep(0.3)
        return self

    def cpu(self):
        return cpu_ns(proc_tree(self.proc.pid))

    def waits(self):
        if self.kind == "nginx":
            return None
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(float(ln.split()[-1]) for ln in text.splitlines()
                   if ln.startswith("ringx_zone_wait_syscalls_total{"))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.kind == "nginx" else signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def idle_cpu(srv, secs):
    """CPU% (of one core) of an idle server over `secs`."""
    srv.start()
    try:
        # One request first, so every worker has run its loop at least once.
        socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
        time.sleep(1)
        c0, t0 = srv.cpu(), time.monotonic()
        time.sleep(secs)
        c1, t1 = srv.cpu(), time.monotonic()
        return 100.0 * (c1 - c0) / 1e9 / (t1 - t0)
    finally:
        srv.stop()


CLIENT = None


def build_client(work):
    """Compiles the paced client (bench/ops_client.c)."""
    global CLIENT
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops_client.c")
    CLIENT = os.path.join(work, "ops_client")
    subprocess.run(["cc", "-O2", "-o", CLIENT, src], check=True)


def paced(port, rate, secs):
    """Open-loop client (ops_client.c, on CPU 1): one keep-alive connection, a request every
    1/rate s; latency from the scheduled send time to the end of the response, in s."""
    out = subprocess.run(["taskset", "-c", "1", CLIENT, str(port), str(rate), str(secs),
                          str(len(BODY))], capture_output=True, text=True, timeout=secs + 30)
    if out.returncode != 0:
        raise RuntimeError(f"client failed: {out.stderr}")
    return [int(x) / 1e9 for x in out.stdout.split()]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def low_load(srv, rate, secs):
    srv.start()
    try:
        # Warm-up, then the measured run.
        paced(srv.port, rate, 0.5)
        time.sleep(0.2)
        c0, w0, t0 = srv.cpu(), srv.waits(), time.monotonic()
        lat = paced(srv.port, rate, secs)
        c1, w1, t1 = srv.cpu(), srv.waits(), time.monotonic()
        n = len(lat)
        us = [x * 1e6 for x in lat]
        return {
            "rate": rate,
            "requests": n,
            "cpu_pct": round(100.0 * (c1 - c0) / 1e9 / (t1 - t0), 2),
            "cpu_us_per_req": round((c1 - c0) / 1e3 / n, 2),
            "waits_per_req": None if w0 is None else round((w1 - w0) / n, 3),
            "p50_us": round(pct(us, 50), 1),
            "p90_us": round(pct(us, 90), 1),
            "p99_us": round(pct(us, 99), 1),
            "max_us": round(max(us), 1),
            "mean_us": round(statistics.mean(us), 1),
        }
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter windows")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite bench/README.md")
    args = ap.parse_args()
    idle_secs = 3 if args.quick else 10
    load_secs = 2 if args.quick else 4
    rounds = 1 if args.quick else 3
    rates = [200, 1000, 5000]
    budgets = [0, 20, 100, BUSY_US]
    # The client runs on CPU 1 for the whole script; servers are pinned by their configs.
    os.sched_setaffinity(0, {1})
    started = time.time()
    work = tempfile.mkdtemp(prefix="ringx-ops-bench-")
    build_client(work)
    res = {
        "date": datetime.date.today().isoformat(),
        "quick": args.quick,
        "machine": machine(),
        "versions": versions(),
        "method": {
            "idle": f"server left idle {idle_secs} s after one connection; CPU = schedstat "
                    "ns of all its threads / wall time, in % of one core",
            "low_load": f"1 zone / 1 nginx worker on CPU 0; paced open-loop client (C, "
                        f"bench/ops_client.c, one keep-alive connection) on CPU 1 for {load_secs} s per rate and "
                        f"server, {rounds} rounds with the servers alternating, medians; "
                        "latency from scheduled send to end of response (a late response "
                        "delays the next send and is charged in full)",
            "busy_poll_us": "-1 means pure busy polling (the zone never parks)",
        },
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
        "idle": {},
        "low_load": [],
    }
    print(f"idle CPU over {idle_secs} s (% of one core):")
    for name, srv in [
        ("ringx (2 zones, busy_poll_us=0)", Server("ringx", work, zones=2, cpus="0,1")),
        ("nginx (2 workers)", Server("nginx", work, zones=2, cpus="0,1")),
        (f"ringx busy polling (2 zones, busy_poll_us={BUSY_US})",
         Server("ringx", work, zones=2, cpus="0,1", busy_poll_us=BUSY_US)),
        ("ringx epoll (2 zones, busy_poll_us=0)",
         Server("ringx", work, zones=2, cpus="0,1", engine="epoll")),
    ]:
        v = idle_cpu(srv, idle_secs)
        res["idle"][name] = round(v, 3)
        print(f"  {name:55s} {v:8.3f} %")
    print(f"low load (1 zone on CPU 0, paced client on CPU 1; medians of {rounds} rounds, "
          "the servers measured alternately in each round):")
    hdr = (f"  {'server':28s} {'rate':>6s} {'cpu%':>7s} {'cpu us/req':>10s} {'waits/req':>9s} "
           f"{'p50 us':>8s} {'p90 us':>8s} {'p99 us':>8s}")
    print(hdr)
    configs = [(f"ringx busy_poll_us={b}" if b != BUSY_US else "ringx pure busy polling",
                "ringx", b) for b in budgets] + [("nginx", "nginx", None)]
    for rate in rates:
        runs = {name: [] for name, _, _ in configs}
        for _ in range(rounds):
            for name, kind, b in configs:
                srv = Server(kind, work, busy_poll_us=b or 0)
                runs[name].append(low_load(srv, rate, load_secs))
        for name, kind, b in configs:
            rs = runs[name]
            med = {k: statistics.median(r[k] for r in rs)
                   for k in ("cpu_pct", "cpu_us_per_req", "p50_us", "p90_us", "p99_us",
                             "max_us", "mean_us")}
            w = [r["waits_per_req"] for r in rs if r["waits_per_req"] is not None]
            med["waits_per_req"] = statistics.median(w) if w else None
            row = {"server": name, "busy_poll_us": b, "rate": rate, **med, "rounds": rs}
            res["low_load"].append(row)
            print(f"  {name:28s} {rate:6d} {med['cpu_pct']:7.2f} {med['cpu_us_per_req']:10.2f} "
                  f"{med['waits_per_req'] if med['waits_per_req'] is not None else '-':>9} "
                  f"{med['p50_us']:8.1f} {med['p90_us']:8.1f} {med['p99_us']:8.1f}")
    res["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    res["elapsed_s"] = round(time.time() - started, 1)
    print(f"load average at start {res['loadavg_start']}, at end {res['loadavg_end']}")
    os.makedirs(RESULTS, exist_ok=True)
    out = os.path.join(RESULTS, f"ops-{res['date']}{'-quick' if args.quick else ''}.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {out}")
    if not args.quick and not args.no_readme:
        write_readme(res, os.path.basename(out))
        print("updated bench/README.md")


IDLE_LABELS = {
    "ringx (2 zones, busy_poll_us=0)": "ringx, 2 zones, io_uring, parking (default)",
    "ringx epoll (2 zones, busy_poll_us=0)": "ringx, 2 zones, epoll, parking",
    "nginx (2 workers)": "nginx, 2 workers",
    f"ringx busy polling (2 zones, busy_poll_us={BUSY_US})":
        "ringx, 2 zones, pure busy polling (`busy_poll_us = -1`)",
}
LOAD_LABELS = {
    "ringx busy_poll_us=0": "ringx, park at once (default)",
    "ringx busy_poll_us=20": "ringx, spin 20 µs",
    "ringx busy_poll_us=100": "ringx, spin 100 µs",
    "ringx pure busy polling": "ringx, pure busy polling",
    "nginx": "nginx",
}


def spread(row, key):
    """`median (min–max)` of one figure over the rounds."""
    vals = [r[key] for r in row["rounds"]]
    d = 0 if row[key] >= 100 else (1 if row[key] >= 10 else 2)
    return f"{row[key]:.{d}f} ({min(vals):.{d}f}–{max(vals):.{d}f})"


def write_readme(res, json_name):
    """Rewrites the generated part of bench/README.md's park-and-wake section: the run, both
    tables, and the ratios the prose after it discusses."""
    path = os.path.join(ROOT, "bench", "README.md")
    text = open(path).read()
    m, v = res["machine"], res["versions"]
    idle_rows = [f"| {IDLE_LABELS.get(k, k)} | {val:.3f}% |" for k, val in res["idle"].items()]
    load_rows = []
    by = {(r["server"], r["rate"]): r for r in res["low_load"]}
    for r in res["low_load"]:
        w = "–" if r["waits_per_req"] is None else f"{r['waits_per_req']:.1f}"
        load_rows.append(
            f"| {r['rate']}/s | {LOAD_LABELS.get(r['server'], r['server'])} | {r['cpu_pct']:.2f} | "
            f"{spread(r, 'cpu_us_per_req')} | {w} | {r['p50_us']:.0f} | {r['p90_us']:.0f} | "
            f"{spread(r, 'p99_us')} |")
    bullets = []
    for rate in sorted({r["rate"] for r in res["low_load"]}):
        park, busy, ngx = (by.get((n, rate)) for n in
                           ("ringx busy_poll_us=0", "ringx pure busy polling", "nginx"))
        if not (park and busy and ngx):
            continue
        bullets.append(
            f"- {rate}/s: parking uses {busy['cpu_us_per_req'] / park['cpu_us_per_req']:.0f}× less CPU "
            f"per request than pure busy polling and {park['cpu_us_per_req'] / ngx['cpu_us_per_req']:.2f}× "
            f"nginx's; its median latency is {park['p50_us'] - busy['p50_us']:+.0f} µs against busy "
            f"polling and {park['p50_us'] - ngx['p50_us']:+.0f} µs against nginx.")
    body = f"""<!-- ops:begin -->
Run of {res['date']} (3 rounds, servers alternating; `bench/results/{json_name}`) on {m['cpu']},
{m['cores']} cores, Linux {m['kernel']}; {v['nginx']}; {v['ringx']}. Load average
{' '.join(res['loadavg_start'])} at the start, {' '.join(res['loadavg_end'])} at the end.
Medians, with (min–max) over the rounds where the spread matters.

| idle, % of one core | CPU |
|---|---:|
{chr(10).join(idle_rows)}

| rate | server | CPU % of a core | CPU µs/request | waits/request | p50 µs | p90 µs | p99 µs |
|---:|---|---:|---:|---:|---:|---:|---:|
{chr(10).join(load_rows)}

{chr(10).join(bullets)}
<!-- ops:end -->"""
    if "<!-- ops:begin -->" in text:
        text = re.sub(r"<!-- ops:begin -->.*?<!-- ops:end -->", lambda _: body, text, flags=re.S)
    else:
        print("bench/README.md has no <!-- ops:begin --> marker: tables not written")
        return
    open(path, "w").write(text)


if __name__ == "__main__":
    main()
