#!/usr/bin/env python3
"""HTTP/2 benchmark: ringx against nginx's `http2`, with h2load, on one 2-core machine.

Method as bench/http_bench.py (bench/README.md): the server pinned to CPU 0 (one zone, one
nginx worker), h2load to CPU 1, peers alternated A B A B ... for `--rounds` rounds; the figure
that matters is the server's own CPU (every thread, schedstat) per request, so a client slower
than the server does not decide it, and ratios are to nginx measured in the same run. Latency:
h2load's per-request log (`--log-file`), p99 over every request of the run.

Workloads (each over h2c prior knowledge and over TLS with ALPN h2, ECDSA P-256):
  64 B and 4 KB `return` bodies; 10 connections x 100 concurrent streams, and 500 connections
  x 1 stream.

gRPC proxying is measured by bench/grpc_proxy.py (`make bench-grpc`).

Usage: bench/h2.py [--quick] [--rounds N] [--duration S] [--only WL,...] [--base BIN]
Writes bench/results/h2-<date>.json.

With --base BIN, another ringx build (peer `base`) is alternated with nginx and this tree's,
so a change's effect on HTTP/2 CPU per request is measured in one run (written to
h2-<date>-ab.json).
"""
import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

PEERS = ["nginx", "ringx"]
# 4 KB comes from a file (a `return` body that long does not fit nginx's configuration
# parser); both peers serve it with their defaults (no open-file cache).
BODY4K = "0123456789abcdef" * 256
SHAPES = {"10x100": (10, 100), "500x1": (500, 1)}
WORKLOADS = {}
for proto in ("h2c", "tls"):
    for size in ("64", "4k"):
        for shape in SHAPES:
            WORKLOADS[f"{proto}_{size}_{shape}"] = (
                f"{'TLS (ALPN h2)' if proto == 'tls' else 'h2c'}, {size} B body, "
                f"{shape.replace('x', ' conns x ')} streams: CPU µs per request")


class Server:
    def __init__(self, name, work, cert, base=None):
        self.name, self.work, self.cert, self.base = name, work, cert, base
        self.plain, self.tls = lib.free_port(), lib.free_port()

    def start(self):
        w, (c, k) = self.work, self.cert
        if self.name == "nginx":
            conf = os.path.join(w, "nginx-h2.conf")
            open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {w}/nginx-h2.pid; error_log {w}/nginx-h2-error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_timeout 75s; keepalive_requests 100000000;
  http2_max_concurrent_streams 128;
  client_body_temp_path {w}/b; proxy_temp_path {w}/p; fastcgi_temp_path {w}/f;
  uwsgi_temp_path {w}/u; scgi_temp_path {w}/s;
  ssl_protocols TLSv1.3;
  server {{ listen 127.0.0.1:{self.plain} http2 backlog=4096;
    location = /r64 {{ return 200 "{lib.BODY64}"; }}
    location /w/ {{ alias {w}/www/; }} }}
  server {{ listen 127.0.0.1:{self.tls} ssl http2 backlog=4096;
    ssl_certificate {c}; ssl_certificate_key {k};
    location = /r64 {{ return 200 "{lib.BODY64}"; }}
    location /w/ {{ alias {w}/www/; }} }} }}
""")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{w}/nginx-h2-error.log"]
        else:
            conf = os.path.join(w, "ringx-h2.toml")
            loc = f"""
  [[server.location]]
  path = "/r64"
  exact = true
  return = {{ status = 200, body = "{lib.BODY64}" }}
  [[server.location]]
  path = "/w/"
  alias = "{w}/www/"
"""
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
log_level = "warn"
[http]
keepalive_timeout = "75s"
[[server]]
listen = ["127.0.0.1:{self.plain}"]
{loc}
[[server]]
listen = ["127.0.0.1:{self.tls}"]
tls = {{ cert = "{c}", key = "{k}" }}
{loc}
""")
            binary = lib.ringx_binary("base-" if self.name == "base" else self.name, self.base)
            cmd = [binary, "serve", "-c", conf]
        self.log = open(os.path.join(w, f"{self.name}.log"), "w")
        self.proc = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, *cmd],
                                     stdout=self.log, stderr=self.log)
        lib.wait_port(self.plain, self.proc)
        lib.wait_port(self.tls, self.proc)
        return self

    def cpu(self):
        return lib.cpu_ns(lib.proc_tree(self.proc.pid))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name != "nginx" else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def h2load(url, conns, streams, secs, log):
    cmd = ["taskset", "-c", lib.CLIENT_CPU, "h2load", "-c", str(conns), "-m", str(streams),
           "-t", "1", "-D", str(secs), "--warm-up-time", "1", "--log-file", log, url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 120).stdout
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
    if not m:
        raise RuntimeError(f"h2load output not understood:\n{out[-2000:]}")
    done, ok, failed = int(m.group(1)), int(m.group(2)), int(m.group(3))
    lat = []
    with open(log) as f:
        for ln in f:
            parts = ln.split()
            if len(parts) >= 3 and parts[1] == "200":
                lat.append(int(parts[2]))  # µs
    lat.sort()
    p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000) if lat else (lambda q: None)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    return {"requests": done, "succeeded": ok, "failed": failed,
            "rps": float(rps.group(1)) if rps else None,
            "lat_p50_ms": p(0.5), "lat_p99_ms": p(0.99)}


