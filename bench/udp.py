#!/usr/bin/env python3
"""UDP stream proxying: ringx `[[stream]] protocol = "udp"` against nginx's `stream` UDP proxy,
in datagrams proxied per CPU-second of the proxy, on one 2-core machine.

Each proxy is pinned to CPU 0 (one zone, one nginx worker); the client and the upstream (a C
echo server, bench/udp_load.c, recvmmsg/sendmmsg) to CPU 1. The client keeps a window of
datagrams in flight on each of its sockets, each socket one client address and port, so one
proxy session each. Peers are measured alternately, A B C A B C ..., at least 3 rounds. The
figure that matters is the proxy's CPU time (every thread of its processes, from schedstat)
per proxied datagram: each answered request is two datagrams passed on (the query to the
server and its answer to the client), so packets per CPU-second = 2 x answers / proxy CPU
seconds. Ratios are to nginx measured in the same run; the issue's target is >= 1.5x.

Workloads: `flows`: 64 sockets, 4 datagrams of 64 bytes in flight each, sessions that last
the whole run (QUIC-like pass-through); `dns`: 64 sockets, one 64-byte query at a time, each
session ending with its answer (`responses = 1`, nginx `proxy_responses 1`), so every query
opens a session and a socket to the server. Both proxies hash the client address to pick the
server (nginx `hash $remote_addr consistent`), with no access log.

Usage: bench/udp.py [--quick] [--rounds N] [--duration S]
Writes bench/results/udp-<date>.json and the UDP section of bench/README.md.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402  (shared helpers: pinning, CPU accounting, machine description)

ROOT = lib.ROOT
RESULTS = lib.RESULTS
LOAD_CPU = lib.CLIENT_CPU
NGINX_STREAM = "/usr/lib/nginx/modules/ngx_stream_module.so"
# name: (sockets, window, responses per query or None, description)
WORKLOADS = {
    "flows": (64, 4, None, "64 client sessions for the whole run, 4 datagrams of 64 B in flight each"),
    "dns": (64, 1, 1, "64 clients, one 64 B query at a time, a session per query (responses = 1)"),
}
PEERS = ["nginx", "ringx-uring", "ringx-epoll"]
SIZE = 64


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port, timeout=5):
    """Whether something at 127.0.0.1:port echoes a datagram (the proxy is up)."""
    end = time.time() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.time() < end:
            try:
                s.sendto(b"ping", ("127.0.0.1", port))
                if s.recv(100) == b"ping":
                    return True
            except OSError:
                pass
            time.sleep(0.05)
    return False


class Proxy:
    def __init__(self, name, wl, work, up_port, responses=None, rcvbuf=None):
        """`name`: nginx..., or ringx-<engine>...; `responses` where `wl` is not one of
        WORKLOADS (bench/udp_sessions.py); `rcvbuf`: the listener's receive buffer (ringx
        `rcvbuf`, nginx `listen ... rcvbuf=`), None for each one's default."""
        self.name, self.wl, self.work, self.up = name, wl, work, up_port
        self.responses = WORKLOADS[wl][2] if wl in WORKLOADS else responses
        self.rcvbuf = rcvbuf
        self.port = free_udp_port()
        self.proc = None

    def start(self):
        w, cpu, responses = self.work, lib.SERVER_CPU, self.responses
        tag = f"{self.name}-{self.wl}"
        if self.name.startswith("nginx"):
            conf = os.path.join(w, f"{tag}.conf")
            resp = f"proxy_responses {responses};" if responses is not None else ""
            rcv = f" rcvbuf={self.rcvbuf}" if self.rcvbuf else ""
            open(conf, "w").write(f"""
load_module {NGINX_STREAM};
worker_processes 1; daemon off; pid {w}/{tag}.pid; error_log {w}/{tag}-error.log warn;
events {{ worker_connections 16384; }}
stream {{
  upstream echo {{ hash $remote_addr consistent; server 127.0.0.1:{self.up}; }}
  server {{ listen 127.0.0.1:{self.port} udp{rcv}; proxy_pass echo; proxy_timeout 60s; {resp} }}
}}
""")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{w}/{tag}-error.log"]
        else:
            engine = self.name.split("-")[1]
            conf = os.path.join(w, f"{tag}.toml")
            resp = f"responses = {responses}\n" if responses is not None else ""
            if self.rcvbuf is not None:
                resp += f'rcvbuf = "{self.rcvbuf}"\n'
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{cpu}]
engine = "{engine}"
log_level = "warn"
[[upstream]]
name = "echo"
servers = ["127.0.0.1:{self.up}"]
[[stream]]
listen = ["127.0.0.1:{self.port}"]
protocol = "udp"
proxy_pass = "echo"
idle_timeout = "60s"
max_sessions = 65536
{resp}""")
            cmd = [lib.RINGX, "serve", "-c", conf]
        self.log = open(os.path.join(w, f"{tag}.log"), "w")
        self.proc = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=self.log, stderr=self.log)
        if not answers(self.port):
            self.stop()
            raise RuntimeError(f"{tag} does not pass datagrams; see {self.log.name}")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name.startswith("ringx") else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def measure(load, p, secs):
    socks, window, _, _ = WORKLOADS[p.wl]
    pids = lib.proc_tree(p.proc.pid)
    cmd = ["taskset", "-c", LOAD_CPU, load, "client", str(p.port), str(socks), str(window),
           str(secs), str(SIZE)]
    before = lib.cpu_ns(pids)
    out = lib.sh(cmd, timeout=secs + 30).stdout
    after = lib.cpu_ns(pids)
    m = re.match(r"sent (\d+) answered (\d+) lost (\d+) seconds ([\d.]+)", out)
    if not m:
        raise RuntimeError(f"{' '.join(cmd)} gave no result: {out!r}")
    sent, answered, lost, took = int(m[1]), int(m[2]), int(m[3]), float(m[4])
    cpu_s = (after - before) / 1e9
    return {"workload": p.wl, "peer": p.name, "sent": sent, "answered": answered, "lost": lost,
            "seconds": took, "proxy_cpu_s": round(cpu_s, 4),
            "answers_per_s": answered / took,
            "packets_per_cpu_s": 2 * answered / cpu_s if cpu_s > 0 else None,
            "cmd": " ".join(cmd)}


def summarise(rows):
    summary = {}
    for wl in WORKLOADS:
        summary[wl] = {}
        for peer in PEERS:
            rs = [r for r in rows if r["workload"] == wl and r["peer"] == peer]
            if not rs:
                continue
            summary[wl][peer] = {}
            for m in ("packets_per_cpu_s", "answers_per_s"):
                vals = [r[m] for r in rs if r.get(m)]
                if vals:
                    summary[wl][peer][m] = {"median": statistics.median(vals), "min": min(vals),
                                            "max": max(vals), "n": len(vals)}
            summary[wl][peer]["lost"] = sum(r["lost"] for r in rs)
        base = summary[wl].get("nginx", {})
        for peer, ms in summary[wl].items():
            for m, s in ms.items():
                if isinstance(s, dict) and m in base and base[m]["median"]:
                    s["ratio_to_nginx"] = s["median"] / base[m]["median"]
    return summary


def report(result, name):
    s = result["summary"]
    lines = [f"Run of {result['date']} ({result['mode']}, {result['rounds']} rounds × "
             f"{result['duration_s']} s per peer and workload, {result['elapsed_s']:.0f} s in all) "
             f"on {result['machine']['cpu']}, kernel {result['machine']['kernel']}; "
             f"{result['versions']['nginx']}, {result['versions']['ringx']}; load average "
             f"before {result['load_avg_before'][0]:.2f}, after {result['load_avg_after'][0]:.2f} "
             f"(the machine is shared). Raw data: `bench/results/udp-{name}.json`.", ""]
    for wl, (_, _, _, desc) in WORKLOADS.items():
        if not s.get(wl):
            continue
        lines += [f"**{wl}** — {desc}. Median (min–max); ratio to nginx in bold.", "",
                  "| peer | datagrams per proxy CPU-second | answers/s | lost |",
                  "|---|---|---|---|"]
        for peer in PEERS:
            v = s[wl].get(peer)
            if not v or "packets_per_cpu_s" not in v:
                continue
            p, a = v["packets_per_cpu_s"], v["answers_per_s"]
            lines.append(f"| {peer} | {p['median']:.0f} ({p['min']:.0f}–{p['max']:.0f}) "
                         f"**{p.get('ratio_to_nginx', 0):.2f}×** | {a['median']:.0f} | {v['lost']} |")
        lines.append("")
    loads = sorted({re.sub(r"\S*/udp_load client \d+", "udp_load client PORT", r["cmd"])
                    for r in result["rows"]})
    lines.append("Command: `flock /tmp/ringx-bench.lock python3 bench/udp.py` (what `make "
                 "bench-udp` runs); the load: " + "; ".join(f"`{x}`" for x in loads) +
                 " (udp_load: PORT SOCKETS WINDOW SECONDS SIZE).")
    readme = os.path.join(ROOT, "bench", "README.md")
    txt = open(readme).read()
    begin, end = "<!-- udp:begin -->", "<!-- udp:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in txt:
        txt = txt[:txt.index(begin)] + block + txt[txt.index(end) + len(end):]
    else:
        txt += ("\n## UDP streams (`bench/udp.py`, `make bench-udp`)\n\n" +
                " ".join(__doc__.split("\n\n")[1:3]).replace("\n", " ") + "\n\n" + block + "\n")
    open(readme, "w").write(txt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    secs = args.duration or (1 if args.quick else 3)
    if not os.path.exists(NGINX_STREAM):
        sys.exit(f"bench/udp: {NGINX_STREAM} missing (scripts/install-deps.sh installs "
                 "libnginx-mod-stream)")
    if not os.path.exists(lib.RINGX):
        sys.exit(f"bench/udp: {lib.RINGX} missing (cargo build --release)")
    work = tempfile.mkdtemp(prefix="ringx-udp-bench-")
    os.chmod(work, 0o755)
    load = lib.build_c("udp_load.c", os.path.join(work, "udp_load"))
    if not load:
        sys.exit("bench/udp: cannot build bench/udp_load.c")
    up_port = free_udp_port()
    up = subprocess.Popen(["taskset", "-c", LOAD_CPU, load, "echo", str(up_port)])
    load_before = os.getloadavg()
    rows, t0 = [], time.time()
    proxies = []
    try:
        for wl in WORKLOADS:
            ps = [Proxy(n, wl, work, up_port) for n in PEERS]
            proxies += ps
            for p in ps:
                p.start()
                measure(load, p, 0.5)  # warm-up
            for rnd in range(rounds):
                for p in ps:
                    r = measure(load, p, secs)
                    r["round"] = rnd
                    rows.append(r)
                    print(f"{wl:6s} r{rnd} {p.name:12s} answers/s={r['answers_per_s']:>9.0f} "
                          f"datagrams/cpu-s={r['packets_per_cpu_s'] or 0:>10.0f} lost={r['lost']}",
                          flush=True)
            for p in ps:
                p.stop()
    finally:
        for p in proxies:
            p.stop()
        up.kill()
        up.wait()
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "mode": "quick" if args.quick else "full", "rounds": rounds, "duration_s": secs,
              "elapsed_s": round(time.time() - t0, 1), "machine": lib.machine(),
              "versions": {"nginx": lib.sh([lib.nginx_bin(), "-v"]).stderr.strip(),
                           "ringx": lib.sh([lib.RINGX, "--version"]).stdout.strip()},
              "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
              "method": {"proxy_cpu": lib.SERVER_CPU, "client_and_upstream_cpu": LOAD_CPU,
                         "cpu": "schedstat run time of the proxy's processes only",
                         "packets": "2 datagrams proxied per answered request",
                         "workloads": {k: v[3] for k, v in WORKLOADS.items()}},
              "rows": rows, "summary": summarise(rows)}
    os.makedirs(RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "")
    path = os.path.join(RESULTS, f"udp-{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench/udp: wrote {path}")
    if not args.no_report:
        report(result, name)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
