#!/usr/bin/env python3
"""A/B of two ringx builds by what does not drift with the host: user-space instructions per
request (callgrind) and system calls per request (perf's raw_syscalls:sys_enter), on 64-byte
`return` responses (keep-alive with 50 and 500 connections, a new connection per request, and
HTTP/2 over h2c: 10 connections of 10 streams, by h2load) and on 64-byte proxied responses.

On a shared VM, CPU time per request swings by 10-20% from one minute to the next (other
tenants, steal); instruction and system call counts do not, so a change that must not cost
anything on the request path is shown with them, beside the timed benchmarks
(`http_bench.py --base`, `proxy.py --base`).

Method: one zone on CPU 0 (io_uring), wrk (-t1, 50 or 500 connections) on CPU 1; for the proxy, an nginx
upstream on CPU 1 as in proxy.py. Each build is measured in turn, round after round. For
instructions the server runs under `valgrind --tool=callgrind --instr-atstart=no`, is warmed
up for 2 s, and counts while wrk runs for `--duration` seconds; Ir over the requests wrk
completed. For system calls the server runs natively and `perf stat -e raw_syscalls:sys_enter`
counts its threads while wrk runs. Callgrind counts user space only: the kernel's share (most of
the CPU time of a new connection) shows in the system calls, not in Ir.

HTTP/3 (`h3_return64_c10m100`) and HTTP/2 over TLS on the same listener and certificate
(`h2tls_return64_c10m100`): 10 connections of 100 streams in h2load's shape, bench/h3load
-batch (quic-go, built here) and h2load. Under callgrind their zone runs the epoll engine
(recvmmsg/sendmmsg for QUIC): valgrind did not bring up the io_uring zone's QUIC listener
within a minute, and the user-space work of a request, what callgrind counts, is the same on
both engines. Their system calls are counted on io_uring, as the others'.

Usage: bench/instructions.py --base BIN [--rounds N] [--duration S] [--only WORKLOAD,...]
Writes bench/results/instructions-<date>.json.
"""
import argparse
import datetime
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
import h3  # noqa: E402

BODY = "x" * 64

# name: (proxied to nginx?, connections, extra wrk arguments; for HTTP/2, ["h2", streams])
WORKLOADS = {
    "return64_c50": (False, 50, []),
    "return64_c500": (False, 500, []),
    "close64_c50": (False, 50, ["-H", "Connection: close"]),
    "proxy64_c50": (True, 50, []),
    "h2_return64_c10m10": (False, 10, ["h2", 10]),
    "h3_return64_c10m100": (False, 10, ["h3", 100]),
    "h2tls_return64_c10m100": (False, 10, ["h2tls", 100]),
}

# Set by main() for the TLS workloads: the certificate and key, and bench/h3load.
TLS = {}


def tls_workload(extra):
    return extra[:1] in (["h3"], ["h2tls"])


def load(port, conns, secs, extra):
    """wrk, h2load for an HTTP/2 workload (h2c prior knowledge, or over TLS), or h3load
    -batch for HTTP/3; the requests completed."""
    if extra[:1] == ["h3"]:
        r = h3.h3load(TLS["h3load"], f"https://127.0.0.1:{port}/", conns, extra[1], secs,
                      batch=True)
        if r.get("failed"):
            raise RuntimeError(f"h3load: {r['failed']} requests failed")
        return {"requests": r["succeeded"]}
    if extra[:1] not in (["h2"], ["h2tls"]):
        return lib.run_wrk(port, "/", conns, secs, extra)
    scheme = "https" if extra[0] == "h2tls" else "http"
    cmd = ["taskset", "-c", lib.CLIENT_CPU, "h2load", "-c", str(conns), "-m", str(extra[1]),
           "-t", "1", "-D", str(secs), f"{scheme}://127.0.0.1:{port}/"]
    out = lib.sh(cmd, timeout=secs + 60).stdout
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    if not m or m.group(1) != m.group(2):
        raise RuntimeError(f"h2load gave no clean result: {' '.join(cmd)}\n{out[-2000:]}")
    return {"requests": int(m.group(2))}


def ringx_config(port, upstream=None, tls=False, engine="uring"):
    """One zone; `tls`: the listener serves TLS (h2) and QUIC on TLS["cert"]."""
    loc = (f'proxy_pass = "app"\n  forwarded_headers = false' if upstream
           else f'return = {{ status = 200, body = "{BODY}" }}')
    ups = f'[[upstream]]\nname = "app"\nservers = ["127.0.0.1:{upstream}"]\nkeepalive = 64\n' if upstream else ""
    sec = (f'tls = {{ cert = "{TLS["cert"]}", key = "{TLS["key"]}" }}\nquic = true\n' if tls
           else "")
    return (f'[runtime]\nzones = 1\ncpus = [{lib.SERVER_CPU}]\nengine = "{engine}"\nlog_level = "warn"\n'
            f'[http]\nkeepalive_timeout = "75s"\nkeepalive_requests = 1000000\n{ups}'
            f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n{sec}'
            f'  [[server.location]]\n  path = "/"\n  {loc}\n')


def start_upstream(work):
    port = lib.free_port()
    conf = os.path.join(work, "upstream.conf")
    open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {work}/up.pid; error_log {work}/up-error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_timeout 300s; keepalive_requests 10000000;
  client_body_temp_path {work}/b; proxy_temp_path {work}/p; fastcgi_temp_path {work}/f;
  uwsgi_temp_path {work}/u; scgi_temp_path {work}/s;
  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "{BODY}"; }} }} }}
