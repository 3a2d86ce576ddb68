#!/usr/bin/env python3
"""L7 -> XDP escalation benchmark (issue 23): the server's CPU per abusive request before and
after the abusive client is escalated to the XDP block list, as root.

Two network namespaces joined by a veth pair: ringx (one zone, CPU 0) with the XDP filter in
native mode on its end, and an abusive client (CPU 1) with two addresses. ringx limits both
of its ports to 1 request/s per address (429 beyond); port 8082 also escalates an address
refused 50 times to the block list for an hour, port 8081 does not.

* **Before**: the abuser (address .3) sends requests to 8081 as fast as it can, each on a new
  connection (as a flood of clients does): every one is accepted, parsed and refused with a
  429 by ringx.
* **After**: the abuser (address .4) was escalated on 8082 (the run checks the block is in
  force on /metrics); it now tries to connect as fast as it can. Each try is one SYN, which
  the filter drops in the driver: no socket buffer, no connection, nothing for ringx.

The two phases alternate, for every round. Per abusive request (a request before, a connect
attempt after): **ringx's CPU** (its cgroup's `usage_usec`: every thread, and kernel work done
in them), and **the machine's CPU less the abuser's own user time** (`/proc/stat` over both
cores minus the abuser's `user_usec`: ringx, both sides' kernel work, the XDP program — on a
veth the receiving end's NAPI runs on the sender's core). Medians, min–max over the rounds.

Usage: bench/escalate.py [--quick] [--rounds N] [--seconds S]
Writes bench/results/escalate-<date>[-quick].json and the escalation section of
bench/README.md (between <!-- escalate:begin --> and <!-- escalate:end -->).
"""
import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lib  # noqa: E402

TAG = str(os.getpid() % 100000)
SNS, ANS = f"ebs{TAG}", f"eba{TAG}"
SRV, ABUSE_A, ABUSE_B = "10.79.0.1", "10.79.0.3", "10.79.0.4"
PIN = f"/sys/fs/bpf/ringx-bench-escalate-{TAG}"
ADMIN = 9901

GEN = r"""
import socket, sys, time
mode, src, dst, port, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
n, end = 0, time.monotonic() + secs
while time.monotonic() < end:
    s = socket.socket()
    s.bind((src, 0))
    if mode == "syn":
        s.setblocking(False)
        s.connect_ex((dst, port))
        s.close()
    else:
        s.settimeout(2)
        try:
            s.connect((dst, port))
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while s.recv(4096):
                pass
        except OSError:
            pass
        s.close()
    n += 1
print(n)
"""


def run(*a, check=True, **kw):
    return subprocess.run(list(a), capture_output=True, text=True, check=check, **kw)


def inns(ns, *a, **kw):
    return run("nsenter", f"--net=/run/netns/{ns}", *a, **kw)


def setup():
    for n in (SNS, ANS):
        run("ip", "netns", "add", n)
    run("ip", "link", "add", f"es{TAG}", "type", "veth", "peer", "name", f"ea{TAG}")
    run("ip", "link", "set", f"es{TAG}", "netns", SNS)
    run("ip", "link", "set", f"ea{TAG}", "netns", ANS)
    run("ip", "-n", SNS, "link", "set", f"es{TAG}", "name", "es0")
    run("ip", "-n", ANS, "link", "set", f"ea{TAG}", "name", "ea0")
    run("ip", "-n", SNS, "addr", "add", f"{SRV}/24", "dev", "es0")
    for a in (ABUSE_A, ABUSE_B):
        run("ip", "-n", ANS, "addr", "add", f"{a}/24", "dev", "ea0")
    for n, d in ((SNS, "es0"), (ANS, "ea0")):
        run("ip", "-n", n, "link", "set", d, "up")
        run("ip", "-n", n, "link", "set", "lo", "up")


def teardown():
    for n in (SNS, ANS):
        run("ip", "netns", "del", n, check=False)
    run("rm", "-rf", PIN, check=False)


