#!/usr/bin/env python3
"""Echo benchmark: ringx's echo server (io_uring and epoll drivers) against Go netpoll, on one
2-core machine, the way bench/http_bench.py measures HTTP.

Protocol (the netpoll benchmark's): each message is a 4-byte big-endian length and that many
bytes; the server answers with a new message framed the same way. Payload 1 KB.

Method (../shared/DESIGN.md, "How performance is measured here"): every server is pinned to
CPU 0, the load generator (bench/echo/load, one thread, epoll) to CPU 1. All peers run at once
on their own ports and are measured alternately, A B C A B C ..., over the rounds, so drift
hits them alike. Figures are medians with min-max over the rounds and ratios to ringx-epoll
(and to go-netpoll) measured in the same run.

Figures per workload (connection count) and peer:
  msgs_per_s          echoes/s, closed loop (one message in flight per connection), uncapped
  capped_msgs_per_s   the same with the server limited to 40% of one core (cgroup CPU quota)
  cpu_us_per_msg      server CPU (user+sys, every thread, /proc/PID/task/*/schedstat) per echo,
                      uncapped run
  msgs_per_cpu_s      echoes per second of server CPU, uncapped run (1e6 / cpu_us_per_msg);
                      capped_msgs_per_cpu_s the same in the capped run: the comparison "at
                      equal server CPU"
  syscalls_per_msg    server system calls per echo (perf stat -e raw_syscalls:sys_enter -p PID
                      over a separate 1 s uncapped run, so that the tracepoint's cost stays out
                      of cpu_us_per_msg; None if the tracepoint is unavailable)
  p50/p99/p999_us     latency in an open-loop run at a fixed rate, the same for every peer of a
                      workload: 50% of the slowest peer's median uncapped throughput; measured
                      from the scheduled send time (no coordinated omission)
  lat_cpu_us_per_msg  server CPU per echo in that fixed-rate run (no perf attached)

Usage: bench/echo.py [--quick] [--rounds N] [--duration S] [--only c10,c100,...]
Writes bench/results/echo-<date>[-quick].json, charts bench/results/echo-<date>-*.png and
bench/echo/README.md. Needs root (cgroup), Go (builds bench/echo/ into a temporary dir), gcc and
liburing (the yardsticks in bench/echo/yardstick/); `make deps` installs them.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from lib import Cgroup, cpu_ns, proc_tree, free_port, wait_port, sh, machine, host_speed, shown  # noqa: E402

ROOT = os.path.dirname(HERE)
ECHO = os.path.join(HERE, "echo")
RESULTS = os.path.join(HERE, "results")
RINGX = os.environ.get("RINGX_BIN", os.path.join(ROOT, "target", "release", "ringx"))
CAP_PCT = 40
SERVER_CPU = "0"
CLIENT_CPU = "1"
SIZE = 1024
LAT_FRACTION = 0.5

# name -> (connections, description)
WORKLOADS = {
    "c10": (10, "1 KB echo, 10 connections"),
    "c100": (100, "1 KB echo, 100 connections"),
    "c500": (500, "1 KB echo, 500 connections"),
    "c1000": (1000, "1 KB echo, 1000 connections"),
}
PEERS = ["ringx-epoll", "ringx-uring", "go-netpoll", "ringx-sqpoll", "min-uring", "min-epoll"]
# The two `min-` peers are yardsticks, not products: bench/echo/yardstick/*.c, a few dozen lines
# of C each that echo the bytes back with no framing work, one on io_uring (multishot receive
# from a provided-buffer ring, DEFER_TASKRUN, as ringx) and one on epoll (read, write). Their
# ratio is what io_uring itself gains over epoll on this machine for this workload, whatever a
# server built on it does.
YARDSTICKS = {"min-uring": ("uring_echo.c", ["-luring"]), "min-epoll": ("epoll_echo.c", [])}
BASE = "ringx-epoll"
METRICS = ["msgs_per_s", "capped_msgs_per_s", "cpu_us_per_msg", "msgs_per_cpu_s", "capped_msgs_per_cpu_s",
           "syscalls_per_msg", "p50_us", "p99_us", "p999_us", "lat_cpu_us_per_msg"]


def build_go(outdir):
    """Builds the netpoll server and the load generator; returns {name: path}."""
    bins = {}
    for pkg in ("netpoll-server", "load"):
        dst = os.path.join(outdir, pkg)
        r = sh(["go", "build", "-trimpath", "-o", dst, f"./{pkg}"], cwd=ECHO)
        if r.returncode != 0:
            raise RuntimeError(f"go build ./{pkg} failed:\n{r.stdout}{r.stderr}")
        bins[pkg] = dst
    for name, (src, libs) in YARDSTICKS.items():
        dst = os.path.join(outdir, name)
        r = sh(["gcc", "-O2", "-o", dst, os.path.join(ECHO, "yardstick", src)] + libs)
        if r.returncode != 0:
            raise RuntimeError(f"gcc {src} failed:\n{r.stdout}{r.stderr}")
        bins[name] = dst
    return bins


SQPOLL_IDLE_S = 0.1  # ringx echo's default --sqpoll-idle-ms
# "Zero system calls in steady state" needs the SQ thread on a core of its own and a zone that
# polls its completion queue instead of sleeping. This 2-core machine has no spare core, so the
# steady-state count is taken from a separate server, used only for that count: SQ thread on
# the client's CPU, zone polling up to 10 ms. Its throughput and CPU are not comparable (it
# spins two cores) and are not reported.
STEADY = "ringx-sqpoll-steady"
STEADY_SPIN_US = 10000


def settle(peer):
    """The SQPOLL peer's kernel thread keeps polling CPU 0 for its idle time after its run;
    measuring the next peer before it sleeps would charge that peer with the SQ thread's
    spinning (seen as millisecond p99s on whichever peer came next). Wait it out."""
    if PEERS.index(peer) > 0 and PEERS[PEERS.index(peer) - 1] == "ringx-sqpoll" or peer == PEERS[0]:
        time.sleep(SQPOLL_IDLE_S * 3)


class Server:
    def __init__(self, name, workdir, bins):
        self.name, self.workdir, self.bins = name, workdir, bins
        self.port = free_port()
        self.proc = None

    def cmd(self):
        addr = f"127.0.0.1:{self.port}"
        if self.name in YARDSTICKS:
            return ["taskset", "-c", SERVER_CPU, self.bins[self.name], addr]
        if self.name == "go-netpoll":
            return ["taskset", "-c", SERVER_CPU, self.bins["netpoll-server"], "-addr", addr]
        if self.name == STEADY:
            return ["taskset", "-c", SERVER_CPU, RINGX, "echo", "--listen", addr, "--zones", "1",
                    "--cpus", SERVER_CPU, "--engine", "uring", "--sqpoll", "--sqpoll-cpu", CLIENT_CPU,
                    "--sqpoll-spin-us", str(STEADY_SPIN_US)]
        if self.name == "ringx-sqpoll":
            # io_uring with a kernel SQ thread on the server's CPU (its time counts as the
            # server's: it is a thread of the process).
            return ["taskset", "-c", SERVER_CPU, RINGX, "echo", "--listen", addr, "--zones", "1",
                    "--cpus", SERVER_CPU, "--engine", "uring", "--sqpoll", "--sqpoll-cpu", SERVER_CPU]
        engine = self.name.split("-")[1]
        return ["taskset", "-c", SERVER_CPU, RINGX, "echo", "--listen", addr, "--zones", "1",
                "--cpus", SERVER_CPU, "--engine", engine]

    def start(self):
        self.logpath = os.path.join(self.workdir, f"{self.name}.log")
        self.log = open(self.logpath, "w")
        env = dict(os.environ, GOMAXPROCS="1")
        self.proc = subprocess.Popen(self.cmd(), stdout=self.log, stderr=self.log, env=env)
        wait_port(self.port, self.proc)
        time.sleep(0.2)
        if self.name in ("ringx-uring", "ringx-sqpoll", STEADY) and "using the epoll driver" in open(self.logpath).read():
            raise RuntimeError("ringx-uring fell back to epoll: " + open(self.logpath).read())

    def pids(self):
        return proc_tree(self.proc.pid)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Perf:
    """perf stat counting the raw_syscalls:sys_enter tracepoint of the server's threads."""

    def __init__(self, pids, workdir):
        self.out = os.path.join(workdir, "perf.txt")
        self.proc = subprocess.Popen(["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-o", self.out,
                                      "-p", ",".join(map(str, pids))],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # let it attach; the server is idle meanwhile

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            for line in open(self.out):
                f = line.strip().split(",")
                if len(f) > 2 and f[2].startswith("raw_syscalls:sys_enter"):
                    return int(f[0]) if f[0].isdigit() else None
        except OSError:
            pass
        return None


def perf_works(workdir):
    p = subprocess.Popen([sys.executable, "-c", "import os, time\nwhile True:\n    os.getppid()\n    time.sleep(0.001)"])
    try:
        pf = Perf([p.pid], workdir)
        n = pf.stop()
        return n is not None
    finally:
        p.kill()
        p.wait()


def run_load(bins, server, conns, secs, rate, cg=None, perf_dir=None):
    """One load-generator run against `server`; returns the generator's JSON plus server CPU
    (and syscalls if perf_dir) over exactly the measured traffic."""
    cmd = ["taskset", "-c", CLIENT_CPU, bins["load"], "-addr", f"127.0.0.1:{server.port}", "-conns", str(conns),
           "-size", str(SIZE), "-duration", f"{int(secs * 1000)}ms", "-rate", str(rate), "-handshake"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = server.pids()
    moved, perf = False, None
    try:
        line = p.stdout.readline()
        if line.strip() != "ready":
            p.wait(5)
            raise RuntimeError(f"load generator failed: {' '.join(cmd)}\n{line}{p.stderr.read()}")
        if cg:
            cg.move(pids, True)
            moved = True
        if perf_dir:
            perf = Perf(pids, perf_dir)
        c0 = cpu_ns(pids)
        p.stdin.write("go\n")
        p.stdin.flush()
        line = p.stdout.readline()
        c1 = cpu_ns(pids)
        syscalls = perf.stop() if perf else None
        perf = None
        if not line.startswith("{"):
            p.wait(5)
            raise RuntimeError(f"load generator failed: {' '.join(cmd)}\n{line}{p.stderr.read()}")
        r = json.loads(line)
        p.stdin.write("bye\n")
        p.stdin.flush()
        p.wait(30)
    finally:
        if perf:
            perf.stop()
        if moved:
            cg.move(pids, False)
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode != 0:
        raise RuntimeError(f"load generator exited {p.returncode}: {p.stderr.read()}")
    n = max(r["messages"], 1)
    r["cpu_ns"] = c1 - c0
    r["cpu_us_per_msg"] = (c1 - c0) / 1000 / n
    r["msgs_per_cpu_s"] = n / ((c1 - c0) / 1e9) if c1 > c0 else None
    r["syscalls"] = syscalls
    r["syscalls_per_msg"] = syscalls / n if syscalls is not None else None
    r["cmd"] = " ".join(cmd[:-1])
    return r


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def versions(bins):
    v = {"ringx": sh([RINGX, "--version"]).stdout.strip(),
         "go": sh(["go", "version"]).stdout.strip(),
         "rustc": sh(["rustc", "--version"]).stdout.strip(),
         "perf": sh(["perf", "--version"]).stdout.strip()}
    mods = sh(["go", "list", "-m", "all"], cwd=ECHO).stdout
    for m in ("github.com/cloudwego/netpoll", "github.com/HdrHistogram/hdrhistogram-go", "golang.org/x/sys"):
        for line in mods.splitlines():
            if line.startswith(m + " "):
                v[m] = line.split()[1]
    return v


def summarise(rows, wls):
    summary = {}
    for wl in wls:
        summary[wl] = {}
        for peer in PEERS:
            rs = [r for r in rows if r["workload"] == wl and r["peer"] == peer]
            if not rs:
                continue
            summary[wl][peer] = {}
            for m in METRICS:
                vals = [r[m] for r in rs if r.get(m) is not None]
                if vals:
                    summary[wl][peer][m] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                                            "n": len(vals)}
        for ref, key in ((BASE, "ratio_to_epoll"), ("go-netpoll", "ratio_to_netpoll")):
            base = summary[wl].get(ref, {})
            for peer, ms in summary[wl].items():
                for m, s in ms.items():
                    if m in base and base[m]["median"]:
                        s[key] = s["median"] / base[m]["median"]
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 rounds of 1 s: a smoke run")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int, help="seconds per run")
    ap.add_argument("--only", help="comma-separated workloads (" + ",".join(WORKLOADS) + ")")
    ap.add_argument("--no-perf", action="store_true", help="do not count syscalls")
    ap.add_argument("--no-report", action="store_true", help="do not rewrite bench/echo/README.md")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    secs = args.duration or (1 if args.quick else 3)
    perf_secs = 0.5 if args.quick else 1
    wls = args.only.split(",") if args.only else list(WORKLOADS)
    if os.geteuid() != 0:
        sys.exit("bench: needs root (cgroup CPU cap)")
    if not os.path.exists(RINGX):
        sys.exit(f"bench: {RINGX} missing: run `make release`")
    work = tempfile.mkdtemp(prefix="ringx-echo-bench-")
    started = time.time()
    load_before = os.getloadavg()
    speed_before = host_speed()
    bins = build_go(work)
    use_perf = not args.no_perf and shutil.which("perf") and perf_works(work)
    if not args.no_perf and not use_perf:
        print("bench: perf raw_syscalls:sys_enter unavailable: syscalls_per_msg will be None", flush=True)
    cg = Cgroup("ringx-echo-bench-cap")
    cg.cap(CAP_PCT)
    servers = {p: Server(p, work, bins) for p in PEERS}
    if use_perf:
        servers[STEADY] = Server(STEADY, work, bins)
    rows, rates, steady = [], {}, {}
    try:
        for s in servers.values():
            s.start()
        for wl in wls:
            conns = WORKLOADS[wl][0]
            wrows = []
            # Throughput: uncapped (CPU, syscalls) then capped, alternating peers each round.
            for rnd in range(rounds):
                for peer in PEERS:
                    settle(peer)
                    s = servers[peer]
                    u = run_load(bins, s, conns, secs, 0)
                    c = run_load(bins, s, conns, secs, 0, cg=cg)
                    # Syscalls in a run of their own: the tracepoint costs the server CPU, and
                    # more so the more syscalls it makes, so it stays out of cpu_us_per_msg.
                    sc = run_load(bins, s, conns, perf_secs, 0, perf_dir=work) if use_perf else None
                    row = {"workload": wl, "peer": peer, "round": rnd, "conns": conns,
                           "msgs_per_s": u["msgs_per_s"], "messages": u["messages"],
                           "cpu_us_per_msg": u["cpu_us_per_msg"], "msgs_per_cpu_s": u["msgs_per_cpu_s"],
                           "syscalls_per_msg": sc["syscalls_per_msg"] if sc else None,
                           "perf_cpu_us_per_msg": sc["cpu_us_per_msg"] if sc else None,
                           "perf_cmd": f"perf stat -e raw_syscalls:sys_enter -p PID + {sc['cmd']}" if sc else None,
                           "closed_p50_us": u["p50_us"], "closed_p99_us": u["p99_us"],
                           "capped_msgs_per_s": c["msgs_per_s"], "capped_msgs_per_cpu_s": c["msgs_per_cpu_s"],
                           "capped_cpu_us_per_msg": c["cpu_us_per_msg"],
                           "cmd": u["cmd"], "capped_cmd": f"cgroup cpu quota {CAP_PCT}% + " + c["cmd"]}
                    for r, what in ((u, "uncapped"), (c, "capped")):
                        if r["unanswered"]:
                            raise RuntimeError(f"{peer} on {wl} ({what}): {r['unanswered']} messages unanswered")
                    wrows.append(row)
                    spm = row["syscalls_per_msg"]
                    print(f"{wl:6s} r{rnd} {peer:12s} msgs/s={row['msgs_per_s']:>9.0f} cpu/msg={row['cpu_us_per_msg']:6.2f}us "
                          f"capped={row['capped_msgs_per_s']:>9.0f} sys/msg={'-' if spm is None else f'{spm:.3f}'}",
                          flush=True)
            if use_perf:
                # SQPOLL's steady state (see STEADY): syscalls only, after a warm-up run.
                time.sleep(SQPOLL_IDLE_S * 3)
                run_load(bins, servers[STEADY], conns, perf_secs, 0)
                steady[wl] = [run_load(bins, servers[STEADY], conns, perf_secs, 0, perf_dir=work)["syscalls_per_msg"]
                              for _ in range(rounds)]
                print(f"{wl:6s} {STEADY} syscalls/msg {' '.join(f'{x:.4f}' for x in steady[wl])}", flush=True)
                time.sleep(SQPOLL_IDLE_S * 3)
            # Latency at a fixed rate below saturation, the same for every peer.
            slowest = min(med([r["msgs_per_s"] for r in wrows if r["peer"] == p]) for p in PEERS)
            rate = float(f"{slowest * LAT_FRACTION:.2g}")
            rates[wl] = rate
            for rnd in range(rounds):
                for peer in PEERS:
                    settle(peer)
                    r = run_load(bins, servers[peer], conns, secs, rate)
                    row = next(x for x in wrows if x["peer"] == peer and x["round"] == rnd)
                    row.update({"lat_rate": rate, "p50_us": r["p50_us"], "p99_us": r["p99_us"],
                                "p999_us": r["p999_us"], "lat_max_us": r["max_us"],
                                "lat_cpu_us_per_msg": r["cpu_us_per_msg"], "lat_unanswered": r["unanswered"],
                                "send_lag_p99_us": r.get("send_lag_p99_us"), "lat_cmd": r["cmd"]})
                    print(f"{wl:6s} r{rnd} {peer:12s} rate={rate:.0f}/s p50={r['p50_us']:.0f}us p99={r['p99_us']:.0f}us "
                          f"p999={r['p999_us']:.0f}us cpu/msg={r['cpu_us_per_msg']:.2f}us", flush=True)
            rows += wrows
    finally:
        for s in servers.values():
            s.stop()
        cg.remove()
    elapsed = time.time() - started
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "rounds": rounds, "duration_s": secs, "cap_pct": CAP_PCT, "size": SIZE,
        "elapsed_s": round(elapsed, 1),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        "host_speed": {"before": speed_before, "after": host_speed()},
        "machine": machine(), "versions": versions(bins),
        "method": {"server_cpu": SERVER_CPU, "client_cpu": CLIENT_CPU,
                   "cpu": "sum of /proc/PID/task/*/schedstat run time over the server's threads",
                   "syscalls": (f"perf stat -e raw_syscalls:sys_enter -p PID over a separate uncapped closed-loop run "
                                f"of {perf_secs} s (perf_cpu_us_per_msg: the server CPU per echo under perf)")
                   if use_perf else None,
                   "latency_rate": f"{LAT_FRACTION:.0%} of the slowest peer's median uncapped msgs/s, open loop",
                   "servers": {p: shown(" ".join(servers[p].cmd()).replace(work, "$TMP")) for p in PEERS},
                   "workloads": {k: v[1] for k, v in WORKLOADS.items()}},
        "latency_rates": rates,
        "sqpoll_steady": {"server": shown(" ".join(servers[STEADY].cmd()).replace(work, "$TMP")) if STEADY in servers else None,
                          "syscalls_per_msg": steady,
                          "median": {wl: med(v) for wl, v in steady.items()}},
        "rows": rows,
        "summary": summarise(rows, wls),
    }
    os.makedirs(RESULTS, exist_ok=True)
    name = "echo-" + datetime.date.today().isoformat() + ("-quick" if args.quick else "")
    path = os.path.join(RESULTS, f"{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench: wrote {path} in {elapsed:.0f} s")
    if not args.no_report:
        write_report(result, name)
    shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------- report