""")
    p = subprocess.Popen(["taskset", "-c", lib.CLIENT_CPU, lib.nginx_bin(), "-c", conf],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lib.wait_port(port, p)
    return p, port


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait()


def stop_nginx(p):
    """nginx ends its workers on SIGTERM (a SIGKILL of the master leaves them running)."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def instructions(binary, work, tag, upstream, conns, extra, secs):
    port = lib.free_port()
    conf = os.path.join(work, f"{tag}.toml")
    tls = tls_workload(extra)
    open(conf, "w").write(ringx_config(port, upstream, tls, "epoll" if tls else "uring"))
    out = os.path.join(work, f"cg.{tag}.out")
    for f in glob.glob(out + "*"):
        os.remove(f)
    p = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, "valgrind", "--tool=callgrind",
                          "--instr-atstart=no", f"--callgrind-out-file={out}", binary, "serve", "-c", conf],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lib.wait_port(port, p, timeout=60)
        load(port, conns, 2, extra)  # warm-up, not counted
        subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], capture_output=True)
        r = load(port, conns, secs, extra)
        subprocess.run(["callgrind_control", "-i", "off", str(p.pid)], capture_output=True)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], capture_output=True)
        time.sleep(1)
    finally:
        stop(p)
    ir = 0
    for f in glob.glob(out + "*"):
        # A dump has a `summary:` line and a `totals:` line; one of them may be 0.
        counts = [int(m.group(2)) for m in re.finditer(r"^(summary|totals): (\d+)", open(f).read(), re.M)]
        ir += max(counts, default=0)
    return ir / max(r["requests"], 1), r["requests"]


def syscalls(binary, work, tag, upstream, conns, extra, secs):
    port = lib.free_port()
    conf = os.path.join(work, f"{tag}-sys.toml")
    open(conf, "w").write(ringx_config(port, upstream, tls_workload(extra)))
    p = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, binary, "serve", "-c", conf],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lib.wait_port(port, p)
        load(port, conns, 1, extra)
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p", str(p.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)
        r = load(port, conns, secs, extra)
        perf.send_signal(signal.SIGINT)
        err = perf.communicate()[1]
    finally:
        stop(p)
    n = next((int(line.split(",")[0]) for line in err.splitlines()
              if "raw_syscalls" in line and line.split(",")[0].isdigit()), None)
    return (n / max(r["requests"], 1)) if n is not None else None, r["requests"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the other ringx build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=6)
    ap.add_argument("--only", help="comma-separated workloads: " + ", ".join(WORKLOADS))
    args = ap.parse_args()
    wls = args.only.split(",") if args.only else list(WORKLOADS)
    unknown = [w for w in wls if w not in WORKLOADS]
    if unknown:
        sys.exit(f"bench/instructions: unknown workload {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    for tool in ("valgrind", "callgrind_control", "perf", "wrk", "h2load"):
        if not shutil.which(tool):
            sys.exit(f"bench/instructions: {tool} missing (apt-get install valgrind linux-perf wrk)")
    work = tempfile.mkdtemp(prefix="ringx-instr-")
    os.chmod(work, 0o755)
    if any(tls_workload(WORKLOADS[w][2]) for w in wls):
        TLS["h3load"] = h3.h3load_binary(work)
        if not TLS["h3load"]:
            sys.exit(1)
        TLS["cert"], TLS["key"] = lib.ec_cert(work, h3.SNI)
    builds = {"ringx": lib.RINGX, "base": args.base}
    up, up_port = start_upstream(work)
    rows = []
    t0 = time.time()
    try:
        for rnd in range(args.rounds):
            for wl in wls:
                proxied, conns, extra = WORKLOADS[wl]
                upstream = up_port if proxied else None
                for name, binary in builds.items():
                    tag = f"{name}-{wl}-{rnd}"
                    ir, n = instructions(binary, work, tag, upstream, conns, extra, args.duration)
                    sc, n2 = syscalls(binary, work, tag, upstream, conns, extra, args.duration)
                    row = {"workload": wl, "build": name, "round": rnd, "ir_per_req": round(ir, 1),
                           "requests_under_callgrind": n,
                           "syscalls_per_req": None if sc is None else round(sc, 4), "requests": n2}
                    rows.append(row)
                    print(f"{wl:13s} r{rnd} {name:6s} Ir/req={row['ir_per_req']:8.1f} "
                          f"syscalls/req={row['syscalls_per_req']}", flush=True)
    finally:
        stop_nginx(up)
    summary = {}
    for wl in wls:
        s = {}
        for name in builds:
            vals = sorted(r["ir_per_req"] for r in rows if r["workload"] == wl and r["build"] == name)
            scs = sorted(r["syscalls_per_req"] for r in rows if r["workload"] == wl and r["build"] == name
                         and r["syscalls_per_req"] is not None)
            s[name] = {"ir_per_req_median": vals[len(vals) // 2], "ir_min": vals[0], "ir_max": vals[-1],
                       "syscalls_per_req_median": scs[len(scs) // 2] if scs else None}
        s["ir_ratio"] = round(s["ringx"]["ir_per_req_median"] / s["base"]["ir_per_req_median"], 4)
        summary[wl] = s
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "rounds": args.rounds, "duration_s": args.duration, "elapsed_s": round(time.time() - t0, 1),
              "machine": lib.machine(), "versions": lib.versions(), "base": lib.shown(os.path.abspath(args.base)),
              "rows": rows, "summary": summary}
    os.makedirs(lib.RESULTS, exist_ok=True)
    path = os.path.join(lib.RESULTS, f"instructions-{datetime.date.today().isoformat()}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(json.dumps(summary, indent=1))
    print(f"bench/instructions: wrote {path}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
