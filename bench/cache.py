#!/usr/bin/env python3
"""Proxy cache benchmark: a cache hit for a 4 KB proxied object, ringx's `proxy_cache`
against nginx's `proxy_cache`, CPU per request, on one 2-core machine.

Same method as bench/proxy.py (bench/README.md): each proxy is pinned to CPU 0 (one zone, one
nginx worker), the client (wrk) and the origin (nginx serving a 4 KB file with
`Cache-Control: max-age=3600`, one worker) to CPU 1. Every request is a hit: each proxy's
cache is filled before the measured runs, and the origin's request count is checked after
them. Peers are measured alternately, A B A B ..., for every round; the figure is the proxy's
own CPU per request (every thread of its processes, schedstat), with throughput capped at 40%
of a core and wrk's latency beside it.

nginx: `proxy_cache_path ... keys_zone=c:10m` with `use_temp_path=off`, `proxy_cache c`,
`proxy_cache_valid 200 10m`, `add_header X-Cache-Status $upstream_cache_status`,
`access_log off`, `sendfile on`; a hit opens the cache file, reads its header and sends the
body from it. ringx: `[[proxy_cache_path]]` with its defaults (a 4 KB object is answered from
the memory tier; the disk tier holds it too), `status_header` on, no access log.

Usage: bench/cache.py [--quick] [--rounds N] [--duration S]
Writes bench/results/cache-<date>[-quick].json and the cache section of bench/README.md.
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

ROOT = lib.ROOT
RESULTS = lib.RESULTS
BODY4K = "0123456789abcdef" * 256
WORKLOADS = {"hit4k_c50": ("/obj4k", 50, "4 KB cached object, keep-alive, 50 client connections")}
PEERS = ["nginx", "ringx-uring"]
TARGET = 0.8


class Origin:
    def __init__(self, work):
        self.port, self.work = lib.free_port(), work

    def start(self):
        w = self.work
        conf = os.path.join(w, "origin.conf")
        open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {w}/origin.pid; error_log {w}/origin-error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log {w}/origin-access.log; keepalive_timeout 300s;
  client_body_temp_path {w}/o-body; proxy_temp_path {w}/o-proxy; fastcgi_temp_path {w}/o-fcgi;
  uwsgi_temp_path {w}/o-uwsgi; scgi_temp_path {w}/o-scgi;
  server {{ listen 127.0.0.1:{self.port} backlog=4096;
    location = /obj4k {{ root {w}/www; add_header Cache-Control "max-age=3600"; }} }} }}
""")
        os.makedirs(f"{w}/www", exist_ok=True)
        open(f"{w}/www/obj4k", "w").write(BODY4K)
        self.proc = subprocess.Popen(["taskset", "-c", lib.CLIENT_CPU, lib.nginx_bin(), "-c", conf,
                                      "-e", f"{w}/origin-error.log"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lib.wait_port(self.port, self.proc)

    def requests(self):
        try:
            return sum(1 for _ in open(os.path.join(self.work, "origin-access.log")))
        except OSError:
            return 0

    def stop(self):
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(5)


class Proxy:
    def __init__(self, name, work, origin):
        self.name, self.work, self.origin = name, work, origin
        self.port = lib.free_port()

    def start(self):
        w, cpu = self.work, lib.SERVER_CPU
        if self.name == "nginx":
            conf = os.path.join(w, "cache-nginx.conf")
            open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {w}/cache-nginx.pid; error_log {w}/cache-nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; sendfile on; keepalive_timeout 75s; keepalive_requests 1000;
  client_body_temp_path {w}/n-body; proxy_temp_path {w}/n-proxy; fastcgi_temp_path {w}/n-fcgi;
  uwsgi_temp_path {w}/n-uwsgi; scgi_temp_path {w}/n-scgi;
  proxy_cache_path {w}/nginx-cache levels=1:2 keys_zone=c:10m max_size=1g inactive=60m use_temp_path=off;
  upstream app {{ server 127.0.0.1:{self.origin}; keepalive 16; }}
  server {{ listen 127.0.0.1:{self.port} backlog=4096;
    location / {{ proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_cache c; proxy_cache_valid 200 10m;
                 add_header X-Cache-Status $upstream_cache_status; }} }} }}
""")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{w}/cache-nginx-error.log"]
        else:
            conf = os.path.join(w, "cache-ringx.toml")
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{cpu}]
engine = "uring"
log_level = "warn"
[http]
keepalive_timeout = "75s"
keepalive_requests = 1000
[[proxy_cache_path]]
name = "c"
path = "{w}/ringx-cache"
[[upstream]]
name = "app"
servers = ["127.0.0.1:{self.origin}"]
keepalive = 16
[[server]]
listen = ["127.0.0.1:{self.port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  forwarded_headers = false
  proxy_cache = {{ zone = "c", valid = {{ "200" = "10m" }} }}
""")
            cmd = [lib.RINGX, "serve", "-c", conf]
        self.log = open(os.path.join(w, f"cache-{self.name}.log"), "w")
        self.proc = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=self.log, stderr=self.log)
        lib.wait_port(self.port, self.proc)

    def hit_status(self):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        c.request("GET", "/obj4k")
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.getheader("X-Cache-Status"), len(body)

    def pids(self):
        return lib.proc_tree(self.proc.pid)

    def stop(self):
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name.startswith("ringx") else signal.SIGTERM)
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