PEER_COLORS = {"ringx-epoll": "#c9a227", "ringx-uring": "#c0392b", "go-netpoll": "#4d7ea8", "ringx-sqpoll": "#8e44ad",
               "min-uring": "#e8a09a", "min-epoll": "#e3d49a"}
CHARTS = [
    ("capped_msgs_per_s", f"echoes/s, server capped at {CAP_PCT}% of a core (higher is better)"),
    ("msgs_per_cpu_s", "echoes per server CPU-second, uncapped (higher is better)"),
    ("cpu_us_per_msg", "server CPU µs per echo (lower is better)"),
    ("syscalls_per_msg", "server syscalls per echo (lower is better)"),
    ("p99_us", "p99 latency µs at a fixed rate (lower is better)"),
    ("msgs_per_s", "echoes/s uncapped, client-bound (higher is better)"),
]


def fmt(s, m, ratio="ratio_to_epoll"):
    if m not in s:
        return "–"
    v = s[m]
    digits = 3 if v["median"] < 1 else 2 if v["median"] < 100 else 0
    txt = f"{v['median']:,.{digits}f} ({v['min']:,.{digits}f}–{v['max']:,.{digits}f})"
    if ratio and ratio in v:
        txt += f" **{v[ratio]:.2f}×**"
    return txt


