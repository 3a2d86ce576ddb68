#!/usr/bin/env python3
"""Reverse-proxy benchmark: ringx vs nginx `proxy_pass` vs HAProxy, with keep-alive upstream
connections, 64-byte and 1 KB responses, on one 2-core machine, beside a yardstick.

Same method as bench/http_bench.py (bench/README.md): each proxy is pinned to CPU 0 (one zone,
one nginx worker, one HAProxy thread); the client (wrk) and the shared upstream (nginx
`return 200`, one worker) to CPU 1. Peers are measured alternately, A B C A B C ..., at least
3 rounds. The figure that matters is the proxy's own CPU per proxied request (every thread of
the proxy's processes, from schedstat; the upstream is not counted), plus throughput with the
proxy capped at 40% of a core, and wrk's latency. Ratios are to nginx, to HAProxy and to the
yardstick measured in the same run.

The yardstick (peer `yardstick`, a reference, not a competitor) is bench/yardstick/proxy_uring.c,
built with gcc and liburing at run time: a minimal io_uring HTTP/1.1 forwarder, one thread, with
a keep-alive pool to the same upstream, each request passed to a pooled connection and the
response passed back with fixed framing (a head ending in CRLF CRLF, a Content-Length), no other
HTTP work; multishot receive into a provided-buffer ring and each send made from the buffer the
bytes arrived in (two SQEs per request), as tight as yardstick/http_uring.c serves. It is pinned, measured and capped as the others, so its CPU per request is what
proxying costs on this machine; ringx's ratio to it is the proxied path's distance from that
limit (issue 37's target: at most 1.15x). Without liburing-dev it is left out, with the reason
printed.

All three do the same work: HTTP/1.1 keep-alive to the client and to the upstream (a pool of
idle connections), no access log, no added forwarding headers (nginx and HAProxy add none by
default; ringx with `forwarded_headers = false`).

Usage: bench/proxy.py [--quick] [--rounds N] [--duration S] [--base BIN]
Writes bench/results/proxy-<date>.json, charts, and the proxy section of bench/README.md.
With --base BIN, another ringx build runs beside this one on both engines (peers base-uring
and base-epoll), alternated with the others, written to proxy-<date>-ab.json only.
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
import lib  # noqa: E402  (shared helpers: cgroup cap, CPU accounting, wrk parsing)

ROOT = lib.ROOT
RESULTS = lib.RESULTS
UPSTREAM_CPU = lib.CLIENT_CPU
WORKLOADS = {
    "proxy64_c50": ("/r64", 50, "64-byte response, keep-alive, 50 client connections"),
    "proxy1k_c50": ("/r1k", 50, "1 KB response, keep-alive, 50 client connections"),
}
PEERS = ["nginx", "haproxy", "ringx-uring", "ringx-epoll"]
# The reference peer (docstring): measured alternately with the others when it builds.
YARDSTICK = "yardstick"
YARDSTICK_SRC = "yardstick/proxy_uring.c"
YARDSTICK_TARGET = 1.15  # issue 37: ringx's CPU per proxied request at most this × the yardstick's
COLORS = {"nginx": "#4d7ea8", "haproxy": "#6a9f58", "ringx-epoll": "#c9a227", "ringx-uring": "#c0392b",
          YARDSTICK: "#999999"}


class Upstream:
    """nginx answering /r64 and /r1k, pinned to the client's CPU."""

    def __init__(self, work):
        self.port = lib.free_port()
        self.work = work

    def start(self):
        conf = os.path.join(self.work, "upstream.conf")
        open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {self.work}/upstream.pid;
error_log {self.work}/upstream-error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_timeout 300s; keepalive_requests 10000000;
  client_body_temp_path {self.work}/up-body; proxy_temp_path {self.work}/up-proxy;
  fastcgi_temp_path {self.work}/up-fcgi; uwsgi_temp_path {self.work}/up-uwsgi;
  scgi_temp_path {self.work}/up-scgi;
  server {{ listen 127.0.0.1:{self.port} backlog=4096;
    location = /r64 {{ return 200 "{lib.BODY64}"; }}
    location = /r1k {{ return 200 "{lib.BODY1K}"; }} }} }}
