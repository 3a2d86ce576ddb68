#!/usr/bin/env python3
"""Side-by-side benchmark: ringx (io_uring, epoll) against nginx, on one 2-core machine.

Method (../shared/DESIGN.md, "How performance is measured here"): every server is pinned to
CPU 0, the client (wrk or ab) to CPU 1. All peers run at once on their own ports (an idle
server costs nothing) and are measured alternately, A B C A B C ..., so drift hits them
alike. Every figure is reported as a median with min-max over the rounds and as a ratio to
nginx measured in the same run.

Figures per workload and peer:
  cpu_us_per_req  server CPU time (user+sys of every thread, from the CPU counter of a cgroup
                  the server is moved into for the run, v2 cpu.stat or v1 cpuacct.usage, so
                  threads that exit during it, such as io_uring's workers, are counted)
                  divided by the requests served, uncapped run
  rps             requests/s, uncapped
  capped_rps      requests/s with the server limited to 40% of one core (cgroup CPU quota)
  lat_avg_ms / lat_p99_ms   from wrk --latency (closed loop) or ab -c1 (one connection)

Usage: bench/run.py [--quick] [--rounds N] [--duration S] [--only WORKLOAD,...]
Writes bench/results/<date>.json and regenerates the results part of bench/README.md and the
charts in bench/results/.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
RINGX = os.environ.get("RINGX_BIN", os.path.join(ROOT, "target", "release", "ringx"))
CAP_PCT = 40
SERVER_CPU = "0"
CLIENT_CPU = "1"

BODY64 = "0123456789abcdef" * 4
BODY1K = ("0123456789abcdef" * 64)

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
# A reference, not a competitor: the minimal io_uring responder of ../shared/tools (no
# parsing, a canned 64-byte reply, no Date header), built from there at run time, on the
# keep-alive 64-byte workloads it can serve. It marks what is reachable on this machine in
# the same run, so a target below it shows as such.
YARDSTICK = "yardstick"
YARDSTICK_SRC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                                              "tools", "limit_server.c"))
YARDSTICK_WLS = ("ka64_c50", "ka64_c500")  # ab -k needs a Connection: keep-alive header it never sends


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Cgroup:
    """A cgroup for the CPU cap and the CPU meter: v2 if mounted at /sys/fs/cgroup; else v1,
    where the cap is in the cpu hierarchy and the meter (cpuacct.usage) in the cpuacct one,
    which may be mounted with it ("cpu,cpuacct") or apart."""

    def __init__(self, name):
        self.acct_root = self.acct_dir = None
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            self.root = "/sys/fs/cgroup"
            self.dir = f"{self.root}/{name}"
            os.makedirs(self.dir, exist_ok=True)
            try:
                open(f"{self.root}/cgroup.subtree_control", "w").write("+cpu")
            except OSError:
                pass
            self.v2 = True
        else:
            self.root = "/sys/fs/cgroup/cpu"
            self.dir = f"{self.root}/{name}"
            os.makedirs(self.dir, exist_ok=True)
            self.v2 = False
            acct = "/sys/fs/cgroup/cpuacct"
            if os.path.exists(f"{self.dir}/cpuacct.usage"):
                pass  # co-mounted: the same directory counts
            elif os.path.exists(f"{acct}/cpuacct.usage"):
                self.acct_root, self.acct_dir = acct, f"{acct}/{name}"
                os.makedirs(self.acct_dir, exist_ok=True)

    def cap(self, pct):
        period = 100000
        quota = period * pct // 100
        if self.v2:
            open(f"{self.dir}/cpu.max", "w").write(f"{quota} {period}")
        else:
            open(f"{self.dir}/cpu.cfs_period_us", "w").write(str(period))
            open(f"{self.dir}/cpu.cfs_quota_us", "w").write(str(quota))

    def usage_ns(self):
        """CPU time of every task that ran in the cgroup, exited ones included (None where the
        hierarchy has no such counter)."""
        try:
            if self.v2:
                for line in open(f"{self.dir}/cpu.stat"):
                    k, _, v = line.partition(" ")
                    if k == "usage_usec":
                        return int(v) * 1000
                return None
            return int(open(f"{self.acct_dir or self.dir}/cpuacct.usage").read())
        except (OSError, ValueError):
            return None

    def move(self, pids, into=True):
        pairs = [(self.dir, self.root)]
        if self.acct_dir:
            pairs.append((self.acct_dir, self.acct_root))
        for d, root in pairs:
            target = d if into else root
            for p in pids:
                try:
                    open(f"{target}/cgroup.procs", "w").write(str(p))
                except OSError as e:
                    raise RuntimeError(f"cannot move {p} to {target}: {e}")

    def remove(self):
        for d in (self.dir, self.acct_dir):
            if d:
                try:
                    os.rmdir(d)
                except OSError:
                    pass


def proc_tree(pid):
    """pid and its descendants."""
    out = [pid]
    try:
        kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        kids = []
    for k in kids:
        out += proc_tree(int(k))
    return out


def cpu_ns(pids):
    """On-CPU time of every thread of `pids` (schedstat: ns, exact, includes kernel work done
    in the task's context such as io_uring task work)."""
    total = 0
    for p in pids:
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                try:
                    total += int(open(f"/proc/{p}/task/{t}/schedstat").read().split()[0])
                except OSError:
                    pass
        except OSError:
            pass
    return total


class Server:
    def __init__(self, name, workdir, docroot):
        self.name = name
        self.port = free_port()
        self.proc = None
        self.workdir = workdir
        self.docroot = docroot

    def start(self):
        if self.name == YARDSTICK:
            self.log = open(os.path.join(self.workdir, "yardstick.log"), "w")
            self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, self.binary, str(self.port)],
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
            cmd = ["taskset", "-c", SERVER_CPU, RINGX, "serve", "-c", conf]
        self.log = open(os.path.join(self.workdir, f"{self.name}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        wait_port(self.port, self.proc)
        if self.name.startswith("ringx"):
            time.sleep(0.2)
            txt = open(os.path.join(self.workdir, f"{self.name}.log")).read()
            if "using the epoll driver" in txt and self.name == "ringx-uring":
                raise RuntimeError("ringx-uring fell back to epoll: " + txt)

    def pids(self):
        return proc_tree(self.proc.pid)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name.startswith("ringx") else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def build_yardstick(work):
    """Compiles ../shared/tools/limit_server.c (liburing); returns its path, or None with the
    reason printed."""
    if not os.path.exists(YARDSTICK_SRC):
        print(f"bench: no yardstick ({YARDSTICK_SRC} not found): its rows are left out", flush=True)
        return None
    out = os.path.join(work, "limit_server")
    r = sh(["gcc", "-O2", "-o", out, YARDSTICK_SRC, "-luring"])
    if r.returncode != 0:
        print(f"bench: no yardstick (gcc failed: {r.stderr.strip()[:300]}): its rows are left out", flush=True)
        return None
    return out


def nginx_bin():
    return shutil.which("nginx") or "/usr/sbin/nginx"


def to_ms(v):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", v)
    if not m:
        return None
    x, u = float(m.group(1)), m.group(2)
    return x / 1000 if u == "us" else x if u == "ms" else x * 1000 if u == "s" else x * 60000


def run_wrk(port, path, conns, secs, extra):
    cmd = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{conns}", f"-d{secs}s", "--latency", *extra,
           f"http://127.0.0.1:{port}{path}"]
    res = sh(cmd, timeout=secs + 30)
    out = res.stdout
    m = re.search(r"(\d+) requests in", out)
    if not m:
        raise RuntimeError(f"wrk gave no result: {' '.join(cmd)}\n{out}\n{res.stderr}")
    reqs = int(m.group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = re.search(r"Latency\s+(\S+)", out)
    p99 = re.search(r"99%\s+(\S+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"requests": reqs, "rps": rps, "lat_avg_ms": to_ms(lat.group(1)) if lat else None,
            "lat_p99_ms": to_ms(p99.group(1)) if p99 else None,
            "errors": (errors.group(1) if errors else "") + (f" non2xx={non2xx.group(1)}" if non2xx else ""),
            "cmd": " ".join(cmd)}


def run_ab(port, path, n):
    csv = tempfile.mktemp(prefix="ringx-ab-", suffix=".csv")
    cmd = ["taskset", "-c", CLIENT_CPU, "ab", "-q", "-n", str(n), "-c", "1", "-k", "-e", csv, f"http://127.0.0.1:{port}{path}"]
    out = sh(cmd, timeout=120).stdout
    p99 = None
    try:
        for line in open(csv):
            k, _, v = line.strip().partition(",")
            if k == "99":
                p99 = float(v)
        os.unlink(csv)
    except (OSError, ValueError):
        pass
    reqs = int(re.search(r"Complete requests:\s+(\d+)", out).group(1))
    failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    rps = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
    # At one connection the mean time per request is the inverse of the rate; ab prints it
    # rounded to microseconds, so it is computed from the rate instead. p99 from ab's -e table.
    mean = 1000.0 / rps
    return {"requests": reqs, "rps": rps, "lat_avg_ms": mean, "lat_p99_ms": p99,
            "errors": f"failed={failed}" if failed else "", "cmd": " ".join(cmd)}


METER_FALLBACK = False


def server_cpu_ns(pids, cg):
    """The server's CPU time so far: from the cgroup it was moved into (exited threads
    included), else the sum over its live threads."""
    n = cg.usage_ns() if cg is not None else None
    if n is None:
        global METER_FALLBACK
        if not METER_FALLBACK:
            print("bench: no cgroup CPU counter here; summing live threads' schedstat "
                  "(threads that exit during a run are missed)", file=sys.stderr)
        METER_FALLBACK = True
        return cpu_ns(pids)
    return n


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


def versions():
    v = {}
    v["nginx"] = sh([nginx_bin(), "-v"]).stderr.strip()
    v["ringx"] = sh([RINGX, "--version"]).stdout.strip()
    v["wrk"] = (sh(["wrk", "-v"]).stdout + sh(["wrk", "-v"]).stderr).splitlines()[0].strip()
    v["ab"] = sh(["ab", "-V"]).stdout.splitlines()[0].strip()
    v["rustc"] = sh(["rustc", "--version"]).stdout.strip()
    return v


def host_speed(samples=7):
    """Time of a fixed busy loop on the server's CPU, `samples` times: a shared VM's host can
    slow a vCPU by a third for seconds at a time with no steal time showing. The spread says
    how much absolute numbers in this run can drift; alternating the peers is what keeps the
    ratios fair under it."""
    code = "import time\nt=time.perf_counter()\ns=0\nfor i in range(400000): s+=i\nprint(time.perf_counter()-t)"
    ms = []
    for _ in range(samples):
        out = subprocess.run(["taskset", "-c", SERVER_CPU, sys.executable, "-c", code],
                             capture_output=True, text=True).stdout
        ms.append(float(out) * 1000)
    return {"loop_ms_min": round(min(ms), 2), "loop_ms_max": round(max(ms), 2),
            "spread": round(max(ms) / min(ms), 2)}


def machine():
    cpu = ""
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = open("/proc/meminfo").readline().split()[1]
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_kib": int(mem), "kernel": platform.release(),
            "hostname_kind": "2-core VM (client and server share it)"}


def summarise(rows, workloads=None, peers=None, bases=("nginx",)):
    """Median and min-max per workload, peer and metric, with `ratio_to_<base>` for each base
    peer measured in the same run. Shared with bench/proxy.py."""
    summary = {}
    metrics = ["cpu_us_per_req", "rps", "capped_rps", "lat_avg_ms", "lat_p99_ms"]
    for wl in workloads or WORKLOADS:
        summary[wl] = {}
        for peer in peers or PEERS + [YARDSTICK]:
            rs = [r for r in rows if r["workload"] == wl and r["peer"] == peer]
            if not rs:
                continue
            summary[wl][peer] = {}
            for m in metrics:
                vals = [r[m] for r in rs if r.get(m) is not None]
                if vals:
                    summary[wl][peer][m] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}
        for b in bases:
            base = summary[wl].get(b, {})
            for peer, ms in summary[wl].items():
                for m, s in ms.items():
                    if m in base and base[m]["median"]:
                        s[f"ratio_to_{b}"] = s["median"] / base[m]["median"]
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 rounds of 1 s: a smoke run in under 2 minutes")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--only", help="comma-separated workloads")
    ap.add_argument("--no-report", action="store_true", help="do not rewrite bench/README.md")
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
    servers = {p: Server(p, work, docroot) for p in PEERS}
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
                           if METER_FALLBACK else
                           "CPU usage of a cgroup the server's processes are moved into for each run "
                           "(v2 cpu.stat usage_usec, v1 cpuacct.usage): exited threads included"),
                   "workloads": {k: v[4] for k, v in WORKLOADS.items()}},
        "rows": rows,
        "summary": summarise(rows),
    }
    os.makedirs(RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "")
    path = os.path.join(RESULTS, f"{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench: wrote {path} in {elapsed:.0f} s")
    if not args.no_report:
        import report
        report.write(result, name)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