def charts(result, name):
    from report import bar_charts
    return bar_charts(result["summary"], name, CHARTS, {p: PEER_COLORS[p] for p in PEERS})


INTRO = """# Echo benchmark: ringx (io_uring, epoll) against Go netpoll

`bench/echo.py` (`make bench-echo`, `BENCH_ARGS=--quick` for a smoke run; how long each takes
is in [bench/README.md](../README.md); root, Go and perf needed). The method is
[bench/README.md](../README.md)'s (the design brief's "How performance is measured here"), as
`bench/http_bench.py` applies it to HTTP.

- **Protocol** (the netpoll benchmark's): a message is a 4-byte big-endian length and that many
  bytes; the server answers with a new message framed the same way. Payload 1 KB.
- **Peers**: `ringx echo --engine epoll`, `ringx echo --engine uring` (one zone on CPU 0), and
  [`netpoll-server/`](netpoll-server/main.go), a `github.com/cloudwego/netpoll` server that
  decodes, copies and re-encodes each message as the netpoll benchmark's handler does
  (GOMAXPROCS=1, one poller loop). Every server is pinned to CPU 0. `ringx-sqpoll` is
  `--engine uring --sqpoll` with its kernel SQ thread on CPU 0 too (its time counts: it is a
  thread of the process) and a 50 µs completion-queue poll before sleeping.
- **Yardsticks** `min-uring` and `min-epoll`: [`yardstick/`](yardstick/), 83 and 122 lines of C
  each, compiled by the harness. They echo the received bytes back with no framing work: one
  with io_uring as ringx uses it (multishot receive from a provided-buffer ring,
  DEFER_TASKRUN, one send in flight per connection), one with level-triggered epoll, `read`
  and `write`. `min-uring` against `min-epoll` is what io_uring itself gains over epoll for
  this workload on this machine, before any server design; the summary table shows it.
- **SQPOLL steady state**: zero system calls needs the SQ thread on a core of its own and a
  zone that polls its completion queue rather than sleeping. This machine has no third core,
  so that count comes from a separate server used for nothing else (`--sqpoll-cpu 1`, the
  client's CPU, and `--sqpoll-spin-us 10000`): syscalls per echo over the same 1 s perf runs,
  after a warm-up run. It spins two cores, so its throughput and CPU are not compared.
- **Client**: [`load/`](load/main.go), one thread and one epoll loop over non-blocking sockets,
  pinned to CPU 1. Closed loop (`-rate 0`): one message in flight per connection. Open loop
  (`-rate R`): message *k* scheduled at *k/R* s on connection *k mod N*, latency measured from
  the scheduled send time (no coordinated omission); the loop busy-polls while a send is due
  within 2 ms so sends leave on time. Latencies go into an HDR histogram (3 digits).
  With `-handshake` it waits after connecting, so the server's CPU and syscall counters cover
  exactly the echo traffic (connection setup excluded).
- **All peers run at once** on their own ports and are measured alternately (A B C A B C) over
  the rounds. Per round and peer: an uncapped closed-loop run (server CPU from
  `/proc/PID/task/*/schedstat`),
  a closed-loop run with the server in a cgroup capped at 40% of one core (the server is the
  bottleneck: this is the throughput comparison), a 1 s uncapped run under `perf stat` for the
  syscall count (kept apart so the tracepoint's cost does not inflate CPU per echo), then, once every peer's uncapped throughput
  is known, an open-loop run at 50% of the slowest peer's median uncapped throughput (the same
  rate for all peers) for p50/p99/p99.9 latency.
- **Equal server CPU**: uncapped throughput is bounded by the client (one core against one
  core), so compare *echoes per server CPU-second* (`msgs_per_cpu_s`, the inverse of CPU per
  echo) and the capped throughput, where every peer gets the same 0.4 core.
- Ratios in **bold** are to ringx-epoll measured in the same run; the summary table gives
  ringx-uring against ringx-epoll and against go-netpoll.

The Go code is one module (`go.mod`, `go.sum` here); the harness builds it into a temporary
directory with `go build` on every run. Results: `bench/results/echo-<date>.json`.

## What bounds the io_uring advantage on this machine

Issue #7 asks, at 100 connections, for ringx-uring at 1.15× ringx-epoll's capped throughput,
1.5× go-netpoll's at equal server CPU and 0.7× epoll's fixed-rate p99. Profiles of both ringx
drivers at c100 (`perf record -e cpu-clock -C 0`, same throughput, 223k echoes/s) show where
the room is: the kernel's TCP and loopback work is about 80% of either server's CPU and is the
same work for both (tcp_sendmsg/recvmsg, the softirq delivery to the client's socket, BBR,
skb alloc/free). What the epoll driver spends beyond it (epoll_wait's per-item `tcp_poll`,
syscall entry, libc's send/read wrappers) is about 12% of its CPU; io_uring's own cost (poll
task work, `llist_reverse_order`, issue) is 6–8%. So even a driver with no overhead at all
could beat the epoll driver by about 12% per echo here, and io_uring can recover about half of
that. The host these targets were first measured on (2026-11-22/23, kernel build
6.18.44-fc-v595) had costlier system calls; the runs below, from 2026-11-23's evening, are on
kernel build 6.18.44-fc-v669, where a system call is cheap (no page-table isolation: the CPU is
not affected by Meltdown) and the two drivers land within a few percent of each other. Go
netpoll pays its runtime on top (scheduler, goroutine switches: 1.24–1.5× ringx's CPU per
echo). What io_uring does win outright is the system-call count: 0.04–0.06 per echo against
about 2.1 for epoll and netpoll, and none at all in SQPOLL's steady state.

The two yardsticks (2026-11-24, tenth round) measure that bound directly, alternated with the
other peers: at 100 connections the minimal io_uring server reaches about the minimal epoll
server's capped throughput (0.99× in a first A/B, 119.4k against 120.3k echoes/s, ringx-uring
119.0k, ringx-epoll 117.8k, netpoll 92.7k) and about its p99 at 49k echoes/s (92.5 against
89.5 µs). Issue #7's 1.15× and 0.7× are therefore beyond what io_uring gives on this machine,
and its 1.5× over netpoll is beyond what the minimal io_uring server reaches (1.29×).

"""