def busy_us():
    """CPU time spent on every core so far (µs): user, nice, system, irq, softirq, steal."""
    f = open("/proc/stat").readline().split()[1:]
    ticks = sum(int(f[i]) for i in (0, 1, 2, 5, 6, 7))
    return ticks * 1_000_000 // os.sysconf("SC_CLK_TCK")


def user_us(cg):
    """User CPU time of the cgroup's tasks (µs): cgroup v2's cpu.stat, v1's cpuacct."""
    if cg.v2:
        for line in open(f"{cg.dir}/cpu.stat"):
            k, _, v = line.partition(" ")
            if k == "user_usec":
                return int(v)
        return 0
    return int(open(f"{cg.acct_dir or cg.dir}/cpuacct.usage_user").read()) // 1000


def metrics():
    return inns(SNS, "curl", "-s", f"http://{SRV}:{ADMIN}/metrics").stdout


def metric(m, pat):
    x = re.search(pat, m)
    return int(x.group(1)) if x else None


def generate(cg_gen, mode, src, port, secs):
    p = subprocess.Popen(["taskset", "-c", lib.CLIENT_CPU, "nsenter", f"--net=/run/netns/{ANS}",
                          sys.executable, "-c", GEN, mode, src, SRV, str(port), str(secs)],
                         stdout=subprocess.PIPE, text=True)
    cg_gen.move([p.pid], True)
    out, _ = p.communicate(timeout=secs + 30)
    return int(out.strip())


def phase(cg_ringx, cg_gen, mode, src, port, secs):
    r0, g0, b0 = cg_ringx.usage_ns(), user_us(cg_gen), busy_us()
    n = generate(cg_gen, mode, src, port, secs)
    r1, g1, b1 = cg_ringx.usage_ns(), user_us(cg_gen), busy_us()
    gen_user = g1 - g0
    return {"attempts": n, "per_s": n / secs,
            "ringx_us": (r1 - r0) / 1000 / max(n, 1),
            "server_side_us": max(0, (b1 - b0) - gen_user) / max(n, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    secs = args.seconds or (1.0 if args.quick else 3.0)
    if os.geteuid() != 0:
        sys.exit("bench/escalate: needs root (namespaces, XDP, cgroups)")
    teardown()
    work = tempfile.mkdtemp(prefix="ringx-escalate-bench-")
    cfg = os.path.join(work, "ringx.toml")
    open(cfg, "w").write(f"""
[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
log_level = "warn"
[admin]
listen = "{SRV}:{ADMIN}"
[[limit_req_zone]]
name = "plain"
key = "$remote_addr"
rate = "1r/s"
[[limit_req_zone]]
name = "escalating"
key = "$remote_addr"
rate = "1r/s"
[[server]]
listen = ["{SRV}:8081"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok\\n" }}
  limit_req = {{ zone = "plain", nodelay = true, status = 429 }}
[[server]]
listen = ["{SRV}:8082"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok\\n" }}
  limit_req = {{ zone = "escalating", nodelay = true, status = 429, escalate = {{ after = 50, block_for = "1h" }} }}
[xdp]
dev = "es0"
mode = "native"
pin_dir = "{PIN}"
detach_on_exit = true
""")
    cg_ringx, cg_gen = lib.Cgroup("ringx-escalate-bench-srv"), lib.Cgroup("ringx-escalate-bench-gen")
    proc, rows, t0, load0 = None, [], time.time(), os.getloadavg()
    try:
        setup()
        log = open(os.path.join(work, "ringx.log"), "w")
        proc = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, "nsenter", f"--net=/run/netns/{SNS}",
                                 lib.RINGX, "serve", "-c", cfg], stdout=log, stderr=log)
        for _ in range(100):
            if metric(metrics(), r"ringx_escalated_clients (\d+)") is not None:
                break
            time.sleep(0.1)
        cg_ringx.move(lib.proc_tree(proc.pid), True)
        # Escalate address B.
        generate(cg_gen, "http", ABUSE_B, 8082, 2.0)
        m = metrics()
        if metric(m, r"ringx_escalated_clients (\d+)") != 1:
            raise RuntimeError(f"the abuser was not escalated:\n{m}")
        for rnd in range(rounds):
            for name, mode, src, port in (("before: requests refused with 429", "http", ABUSE_A, 8081),
                                          ("after: SYNs dropped by XDP", "syn", ABUSE_B, 8082)):
                drops0 = metric(metrics(), r'ringx_xdp_packets_total\{verdict="drop",reason="drop_block"\} (\d+)')
                r = phase(cg_ringx, cg_gen, mode, src, port, secs)
                drops = metric(metrics(), r'ringx_xdp_packets_total\{verdict="drop",reason="drop_block"\} (\d+)') - drops0
                r.update({"phase": name, "round": rnd, "xdp_drops": drops})
                rows.append(r)
                print(f"r{rnd} {name:36s} {r['per_s']:>9.0f}/s ringx {r['ringx_us']:7.2f} us "
                      f"server side {r['server_side_us']:7.2f} us  xdp drops {drops}", flush=True)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        teardown()
        cg_ringx.remove()
        cg_gen.remove()
    summary = {}
    for name in dict.fromkeys(r["phase"] for r in rows):
        rs = [r for r in rows if r["phase"] == name]
        summary[name] = {k: {"median": statistics.median(r[k] for r in rs),
                             "min": min(r[k] for r in rs), "max": max(r[k] for r in rs)}
                         for k in ("per_s", "ringx_us", "server_side_us")}
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "mode": "quick" if args.quick else "full", "rounds": rounds, "seconds": secs,
              "elapsed_s": round(time.time() - t0, 1), "machine": lib.machine(),
              "versions": lib.versions(), "load_avg_before": load0, "load_avg_after": os.getloadavg(),
              "rows": rows, "summary": summary}
    os.makedirs(lib.RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "")
    path = os.path.join(lib.RESULTS, f"escalate-{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench/escalate: wrote {path}")
    if not args.no_report:
        report(result, name)