def measure(srv, wl, secs, work):
    proto, size, shape = wl.split("_")
    conns, streams = SHAPES[shape]
    port, scheme = (srv.tls, "https") if proto == "tls" else (srv.plain, "http")
    path = "/r64" if size == "64" else "/w/4k.bin"
    before = srv.cpu()
    r = h2load(f"{scheme}://127.0.0.1:{port}{path}", conns, streams, secs,
               os.path.join(work, f"{srv.name}-{wl}.log"))
    r["cpu_us_per_req"] = (srv.cpu() - before) / 1000 / max(r["requests"], 1)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--only", help="comma-separated workloads (all by default)")
    ap.add_argument("--base", help="another ringx binary to alternate with this tree's (A/B)")
    args = ap.parse_args()
    peers = PEERS + (["base"] if args.base else [])
    workloads = WORKLOADS
    if args.only:
        unknown = [w for w in args.only.split(",") if w not in WORKLOADS]
        if unknown:
            ap.error(f"unknown workloads {unknown}; known: {list(WORKLOADS)}")
        workloads = {w: d for w, d in WORKLOADS.items() if w in args.only.split(",")}
    rounds = args.rounds or (1 if args.quick else 3)
    secs = args.duration or (2 if args.quick else 5)
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="ringx-bench-h2-")
    os.chmod(work, 0o755)
    os.makedirs(os.path.join(work, "www"), mode=0o755)
    with open(os.path.join(work, "www", "4k.bin"), "w") as f:
        f.write(BODY4K)
    os.chmod(os.path.join(work, "www", "4k.bin"), 0o644)
    c, k = lib.ec_cert(work)
    speed0 = lib.host_speed(3)
    rows = []
    for rnd in range(rounds):
        for wl in workloads:
            for peer in peers:
                srv = Server(peer, work, (c, k), args.base).start()
                try:
                    r = measure(srv, wl, secs, work)
                finally:
                    srv.stop()
                r.update(peer=peer, workload=wl, round=rnd)
                rows.append(r)
                print(f"bench/h2 round {rnd} {wl} {peer}: {r['cpu_us_per_req']:.2f} µs/req, "
                      f"p99 {r['lat_p99_ms']} ms ({r['succeeded']} ok, {r['failed']} failed)",
                      flush=True)
    summary = lib.summarise(rows, workloads, peers)
    h2v = lib.sh(["h2load", "--version"]).stdout.strip()
    result = {"date": datetime.date.today().isoformat(), "mode": "quick" if args.quick else "full",
              "rounds": rounds, "duration_s": secs, "elapsed_s": round(time.time() - t0),
              "machine": lib.machine(), "versions": {**lib.versions(), "h2load": h2v},
              "load_before": os.getloadavg(), "host_speed_before": speed0,
              "host_speed_after": lib.host_speed(3), "workloads": workloads, "rows": rows,
              "summary": summary, "base": lib.shown(args.base and os.path.abspath(args.base))}
    name = f"h2-{result['date']}" + ("-quick" if args.quick else "") + \
        ("-" + "-".join(workloads) if args.only else "") + ("-ab" if args.base else "")
    os.makedirs(lib.RESULTS, exist_ok=True)
    with open(os.path.join(lib.RESULTS, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"bench/h2: wrote bench/results/{name}.json", flush=True)
    for wl in workloads:
        s = summary[wl]
        cpu = s.get("ringx", {}).get("cpu_us_per_req", {})
        p99 = s.get("ringx", {}).get("lat_p99_ms", {})
        print(f"  {wl}: CPU/req ringx {cpu.get('median', 0):.2f} µs "
              f"({cpu.get('ratio_to_nginx', 0):.2f}x nginx), p99 {p99.get('median', 0):.2f} ms "
              f"({p99.get('ratio_to_nginx', 0):.2f}x nginx)")
        if args.base:
            b = s.get("base", {}).get("cpu_us_per_req", {})
            if b.get("median"):
                print(f"    this tree / base: {cpu.get('median', 0) / b['median']:.3f}x "
                      f"(base {b['median']:.2f} µs)")


if __name__ == "__main__":
    main()
