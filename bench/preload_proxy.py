#!/usr/bin/env python3
"""Short-connection reverse proxying by an unmodified nginx, with and without
libringx_preload.so (issue #25; the Fastsocket seed's nginx-as-proxy measure).

Three network namespaces joined by two veth pairs (bench/steer_proxy.py's test bed):

    client (wrk)  --veth--  proxy: Debian nginx  --veth--  upstream: nginx `return 200`

The proxy is nginx with 2 workers (`worker_cpu_affinity auto`, one on each CPU), `listen ...
reuseport` and `proxy_pass` to the upstream, which closes after each answer
(`keepalive_timeout 0`); two wrk processes, one pinned to each CPU (16 connections each), send
every request on a new connection (`Connection: close`), so each request is one accepted and one
connected TCP connection at the proxy, and the SYNs arrive evenly on both CPUs. Modes:

  plain         nginx alone: the kernel's reuseport hash picks the worker, the kernel's
                port search the upstream connection's source port
  run           `ringx run --cpus 0,1 -- nginx ...`: the library groups the workers' reuseport
                listeners and steers each connection to the worker on the SYN's CPU
  run-software  `ringx run --cpus 0,1 --mode software --rss-table ... --device <upstream veth>`:
                also each upstream connect() gets a source port whose replies the XDP program
                moves to the connecting worker's CPU

Each run gets a fresh test bed (no TIME_WAIT left from the one before); the modes alternate,
round after round. Measured per run: requests/s, wrk's latency, and the proxy's CPU time per
request (every thread of the wrapper, the nginx master and workers, from schedstat; kernel work
done in their context, such as the veth transmit that processes the packets they send,
included; the client's and the upstream's not). Locality: the library's own counters
(`--stats`: listeners steered, table connects, fallbacks), written when nginx exits.

Root only (namespaces, veth, eBPF, XDP); without root it says why and writes nothing.
Writes bench/results/preload-proxy-<date>.json and the section of bench/README.md between
its markers. Usage: bench/preload_proxy.py [--quick] [--rounds N] [--duration S]
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from steer_proxy import RC_IP, U_IP, UP_PORT, PORT, RU_IP, Testbed, _listening, _ns, _wait  # noqa: E402

MODES = ("plain", "run", "run-software")
CONNS = 32


def nginx_conf(path, work, listen, body):
    open(path, "w").write(f"""
worker_processes 2; worker_cpu_affinity auto; daemon off; master_process on;
pid {work}.pid; error_log {work}-error.log warn;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_timeout 0;
  client_body_temp_path {work}-b; proxy_temp_path {work}-p; fastcgi_temp_path {work}-f;
  uwsgi_temp_path {work}-u; scgi_temp_path {work}-s;
  server {{ listen {listen} reuseport backlog=4096; location / {{ {body} }} }} }}
