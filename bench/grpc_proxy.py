#!/usr/bin/env python3
"""gRPC unary proxy benchmark: ringx `proxy_pass = "grpc://…"` against nginx `grpc_pass`,
with h2load sending gRPC calls, on one 2-core machine.

Method as bench/h2.py (bench/README.md): the proxy pinned to CPU 0 (one zone, one nginx
worker); h2load and the gRPC server (Python grpcio, tests/grpc_upstream.py, method
`/t.T/Unary`, which answers the message reversed) on CPU 1; peers alternated A B A B ...
for `--rounds` rounds. The figure that matters is the proxy's own CPU (every thread) per
call: the upstream is the same slow Python server for both, so it sets the call rate but
not the proxy's cost per call. h2load sends each call as a POST of one gRPC message
(`content-type: application/grpc`, `te: trailers`); before measuring, one call through
each proxy is checked with grpcio (answer and grpc-status), since h2load counts any
HTTP 200 as success. nginx keeps 64 idle upstream connections (`keepalive`); ringx
multiplexes calls on HTTP/2 connections per zone.

Workload: unary, 64 B message, 10 connections x 10 concurrent streams.

Usage: bench/grpc_proxy.py [--quick] [--rounds N] [--duration S]
Writes bench/results/grpc-<date>.json.
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
WORKLOADS = {"unary_64_10x10": "gRPC unary, 64 B message, 10 conns x 10 streams: CPU µs per call"}
MSG = b"m" * 64


class Upstream:
    def __init__(self):
        self.port = lib.free_port()
        self.proc = subprocess.Popen(
            ["taskset", "-c", lib.CLIENT_CPU, sys.executable,
             os.path.join(lib.ROOT, "tests", "grpc_upstream.py"), str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout.readline().strip() == b"ready"

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Server:
    def __init__(self, name, work, up):
        self.name, self.work, self.up = name, work, up
        self.port = lib.free_port()

    def start(self):
        w = self.work
        if self.name == "nginx":
            conf = os.path.join(w, "nginx-grpc.conf")
            open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {w}/nginx-grpc.pid; error_log {w}/nginx-grpc-error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_timeout 75s; keepalive_requests 100000000;
  client_body_temp_path {w}/b; proxy_temp_path {w}/p; fastcgi_temp_path {w}/f;
  uwsgi_temp_path {w}/u; scgi_temp_path {w}/s;
  upstream g {{ server 127.0.0.1:{self.up.port}; keepalive 64; keepalive_requests 100000000; }}
  server {{ listen 127.0.0.1:{self.port} http2 backlog=4096;
    location / {{ grpc_pass grpc://g; }} }} }}
""")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{w}/nginx-grpc-error.log"]
        else:
            conf = os.path.join(w, "ringx-grpc.toml")
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
log_level = "warn"
[http]
keepalive_timeout = "75s"
[[server]]
listen = ["127.0.0.1:{self.port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "grpc://127.0.0.1:{self.up.port}"
""")
            cmd = [lib.RINGX, "serve", "-c", conf]
        self.log = open(os.path.join(w, f"{self.name}-grpc.log"), "w")
        self.proc = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, *cmd],
                                     stdout=self.log, stderr=self.log)
        lib.wait_port(self.port, self.proc)
        return self

    def check(self):
        """One call through the proxy, answer and status checked."""
        import grpc
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
            resp, call = ch.unary_unary("/t.T/Unary").with_call(MSG, timeout=10)
        if resp != MSG[::-1] or call.code() != grpc.StatusCode.OK:
            raise RuntimeError(f"{self.name}: gRPC check failed: {resp!r} {call.code()}")

    def cpu(self):
        return lib.cpu_ns(lib.proc_tree(self.proc.pid))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name != "nginx" else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def h2load(url, body, conns, streams, secs, log):
    cmd = ["taskset", "-c", lib.CLIENT_CPU, "h2load", "-c", str(conns), "-m", str(streams),
           "-t", "1", "-D", str(secs), "--warm-up-time", "1", "--log-file", log,
           "-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers", url]
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


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    secs = args.duration or (2 if args.quick else 5)
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="ringx-bench-grpc-")
    os.chmod(work, 0o755)
    body = os.path.join(work, "call.bin")
    with open(body, "wb") as f:
        f.write(b"\x00" + len(MSG).to_bytes(4, "big") + MSG)
    up = Upstream()
    speed0 = lib.host_speed(3)
    load0 = os.getloadavg()
    rows = []
    try:
        for rnd in range(rounds):
            for wl in WORKLOADS:
                for peer in PEERS:
                    srv = Server(peer, work, up).start()
                    try:
                        srv.check()
                        before = srv.cpu()
                        r = h2load(f"http://127.0.0.1:{srv.port}/t.T/Unary", body, 10, 10, secs,
                                   os.path.join(work, f"{peer}-{wl}.log"))
                        r["cpu_us_per_req"] = (srv.cpu() - before) / 1000 / max(r["requests"], 1)
                    finally:
                        srv.stop()
                    r.update(peer=peer, workload=wl, round=rnd)
                    rows.append(r)
                    print(f"bench/grpc round {rnd} {wl} {peer}: {r['cpu_us_per_req']:.2f} µs/call, "
                          f"{r['rps']} calls/s, p99 {r['lat_p99_ms']} ms "
                          f"({r['succeeded']} ok, {r['failed']} failed)", flush=True)
    finally:
        up.stop()
    summary = lib.summarise(rows, WORKLOADS, PEERS)
    import grpc
    result = {"date": datetime.date.today().isoformat(), "mode": "quick" if args.quick else "full",
              "rounds": rounds, "duration_s": secs, "elapsed_s": round(time.time() - t0),
              "machine": lib.machine(),
              "versions": {**lib.versions(),
                           "h2load": lib.sh(["h2load", "--version"]).stdout.strip(),
                           "grpcio": grpc.__version__},
              "load_before": load0, "load_after": os.getloadavg(),
              "host_speed_before": speed0, "host_speed_after": lib.host_speed(3),
              "workloads": WORKLOADS, "rows": rows, "summary": summary}
    name = f"grpc-{result['date']}" + ("-quick" if args.quick else "")
    os.makedirs(lib.RESULTS, exist_ok=True)
    with open(os.path.join(lib.RESULTS, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"bench/grpc: wrote bench/results/{name}.json", flush=True)
    for wl in WORKLOADS:
        s = summary[wl]
        cpu = s.get("ringx", {}).get("cpu_us_per_req", {})
        p99 = s.get("ringx", {}).get("lat_p99_ms", {})
        print(f"  {wl}: CPU/call ringx {cpu.get('median', 0):.2f} µs "
              f"({cpu.get('ratio_to_nginx', 0):.2f}x nginx), p99 {p99.get('median', 0):.2f} ms "
              f"({p99.get('ratio_to_nginx', 0):.2f}x nginx)")


if __name__ == "__main__":
    main()