def write_report(result, name):
    from report import host_noise
    files = charts(result, name)
    s = result["summary"]
    v = result["versions"]
    mach = result["machine"]
    L = [INTRO]
    L.append(f"## Latest run: `{name}` ({result['mode']}, {result['rounds']} rounds of {result['duration_s']} s, "
             f"{result['elapsed_s']} s in all)")
    L.append("")
    L.append(f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['mem_kib'] // 1024} MiB, Linux {mach['kernel']}. "
             f"Load average before/after: {' '.join(f'{x:.2f}' for x in result['loadavg_before'])} / "
             f"{' '.join(f'{x:.2f}' for x in result['loadavg_after'])} (other work on the machine shares both cores).")
    noise = host_noise(result.get("host_speed"))
    if noise:
        L += ["", noise]
    L.append("")
    L.append("Versions: " + "; ".join(f"{k} {val}" if k.startswith(("github", "golang")) else val
                                      for k, val in v.items()) + ".")
    L.append("")
    L.append("### ringx-uring relative to the other peers, and the two yardsticks (medians, same run)")
    L.append("")
    L.append("| workload | capped echoes/s vs epoll | vs netpoll | echoes per CPU-s vs epoll | vs netpoll "
             "| syscalls/echo uring / epoll / netpoll / sqpoll | SQPOLL steady state | p99 µs uring / epoll / netpoll / sqpoll "
             "| yardsticks min-uring vs min-epoll: capped / p99 (lower is better) | min-uring vs netpoll capped |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")

    def r(w, m, key):
        x = s[w].get("ringx-uring", {}).get(m, {}).get(key)
        return f"{x:.2f}×" if x else "–"

    def trio(w, m, d):
        out = []
        for p in PEERS[1:2] + PEERS[0:1] + PEERS[2:4]:
            x = s[w].get(p, {}).get(m)
            out.append(f"{x['median']:.{d}f}" if x else "–")
        return " / ".join(out)

    def over(w, a, b, m):
        x, y = s[w].get(a, {}).get(m), s[w].get(b, {}).get(m)
        return f"{x['median'] / y['median']:.2f}×" if x and y and y["median"] else "–"

    def steady_of(w):
        x = result.get("sqpoll_steady", {}).get("median", {}).get(w)
        return "–" if x is None else f"{x:.4f}"

    for w in s:
        if not s[w]:
            continue
        L.append(f"| {w} | {r(w, 'capped_msgs_per_s', 'ratio_to_epoll')} | {r(w, 'capped_msgs_per_s', 'ratio_to_netpoll')} "
                 f"| {r(w, 'msgs_per_cpu_s', 'ratio_to_epoll')} | {r(w, 'msgs_per_cpu_s', 'ratio_to_netpoll')} "
                 f"| {trio(w, 'syscalls_per_msg', 3)} | {steady_of(w)} | {trio(w, 'p99_us', 0)} "
                 f"| {over(w, 'min-uring', 'min-epoll', 'capped_msgs_per_s')} / {over(w, 'min-uring', 'min-epoll', 'p99_us')} "
                 f"| {over(w, 'min-uring', 'go-netpoll', 'capped_msgs_per_s')} |")
    L.append("")
    L.append("### Per workload")
    L.append("")
    L.append("Median (min–max) over the rounds; **bold** is the ratio to ringx-epoll in the same run.")
    L.append("")
    for w, peers in s.items():
        if not peers:
            continue
        L.append(f"#### {w}: {result['method']['workloads'].get(w, '')}; latency at "
                 f"{result['latency_rates'].get(w, 0):,.0f} echoes/s")
        L.append("")
        L.append("| peer | capped echoes/s (40% core) | uncapped echoes/s | server CPU µs/echo | echoes per server CPU-s "
                 "| syscalls/echo | p50 µs | p99 µs | p99.9 µs |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for p, ms in peers.items():
            L.append(f"| {p} | {fmt(ms, 'capped_msgs_per_s')} | {fmt(ms, 'msgs_per_s')} | {fmt(ms, 'cpu_us_per_msg')} "
                     f"| {fmt(ms, 'msgs_per_cpu_s')} | {fmt(ms, 'syscalls_per_msg')} | {fmt(ms, 'p50_us')} "
                     f"| {fmt(ms, 'p99_us')} | {fmt(ms, 'p999_us')} |")
        L.append("")
    for fn, title in files:
        L.append(f"![{title}](../results/{fn})")
        L.append("")
    cmds = sorted({re.sub(r"/tmp/ringx-echo-bench-\w+/", "$TMP/", re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", c))
                   for row in result["rows"] for c in (row["cmd"], row["capped_cmd"], row.get("lat_cmd", ""), row.get("perf_cmd"))
                   if c})
    L.append("<details><summary>Commands of this run</summary>")
    L.append("")
    for p, c in result["method"]["servers"].items():
        L.append(f"    {p}: " + re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", c))
    for c in cmds:
        L.append(f"    {c}")
    L.append("")
    L.append("</details>")
    L.append("")
    readme = os.path.join(ECHO, "README.md")
    open(readme, "w").write("\n".join(L))
    print(f"bench: wrote {readme}")


if __name__ == "__main__":
    main()