""")
        self.proc = subprocess.Popen(["taskset", "-c", UPSTREAM_CPU, lib.nginx_bin(), "-c", conf,
                                      "-e", f"{self.work}/upstream-error.log"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lib.wait_port(self.port, self.proc)

    def stop(self):
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(5)


class Proxy:
    def __init__(self, name, work, up_port):
        self.name, self.work, self.up = name, work, up_port
        self.base = None
        self.binary = None  # the yardstick's, once built
        self.port = lib.free_port()

    def start(self):
        w, cpu = self.work, lib.SERVER_CPU
        if self.name == "nginx":
            conf = os.path.join(w, "px-nginx.conf")
            open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {w}/px-nginx.pid; error_log {w}/px-nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_timeout 75s; keepalive_requests 1000;
  client_body_temp_path {w}/px-body; proxy_temp_path {w}/px-proxy;
  fastcgi_temp_path {w}/px-fcgi; uwsgi_temp_path {w}/px-uwsgi; scgi_temp_path {w}/px-scgi;
  upstream app {{ server 127.0.0.1:{self.up}; keepalive 64; keepalive_requests 10000000; }}
  server {{ listen 127.0.0.1:{self.port} backlog=4096;
    location / {{ proxy_pass http://app; proxy_http_version 1.1;
                 proxy_set_header Connection ""; proxy_set_header Host $host; }} }} }}
""")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{w}/px-nginx-error.log"]
        elif self.name == "haproxy":
            conf = os.path.join(w, "haproxy.cfg")
            open(conf, "w").write(f"""
global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 75s
  timeout server 60s
  timeout http-keep-alive 75s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:{self.port}
  default_backend app
backend app
  server s1 127.0.0.1:{self.up}
""")
            cmd = ["haproxy", "-f", conf]
        elif self.name == YARDSTICK:
            cmd = [self.binary, f"127.0.0.1:{self.port}", f"127.0.0.1:{self.up}"]
        else:
            engine = self.name.split("-")[1]
            conf = os.path.join(w, f"px-{self.name}.toml")
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{cpu}]
engine = "{engine}"
log_level = "warn"
[http]
keepalive_timeout = "75s"
keepalive_requests = 1000
[[upstream]]
name = "app"
servers = ["127.0.0.1:{self.up}"]
keepalive = 64
[[server]]
listen = ["127.0.0.1:{self.port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  forwarded_headers = false
""")
            cmd = [lib.ringx_binary(self.name, self.base), "serve", "-c", conf]
        self.log = open(os.path.join(w, f"px-{self.name}.log"), "w")
        self.proc = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=self.log, stderr=self.log)
        lib.wait_port(self.port, self.proc)

    def pids(self):
        return lib.proc_tree(self.proc.pid)

    def stop(self):
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name.startswith(("ringx", "base")) else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def measure(p, wl, secs, cg, capped):
    path, conns, _ = WORKLOADS[wl]
    pids = p.pids()
    if capped:
        cg.move(pids, True)
    try:
        before = lib.cpu_ns(pids)
        r = lib.run_wrk(p.port, path, conns, secs, [])
        after = lib.cpu_ns(pids)
    finally:
        if capped:
            cg.move(pids, False)
    r["cpu_us_per_req"] = (after - before) / 1000 / max(r["requests"], 1)
    return r


def build_yardstick(work):
    """Compiles bench/yardstick/proxy_uring.c (liburing); returns its path, or None with the
    reason printed (its rows are then left out)."""
    out = lib.build_c(YARDSTICK_SRC, os.path.join(work, "proxy_uring"), ["-luring"])
    if out is None:
        print("bench/proxy: no yardstick (install liburing-dev: scripts/install-deps.sh): its rows are left out",
              flush=True)
    return out


def summarise(rows, peers=PEERS):
    return lib.summarise(rows, WORKLOADS, peers, ("nginx", "haproxy", YARDSTICK))


def to_yardstick(summary):
    """Per workload, ringx-uring's CPU per request relative to the yardstick's (None where
    either is missing)."""
    return {wl: s.get("ringx-uring", {}).get("cpu_us_per_req", {}).get(f"ratio_to_{YARDSTICK}")
            for wl, s in summary.items()}


def report(result, name):
    import report as rep
    summary = result["summary"]
    metrics = [("cpu_us_per_req", "proxy CPU per proxied request (µs, lower is better)"),
               ("capped_rps", "requests/s, proxy capped at 40% of a core (higher is better)"),
               ("lat_p99_ms", "p99 latency (ms, lower is better)")]
    files = rep.bar_charts(summary, f"proxy-{name}", metrics, COLORS)
    lines = [f"Run of {result['date']} ({result['mode']}, {result['rounds']} rounds × "
             f"{result['duration_s']} s per peer and workload, {result['elapsed_s']:.0f} s in all) "
             f"on {result['machine']['cpu']}, kernel {result['machine']['kernel']}; "
             f"{result['versions']['nginx']}, {result['versions']['haproxy']}, {result['versions']['ringx']}; "
             f"load average after the run {result.get('load_avg_after', ['?'])[0]:.2f}. "
             f"Raw data: `bench/results/proxy-{name}.json`.", ""]

    def cell(s, m):
        if m not in s:
            return "–"
        v = s[m]
        d = 2 if v["median"] < 100 else 0
        t = f"{v['median']:.{d}f} ({v['min']:.{d}f}–{v['max']:.{d}f})"
        r = [f"{v[k]:.2f}×" for k in ("ratio_to_nginx", "ratio_to_haproxy", f"ratio_to_{YARDSTICK}") if k in v]
        return t + (f" **{' / '.join(r)}**" if r else "")
    for wl, desc in ((w, WORKLOADS[w][2]) for w in WORKLOADS):
        if not summary.get(wl):
            continue
        ratios = "to nginx / to HAProxy" + (" / to the yardstick" if YARDSTICK in summary[wl] else "")
        lines += [f"**{wl}** — {desc}. Ratios: {ratios}.", "",
                  "| peer | CPU µs/req | req/s | capped req/s | mean ms | p99 ms |",
                  "|---|---|---|---|---|---|"]
        for peer in PEERS + [YARDSTICK]:
            s = summary[wl].get(peer)
            if s:
                lines.append(f"| {peer} | " + " | ".join(cell(s, m) for m in
                             ("cpu_us_per_req", "rps", "capped_rps", "lat_avg_ms", "lat_p99_ms")) + " |")
        y = to_yardstick(summary)[wl]
        if y is not None:
            lines += ["", f"ringx-uring's CPU per request is **{y:.2f}×** the yardstick's "
                          f"([`yardstick/proxy_uring.c`](yardstick/proxy_uring.c); target ≤ {YARDSTICK_TARGET}×)."]
        lines.append("")
    for f, title in files:
        lines.append(f"![{title}](results/{f})")
    lines.append("")
    lines.append("Commands: " + "; ".join(sorted({r['cmd'] for r in result['rows']})[:2]) +
                 " (and the same with the proxy moved into a cgroup with a 40% CPU quota).")
    readme = os.path.join(ROOT, "bench", "README.md")
    txt = open(readme).read()
    begin, end = "<!-- proxy:begin -->", "<!-- proxy:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in txt:
        txt = txt[:txt.index(begin)] + block + txt[txt.index(end) + len(end):]
    else:
        txt += "\n## Reverse proxy (`bench/proxy.py`)\n\n" + (__doc__.split("\n\n")[1]) + "\n\n" + block + "\n"
    open(readme, "w").write(txt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--base", help="another ringx binary to alternate with this tree's (A/B)")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    secs = args.duration or (1 if args.quick else 3)
    if os.geteuid() != 0:
        sys.exit("bench/proxy: needs root (cgroup CPU cap)")
    if not shutil.which("haproxy"):
        sys.exit("bench/proxy: haproxy missing (scripts/install-deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="ringx-proxy-bench-")
    os.chmod(work, 0o755)
    cg = lib.Cgroup("ringx-proxy-bench-cap")
    cg.cap(lib.CAP_PCT)
    up = Upstream(work)
    peers = PEERS + lib.base_peers(args.base)
    yardstick = build_yardstick(work)
    if yardstick:
        peers.append(YARDSTICK)
    proxies = {p: Proxy(p, work, up.port) for p in peers}
    for p in proxies.values():
        p.base = args.base
        p.binary = yardstick
    rows = []
    t0 = time.time()
    try:
        up.start()
        for p in proxies.values():
            p.start()
        time.sleep(0.3)
        for wl in WORKLOADS:
            for p in proxies.values():  # warm the upstream pools
                lib.run_wrk(p.port, WORKLOADS[wl][0], 10, 1, [])
            for rnd in range(rounds):
                for name in peers:
                    p = proxies[name]
                    r = measure(p, wl, secs, cg, False)
                    c = measure(p, wl, secs, cg, True)
                    row = {"workload": wl, "peer": name, "round": rnd, **r, "capped_rps": c["rps"],
                           "capped_cmd": f"cgroup cpu quota {lib.CAP_PCT}% + " + c["cmd"]}
                    errs = (r["errors"] + c["errors"]).strip()
                    if errs:
                        raise RuntimeError(f"{name} on {wl}: {errs}")
                    rows.append(row)
                    print(f"{wl:12s} r{rnd} {name:12s} rps={row['rps']:>8.0f} cpu/req={row['cpu_us_per_req']:6.2f}us "
                          f"capped={row['capped_rps']:>8.0f} p99={row['lat_p99_ms']}", flush=True)
    finally:
        for p in proxies.values():
            p.stop()
        up.stop()
        cg.remove()
    versions = lib.versions()
    versions["haproxy"] = lib.sh(["haproxy", "-v"]).stdout.splitlines()[0].strip()
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "mode": "quick" if args.quick else "full", "rounds": rounds, "duration_s": secs,
              "cap_pct": lib.CAP_PCT, "elapsed_s": round(time.time() - t0, 1),
              "machine": lib.machine(), "versions": versions,
              "load_avg_after": os.getloadavg(),
              "method": {"proxy_cpu": lib.SERVER_CPU, "client_and_upstream_cpu": UPSTREAM_CPU,
                         "cpu": "schedstat run time of the proxy's processes only",
                         "yardstick": YARDSTICK_SRC if yardstick else None,
                         "workloads": {k: v[2] for k, v in WORKLOADS.items()}},
              "rows": rows, "summary": summarise(rows, peers), "base": lib.shown(args.base and os.path.abspath(args.base))}
    for wl, y in to_yardstick(result["summary"]).items():
        if y is not None:
            print(f"{wl}: ringx-uring CPU per request {y:.2f}× the yardstick's (target ≤ {YARDSTICK_TARGET}×)")
    os.makedirs(RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "") + ("-ab" if args.base else "")
    path = os.path.join(RESULTS, f"proxy-{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench/proxy: wrote {path}")
    if not args.no_report and not args.base:
        report(result, name)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