""")


def wrapper(ringx, mode, stats, tb):
    if mode == "plain":
        return []
    w = [ringx, "run", "--cpus", "0,1", "--stats", stats]
    if mode == "run-software":
        w += ["--mode", "software", "--rss-table", f"{RU_IP} {U_IP} {UP_PORT}", "--device", tb.ru]
    return w + ["--"]


def shown_cmd(cmd, work, stats, tb):
    """The command as results record it: no temporary or checkout paths, no test bed names."""
    out = []
    for c in cmd:
        c = c.replace(stats, "STATS").replace(tb.ru, "UPSTREAM_VETH")
        out.append(os.path.basename(c) if c.startswith(work) else lib.shown(c))
    return " ".join(out)


def read_stats(d):
    total = {}
    for f in os.listdir(d):
        if f.startswith("ringx-preload."):
            for line in open(os.path.join(d, f)):
                k, v = line.split()
                total[k] = total.get(k, 0) + int(v)
    return total


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def one_run(ringx, nginx, mode, secs, work, tag):
    """A fresh test bed, one wrk run through the proxy in `mode`."""
    tb = Testbed(tag)
    procs = []
    stats = tempfile.mkdtemp(prefix="ringx-preload-stats-", dir=work)
    os.chmod(stats, 0o777)  # nginx workers run as nobody
    try:
        # Room for the run's upstream connections in TIME_WAIT.
        subprocess.run(_ns(tb.rx, "sysctl", "-qw", "net.ipv4.ip_local_port_range=10000 65000"),
                       check=True)
        up = os.path.join(work, "up")
        nginx_conf(up + ".conf", up, f"{U_IP}:{UP_PORT}", 'return 200 "ok\\n";')
        procs.append(subprocess.Popen(_ns(tb.up, nginx, "-c", up + ".conf", "-e", up + "-error.log"),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: _listening(tb.up, UP_PORT), 10, "the upstream nginx")
        px = os.path.join(work, f"proxy-{mode}")
        nginx_conf(px + ".conf", px, f"{RC_IP}:{PORT}", f"proxy_pass http://{U_IP}:{UP_PORT};")
        log = open(px + ".stderr", "w")
        cmd = [*wrapper(ringx, mode, stats, tb), nginx, "-c", px + ".conf", "-e", px + "-error.log"]
        proxy = subprocess.Popen(_ns(tb.rx, *cmd), stdout=log, stderr=log)
        procs.append(proxy)
        _wait(lambda: _listening(tb.rx, PORT), 10, f"the proxy nginx ({mode})")
        subprocess.run(_ns(tb.cli, "wrk", "-t2", "-c8", "-d1s", "-H", "Connection: close",
                           f"http://{RC_IP}:{PORT}/"), capture_output=True, timeout=30)
        pids = lib.proc_tree(proxy.pid)
        # One wrk per CPU, pinned: veth processes a packet on the CPU that sent it, so each
        # CPU's SYNs come from its own wrk and, steered, go to the worker there. An unpinned
        # wrk -t2 often ran both threads on one CPU, and steering then gave that CPU's worker
        # most of the connections: the throughput measured the scheduler's placement.
        wrk = ["wrk", "-t1", f"-c{CONNS // 2}", f"-d{secs}s", "--latency", "-H",
               "Connection: close", f"http://{RC_IP}:{PORT}/"]
        before = {p: lib.cpu_ns([p]) for p in pids}
        clients = [subprocess.Popen(_ns(tb.cli, "taskset", "-c", str(c), *wrk), text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                   for c in (0, 1)]
        outs = [c.communicate(timeout=secs + 60) for c in clients]
        per = sorted((lib.cpu_ns([p]) - b for p, b in before.items()), reverse=True)
        cpu = sum(per)
        reqs, rps, lats, p99s, errs = 0, 0.0, [], [], []
        for out, err in outs:
            m = re.search(r"(\d+) requests in", out)
            r = re.search(r"Requests/sec:\s+([\d.]+)", out)
            if not m or not r:
                raise RuntimeError(f"wrk gave no result:\n{out}\n{err}")
            reqs, rps = reqs + int(m[1]), rps + float(r[1])
            lat = re.search(r"^\s+Latency\s+(\S+)", out, re.M)
            p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
            lats += [lib.to_ms(lat[1])] if lat else []
            p99s += [lib.to_ms(p99[1])] if p99 else []
            e = re.search(r"Socket errors: (.*)", out)
            n2 = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
            errs += ([e[1]] if e else []) + ([f"non2xx={n2[1]}"] if n2 else [])
        stop(proxy)
        log.close()
        attached = [ln.strip() for ln in open(px + ".stderr") if "ringx" in ln.lower()]
        return {"mode": mode, "requests": reqs, "rps": rps,
                "proxy_cpu_us_per_req": cpu / 1000 / reqs if reqs else None,
                "lat_avg_ms": statistics.mean(lats) if lats else None,
                "lat_p99_ms": max(p99s) if p99s else None,
                "errors": " ".join(errs),
                # The two busiest processes (the workers): how evenly the connections spread.
                "busiest_two_cpu_share": [round(x / cpu, 3) for x in per[:2]] if cpu else None,
                "library": read_stats(stats), "library_log": attached[:6],
                "command": shown_cmd(cmd, work, stats, tb),
                "load": "taskset -c CPU " + " ".join(wrk) + " (one for CPU 0, one for CPU 1)"}
    finally:
        for p in reversed(procs):
            stop(p)
        tb.close()
        shutil.rmtree(stats, ignore_errors=True)


def skip_reason(ringx, nginx, libpath):
    if os.geteuid() != 0:
        return "not root (network namespaces, veth, eBPF, XDP)"
    for tool in ("ip", "nsenter", "wrk", "sysctl", "ss"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-deps.sh)"
    if not nginx:
        return "nginx is not installed (scripts/install-deps.sh)"
    if not os.access(ringx, os.X_OK) or not os.path.isfile(libpath):
        return f"{ringx} or {libpath} missing (make release)"
    if not {0, 1} <= os.sched_getaffinity(0):
        return "needs CPUs 0 and 1"
    return None


def summarise(runs):
    out = {}
    for mode in MODES:
        rs = [r for r in runs if r["mode"] == mode]
        if not rs:
            continue
        s = {}
        for k in ("rps", "proxy_cpu_us_per_req", "lat_avg_ms", "lat_p99_ms"):
            v = [r[k] for r in rs if r[k] is not None]
            if v:
                s[k] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
        lib_tot = {}
        for r in rs:
            for k, v in r["library"].items():
                lib_tot[k] = lib_tot.get(k, 0) + v
        s["library"] = lib_tot
        s["requests"] = sum(r["requests"] for r in rs)
        out[mode] = s
    base = out.get("plain", {})
    for s in out.values():
        for k in ("rps", "proxy_cpu_us_per_req"):
            if k in s and k in base:
                s[k]["ratio_to_plain"] = s[k]["median"] / base[k]["median"]
    return out


def report(result, name):
    s = result["summary"]
    lines = [f"Run of {result['date']} ({result['mode']}, {result['rounds']} rounds × "
             f"{result['duration_s']} s per mode, {result['elapsed_s']:.0f} s in all) on "
             f"{result['machine']['cpu']}, {result['machine']['cores']} cores, kernel "
             f"{result['machine']['kernel']}; {result['versions']['nginx']}, "
             f"{result['versions']['ringx']}, {result['versions']['wrk']}; load average before "
             f"{result['load_avg_before'][0]:.2f}, after {result['load_avg_after'][0]:.2f} (the "
             f"machine is shared). Raw data: `bench/results/preload-proxy-{name}.json`.", "",
             "Median (min–max) over the rounds; **bold**: ratio to plain nginx in the same run.",
             "", "| mode | proxy CPU µs/request | requests/s | mean / p99 ms | library counters |",
             "|---|---|---|---|---|"]
    for mode in MODES:
        v = s.get(mode)
        if not v:
            continue
        c, r = v["proxy_cpu_us_per_req"], v["rps"]
        keys = ("listeners_steered", "listener_claims", "connects_steered", "connects_off_zone",
                "connects_fallback")
        libc = ", ".join(f"{k} {v['library'][k]}" for k in keys if v["library"].get(k)) or "—"
        lines.append(f"| {mode} | {c['median']:.1f} ({c['min']:.1f}–{c['max']:.1f}) "
                     f"**{c['ratio_to_plain']:.2f}×** | {r['median']:.0f} ({r['min']:.0f}–"
                     f"{r['max']:.0f}) **{r['ratio_to_plain']:.2f}×** | "
                     f"{v['lat_avg_ms']['median']:.2f} / {v['lat_p99_ms']['median']:.2f} | {libc} |")
    cmds = sorted({r["command"] for r in result["runs"]})
    lines += ["", "Commands (in the proxy's namespace; `-c` names the run's nginx.conf): " +
              "; ".join(f"`{c}`" for c in cmds) + f". Load: `{result['runs'][0]['load']}` from "
              "the client's namespace. `flock /tmp/ringx-bench.lock make bench-preload-proxy` "
              "runs it all."]
    readme = os.path.join(lib.ROOT, "bench", "README.md")
    txt = open(readme).read()
    begin, end = "<!-- preload-proxy:begin -->", "<!-- preload-proxy:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in txt:
        txt = txt[:txt.index(begin)] + block + txt[txt.index(end) + len(end):]
    else:
        txt += "\n" + block + "\n"
    open(readme, "w").write(txt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    secs = args.duration or (2 if args.quick else 5)
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    libpath = os.path.join(os.path.dirname(lib.RINGX), "libringx_preload.so")
    why = skip_reason(lib.RINGX, nginx, libpath)
    if why:
        print(f"bench/preload_proxy: skipped: {why}")
        return
    load_before, t0, runs = os.getloadavg(), time.time(), []
    work = tempfile.mkdtemp(prefix="ringx-preload-proxy-")
    os.chmod(work, 0o755)
    try:
        for rnd in range(rounds):
            for mode in MODES:
                r = one_run(lib.RINGX, nginx, mode, secs, work, f"p{os.getpid() % 10000}")
                r["round"] = rnd
                runs.append(r)
                print(f"round {rnd} {mode:13s} {r['rps']:>8.0f} req/s  proxy CPU "
                      f"{r['proxy_cpu_us_per_req']:.1f} µs/req  {r['errors']}  {r['library']}",
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "mode": "quick" if args.quick else "full", "rounds": rounds, "duration_s": secs,
              "connections": CONNS, "elapsed_s": round(time.time() - t0, 1),
              "machine": lib.machine(),
              "versions": {"nginx": lib.sh([nginx, "-v"]).stderr.strip(),
                           "ringx": lib.sh([lib.RINGX, "--version"]).stdout.strip(),
                           "wrk": (lib.sh(["wrk", "-v"]).stdout + lib.sh(["wrk", "-v"]).stderr)
                           .splitlines()[0].strip()},
              "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
              "runs": runs, "summary": summarise(runs)}
    os.makedirs(lib.RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "")
    path = os.path.join(lib.RESULTS, f"preload-proxy-{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench/preload_proxy: wrote {lib.shown(path)}")
    if not args.no_report:
        report(result, name)


if __name__ == "__main__":
    main()