def report(result, name):
    s = result["summary"]["hit4k_c50"]
    ratio = s["ringx-uring"]["cpu_us_per_req"]["ratio_to_nginx"]
    lines = [f"### Latest run: `{result['date'][:10]}` ({result['mode']}, {result['rounds']} rounds of "
             f"{result['duration_s']} s per peer, {result['elapsed_s']:.0f} s in all)", "",
             f"Machine: {result['machine']['cpu']}, kernel {result['machine']['kernel']}; "
             f"{result['versions']['nginx']}; {result['versions']['ringx']}; load average before "
             f"{result['load_avg_before'][0]:.2f}, after {result['load_avg_after'][0]:.2f}. "
             f"Origin requests during the measured runs: {result['origin_requests_measured']} "
             f"(every measured request was a hit). Raw data: `bench/results/cache-{name}.json`.", "",
             "Median (min–max) over the rounds; **bold**: ratio to nginx in the same run.", "",
             "| peer | CPU µs/req | req/s | capped req/s | mean ms | p99 ms |", "|---|---|---|---|---|---|"]

    def cell(v):
        d = 2 if v["median"] < 100 else 0
        t = f"{v['median']:.{d}f} ({v['min']:.{d}f}–{v['max']:.{d}f})"
        return t + (f" **{v['ratio_to_nginx']:.2f}×**" if "ratio_to_nginx" in v else "")
    for peer in PEERS:
        row = s[peer]
        lines.append(f"| {peer} | " + " | ".join(cell(row[m]) if m in row else "–" for m in
                     ("cpu_us_per_req", "rps", "capped_rps", "lat_avg_ms", "lat_p99_ms")) + " |")
    verdict = "met" if ratio <= TARGET else "NOT met"
    lines += ["", f"Target (issue 23): ringx CPU per hit ≤ {TARGET}× nginx's: **{ratio:.2f}×, {verdict}**.",
              "", "Commands: " + "; ".join(sorted({r['cmd'] for r in result['rows']})[:1]) +
              " (and the same with the proxy in a cgroup with a 40% CPU quota)."]
    readme = os.path.join(ROOT, "bench", "README.md")
    txt = open(readme).read()
    begin, end = "<!-- cache:begin -->", "<!-- cache:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in txt:
        txt = txt[:txt.index(begin)] + block + txt[txt.index(end) + len(end):]
    else:
        txt += ("\n## Proxy cache (`bench/cache.py`)\n\n" + "\n\n".join(__doc__.split("\n\n")[1:3]) +
                "\n\n" + block + "\n")
    open(readme, "w").write(txt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    secs = args.duration or (1 if args.quick else 3)
    if os.geteuid() != 0:
        sys.exit("bench/cache: needs root (cgroup CPU cap)")
    work = tempfile.mkdtemp(prefix="ringx-cache-bench-")
    os.chmod(work, 0o755)
    cg = lib.Cgroup("ringx-cache-bench-cap")
    cg.cap(lib.CAP_PCT)
    origin = Origin(work)
    proxies = {p: Proxy(p, work, None) for p in PEERS}
    rows, t0, load0 = [], time.time(), os.getloadavg()
    try:
        origin.start()
        for p in proxies.values():
            p.origin = origin.port
            p.start()
        time.sleep(0.3)
        for name, p in proxies.items():
            p.hit_status()  # fills the cache
            time.sleep(0.2)
            st, n = p.hit_status()
            if st != "HIT" or n != len(BODY4K):
                raise RuntimeError(f"{name}: the second request was {st} ({n} bytes), not a hit")
        for p in proxies.values():  # warm-up
            lib.run_wrk(p.port, "/obj4k", 10, 1, [])
        origin_before = origin.requests()
        for rnd in range(rounds):
            for name in PEERS:
                p = proxies[name]
                r = measure(p, "hit4k_c50", secs, cg, False)
                c = measure(p, "hit4k_c50", secs, cg, True)
                errs = (r["errors"] + c["errors"]).strip()
                if errs:
                    raise RuntimeError(f"{name}: {errs}")
                row = {"workload": "hit4k_c50", "peer": name, "round": rnd, **r, "capped_rps": c["rps"]}
                rows.append(row)
                print(f"hit4k r{rnd} {name:12s} rps={row['rps']:>8.0f} cpu/req={row['cpu_us_per_req']:6.2f}us "
                      f"capped={row['capped_rps']:>8.0f} p99={row['lat_p99_ms']}", flush=True)
        origin_measured = origin.requests() - origin_before
    finally:
        for p in proxies.values():
            p.stop()
        origin.stop()
        cg.remove()
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "mode": "quick" if args.quick else "full", "rounds": rounds, "duration_s": secs,
              "cap_pct": lib.CAP_PCT, "elapsed_s": round(time.time() - t0, 1),
              "machine": lib.machine(), "versions": lib.versions(),
              "load_avg_before": load0, "load_avg_after": os.getloadavg(),
              "origin_requests_measured": origin_measured,
              "method": {"proxy_cpu": lib.SERVER_CPU, "client_and_origin_cpu": lib.CLIENT_CPU,
                         "cpu": "schedstat run time of the proxy's processes only",
                         "workloads": {k: v[2] for k, v in WORKLOADS.items()}},
              "rows": rows, "summary": lib.summarise(rows, WORKLOADS, PEERS, ("nginx",))}
    os.makedirs(RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "")
    path = os.path.join(RESULTS, f"cache-{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench/cache: wrote {path}")
    if not args.no_report:
        report(result, name)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