def report(result, name):
    s = result["summary"]
    names = list(s)
    f = lambda v, d=2: f"{v['median']:.{d}f} ({v['min']:.{d}f}–{v['max']:.{d}f})"
    lines = [f"### Latest run: `{result['date'][:10]}` ({result['mode']}, {result['rounds']} rounds of "
             f"{result['seconds']} s per phase, {result['elapsed_s']:.0f} s in all)", "",
             f"Machine: {result['machine']['cpu']}, kernel {result['machine']['kernel']}; "
             f"{result['versions']['ringx']}; load average before {result['load_avg_before'][0]:.2f}, "
             f"after {result['load_avg_after'][0]:.2f}. Raw data: `bench/results/escalate-{name}.json`.", "",
             "| phase | abusive requests/s | ringx CPU µs per request | server-side CPU µs per request |",
             "|---|---:|---:|---:|"]
    for n in names:
        lines.append(f"| {n} | {f(s[n]['per_s'], 0)} | {f(s[n]['ringx_us'])} | {f(s[n]['server_side_us'])} |")
    if len(names) == 2:
        b, a = s[names[0]], s[names[1]]
        lines += ["", f"After escalation an abusive attempt costs ringx "
                  f"{a['ringx_us']['median']:.3f} µs instead of {b['ringx_us']['median']:.2f} µs, and the "
                  f"server side {a['server_side_us']['median']:.2f} µs instead of "
                  f"{b['server_side_us']['median']:.2f} µs "
                  f"({b['server_side_us']['median'] / max(a['server_side_us']['median'], 1e-9):.1f}× less)."]
    lines += ["", "Command: `bench/escalate.py" + (" --quick" if result["mode"] == "quick" else "") + "`."]
    readme = os.path.join(lib.ROOT, "bench", "README.md")
    txt = open(readme).read()
    begin, end = "<!-- escalate:begin -->", "<!-- escalate:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in txt:
        txt = txt[:txt.index(begin)] + block + txt[txt.index(end) + len(end):]
    else:
        txt += ("\n## Escalation to XDP (`bench/escalate.py`)\n\n" +
                "\n\n".join(__doc__.split("\n\n")[1:4]) + "\n\n" + block + "\n")
    open(readme, "w").write(txt)


if __name__ == "__main__":
    main()
