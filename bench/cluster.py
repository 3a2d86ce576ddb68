#!/usr/bin/env python3
"""Cluster-wide limits' cost (issue 42): CPU per request of a `limit_req` location whose zone
has `scope = "cluster"` against the same zone with `scope = "local"`, alternated in one run,
and the Redis commands the cluster zone sends per request.

One ringx (one zone, CPU 0) and one redis-server (CPU 1, with wrk): `return 200` behind a
`limit_req` zone keyed by `$http_x_client`, with a rate far above what the machine serves (the
limit admits every request: what is measured is what keeping the count costs, locally or
synchronised with Redis in batches, not refusals). wrk sends 50 keep-alive connections; each
sends the header `X-Client: c<N>` for one of `--keys` keys (a Lua script spreads them), so a
sync batch carries many keys as a real site's would.

Per request: **ringx's CPU** (every thread of the process, the cluster sync thread included:
schedstat), the **Redis commands ringx sent** (its `ringx_cluster_redis_commands_total` on
/metrics: what crosses the network, one EVAL carrying a zone's batch), and what Redis ran for
them (`INFO commandstats`: each `redis.call` inside a script counts), over the requests wrk
completed. Targets: cluster ≤ 1.05× local CPU per request; ≤ 0.01 commands
per request at 10k req/s per host.

Usage: bench/cluster.py [--quick] [--rounds N] [--duration S] [--keys K]
Writes bench/results/cluster-<date>[-quick].json.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

SCOPES = ["local", "cluster"]


def start_redis(work):
    port = lib.free_port()
    p = subprocess.Popen(["taskset", "-c", lib.CLIENT_CPU, "redis-server", "--port", str(port),
                          "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", work],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lib.wait_port(port, p)
    return p, port


def redis_calls(port):
    """Every command the server ran so far (INFO commandstats), INFO's own calls left out."""
    out = lib.sh(["redis-cli", "-p", str(port), "INFO", "commandstats"]).stdout
    calls = 0
    for m in re.finditer(r"^cmdstat_(\w+):calls=(\d+)", out, re.M):
        if m.group(1) != "info":
            calls += int(m.group(2))
    return calls


def sent(admin):
    """Redis commands ringx asked for so far (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^ringx_cluster_redis_commands_total (\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def start_ringx(work, scope, redis_port):
    port, admin = lib.free_port(), lib.free_port()
    conf = os.path.join(work, f"ringx-{scope}.toml")
    with open(conf, "w") as f:
        f.write(f"""[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
log_level = "warn"
[admin]
listen = "127.0.0.1:{admin}"
[http]
keepalive_timeout = "75s"
keepalive_requests = 100000000
[cluster]
redis = ["127.0.0.1:{redis_port}"]
[[limit_req_zone]]
name = "bench"
key = "$http_x_client"
rate = "1000000r/s"
scope = "{scope}"
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{lib.BODY64}" }}
  limit_req = {{ zone = "bench", burst = 1000, nodelay = true }}
""")
    log = open(os.path.join(work, f"ringx-{scope}.log"), "w")
    p = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, lib.RINGX, "serve", "-c", conf],
                         stdout=log, stderr=log, preexec_fn=lib.raise_nofile)
    lib.wait_port(port, p)
    lib.wait_port(admin, p)
    return p, port, admin


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGQUIT)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def keys_script(work, keys):
    path = os.path.join(work, "keys.lua")
    with open(path, "w") as f:
        f.write(f"""
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/", {{ ["X-Client"] = "c" .. (n % {keys}) }})
end
""")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--keys", type=int, default=100)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    secs = args.duration or (3 if args.quick else 5)
    for tool in ("redis-server", "redis-cli", "wrk"):
        if not shutil.which(tool):
            sys.exit(f"bench/cluster: {tool} missing (apt-get install redis-server wrk)")
    work = tempfile.mkdtemp(prefix="ringx-bench-cluster-")
    script = keys_script(work, args.keys)
    redis, redis_port = start_redis(work)
    rows = []
    t0 = time.time()
    try:
        for rnd in range(rounds):
            for scope in SCOPES:
                p, port, admin = start_ringx(work, scope, redis_port)
                try:
                    lib.run_wrk(port, "/", 50, 1, ["-s", script])  # warm-up
                    sent0, ran0 = sent(admin), redis_calls(redis_port)
                    cpu0 = lib.cpu_ns(lib.proc_tree(p.pid))
                    r = lib.run_wrk(port, "/", 50, secs, ["-s", script])
                    cpu = lib.cpu_ns(lib.proc_tree(p.pid)) - cpu0
                    cmds, ran = sent(admin) - sent0, redis_calls(redis_port) - ran0
                finally:
                    stop(p)
                n = max(r["requests"], 1)
                r.update(scope=scope, round=rnd, cpu_us_per_req=cpu / 1000 / n,
                         redis_commands=cmds, redis_commands_per_req=cmds / n,
                         redis_ran=ran, redis_ran_per_req=ran / n)
                rows.append(r)
                print(f"bench/cluster round {rnd} {scope}: {r['cpu_us_per_req']:.2f} µs/req, "
                      f"{r['rps']:.0f} req/s, {cmds} Redis commands sent "
                      f"({cmds / n:.5f}/req; Redis ran {ran / n:.4f}/req) {r['errors']}",
                      flush=True)
    finally:
        stop(redis)
        shutil.rmtree(work, ignore_errors=True)
    med = {s: statistics.median(r["cpu_us_per_req"] for r in rows if r["scope"] == s)
           for s in SCOPES}
    cl = [r for r in rows if r["scope"] == "cluster"]
    per_req = statistics.median(r["redis_commands_per_req"] for r in cl)
    ran_per_req = statistics.median(r["redis_ran_per_req"] for r in cl)
    summary = {"cpu_us_per_req": med, "cluster_over_local": med["cluster"] / med["local"],
               "redis_commands_per_req_cluster": per_req,
               "redis_ran_per_req_cluster": ran_per_req, "keys": args.keys,
               "rounds": rounds, "duration_s": secs, "elapsed_s": round(time.time() - t0)}
    stem = "cluster" + ("-quick" if args.quick else "")
    lib.write_results(stem, rows, summary=summary)
    print(f"bench/cluster: CPU per request cluster {med['cluster']:.2f} µs, local "
          f"{med['local']:.2f} µs: {summary['cluster_over_local']:.3f}× (target ≤ 1.05×); "
          f"{per_req:.5f} Redis commands sent per request (target ≤ 0.01; Redis ran "
          f"{ran_per_req:.4f} per request inside them)")


if __name__ == "__main__":
    main()
