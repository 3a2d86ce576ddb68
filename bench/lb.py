#!/usr/bin/env python3
"""XDP load balancer benchmark (issue #24), as root.

1. The forwarding path's cost per packet, timed by the kernel in BPF_PROG_TEST_RUN with
   repeat (crates/lb/examples/lb_bench.rs): new flows (table miss, ring lookup, insert) and
   established flows (table hit), beside the floor, a minimal XDP_TX program that swaps the
   MACs; all three behind a harness program that rewrites each live frame (the balancer
   encapsulates in place; see the example's doc). Beside them the same with one run per call
   over many flows (cold caches).
2. The balancer's CPU on the veth test bed of tests/test_lb.py (client -> router ->
   balancer -> three ringx backends), for the same fixed work through three set-ups,
   alternated in every round:
     xdp      ringx's XDP balancer (GUE, direct server return);
     dnat     iptables DNAT with conntrack in the balancer's namespace (the answers come back
              through it, as DNAT needs);
     haproxy  HAProxy in TCP mode in the balancer's namespace;
     limit    the bed's limit: a minimal XDP program on the balancer's device that forwards
              without balancing (every packet to the VIP GUE-encapsulated under a fixed
              header to one backend, XDP_TX; bpf/lb_bench.bpf.c lb_limit), as bench/echo.py
              measures echo against a minimal server: what any XDP forwarder pays on this
              bed (veth, NAPI wake-ups), so that ringx's ratios to DNAT and HAProxy read
              beside the limit's.
   Work: `ab -k` (keep-alive: packets of established flows) and `ab` without -k (one new
   connection per request). CPU: what the balancer's namespace spends, on every set-up
   measured the same way: its device's NAPI thread (GRO on and threaded NAPI, so the
   receive processing, the XDP program or the forwarding with conntrack, and what it sends
   on from there run in that thread), plus HAProxy's own threads. The router's end of the
   link has a NAPI thread of its own (recorded beside). Per forwarded packet: divided by
   the packets the router handed the balancer (the client's, and for dnat and haproxy the
   backends' answers too); per new connection: divided by the connections.

3. The flood: one established flow's 64-byte frames at the generator's full rate (BPF_PROG_RUN
   with live frames, redirected into the balancer's veth by a program that rewrites each frame
   whole; bench/xdp.py's technique) into a balancer namespace whose answers go back to an
   XDP_DROP at the generator's end. Per set-up (ringx's balancer, DNAT, and the floor: swap
   MACs and XDP_TX), the CPU of the balancer's NAPI thread (threaded, on its own CPU) per
   frame it took in.

The machine is shared (2 cores; other work shows in the load average recorded): medians over
the rounds, and ratios taken inside each round.

With --profile, the balancer's NAPI thread is sampled (perf, cpu-clock) during the first
round's keep-alive work of xdp and limit, and where its time goes (the program, veth, the
stack, scheduling) is recorded beside.

Usage: bench/lb.py [--quick] [--rounds N] [--profile] [--no-readme]
Writes bench/results/lb-<date>[-quick].json and the "Latest run" block of the load balancer
section of bench/README.md (between <!-- lb:begin --> and <!-- lb:end -->).
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, HERE)
from lib import machine  # noqa: E402

RINGX = os.environ.get("RINGX_BIN", os.path.join(ROOT, "target", "release", "ringx"))
LB_BENCH = os.path.join(ROOT, "target", "release", "examples", "lb_bench")
TAG = str(os.getpid() % 100000)
NAMES = ("c", "r", "l", "b1", "b2", "b3")
NS = {k: f"lbz{k}{TAG}" for k in NAMES}
VIP, PORT = "10.88.100.1", 8080
CLI, LB = "10.88.1.2", "10.88.2.2"
BACKENDS = {"b1": "10.88.11.2", "b2": "10.88.12.2", "b3": "10.88.13.2"}
PIN = f"/sys/fs/bpf/ringx-bench-lb-{TAG}"
SETUPS = ("xdp", "limit", "dnat", "haproxy")
# The balancer's device and the router's end of it, named per run: their NAPI threads are
# found by name ("napi/<dev>-<id>", cut to 15 characters).
LBDEV, RTDEV = f"lz{TAG}", f"rz{TAG}"
# The flood bed: a generator namespace and a balancer namespace on one veth pair.
FNS = {"g": f"lbzg{TAG}", "f": f"lbzf{TAG}"}
GDEV, FDEV = f"gz{TAG}", f"fz{TAG}"
FVIP = "10.89.100.1"
FLOOD_SETUPS = ("xdp", "dnat", "floor")
TMP = tempfile.mkdtemp(prefix="ringx-bench-lb-")
PROCS = []


def sh(*args, check=True, timeout=120):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))}: {r.stderr.strip()}")
    return r


def ns(name, *args, **kw):
    return sh("nsenter", f"--net=/run/netns/{NS.get(name) or FNS[name]}", *args, **kw)


def spawn(name, *args, log):
    p = subprocess.Popen(["nsenter", f"--net=/run/netns/{NS.get(name) or FNS[name]}",
                          *map(str, args)],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p


def veth(a, a_dev, a_addr, b, b_dev, b_addr, mtu):
    sh("ip", "link", "add", f"z{a_dev}{TAG}", "type", "veth", "peer", "name", f"z{b_dev}{TAG}")
    for k, dev, addr in ((a, a_dev, a_addr), (b, b_dev, b_addr)):
        sh("ip", "link", "set", f"z{dev}{TAG}", "netns", NS[k])
        sh("ip", "-n", NS[k], "link", "set", f"z{dev}{TAG}", "name", dev)
        sh("ip", "-n", NS[k], "link", "set", dev, "mtu", mtu)
        sh("ip", "-n", NS[k], "addr", "add", addr, "dev", dev)
        sh("ip", "-n", NS[k], "link", "set", dev, "up")
        # Full checksums in software: a frame re-sent with XDP_TX is a new frame.
        ns(k, "ethtool", "-K", dev, "tx", "off", check=False)


def setup():
    for n in NS.values():
        sh("ip", "netns", "add", n)
    for k in NS:
        sh("ip", "-n", NS[k], "link", "set", "lo", "up")
        for s in ("net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
                  "net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=1024 65000"):
            ns(k, "sysctl", "-qw", s)
    veth("c", "c0", f"{CLI}/24", "r", "rc", "10.88.1.1/24", 1500)
    veth("l", LBDEV, f"{LB}/24", "r", RTDEV, "10.88.2.1/24", 1600)
    for i, b in enumerate(BACKENDS, 1):
        veth(b, f"{b}0", f"{BACKENDS[b]}/24", "r", f"r{b}", f"10.88.1{i}.1/24", 1600)
        sh("ip", "-n", NS[b], "route", "add", "default", "via", f"10.88.1{i}.1")
        sh("ip", "-n", NS[b], "addr", "add", f"{VIP}/32", "dev", "lo")
        ns(b, "sysctl", "-qw", f"net.ipv4.conf.{b}0.rp_filter=0")
    sh("ip", "-n", NS["c"], "route", "add", "default", "via", "10.88.1.1")
    sh("ip", "-n", NS["l"], "route", "add", "default", "via", "10.88.2.1")
    ns("r", "sysctl", "-qw", "net.ipv4.ip_forward=1")
    for d in ("rc", RTDEV, "rb1", "rb2", "rb3"):
        ns("r", "sysctl", "-qw", f"net.ipv4.conf.{d}.rp_filter=0")
    ns("l", "sysctl", "-qw", f"net.ipv4.conf.{LBDEV}.rp_filter=0")
    # A veth delivers its peer's XDP_TX frames only when it runs an XDP program itself.
    ns("r", RINGX, "xdp", "--pin-dir", f"{PIN}/r", "attach", "--dev", RTDEV)
    # The meter: the balancer's receive processing (and what it sends on from there) runs
    # in its device's NAPI thread, in every set-up: GRO gives a veth NAPI without XDP, and
    # threaded NAPI gives it a thread of its own. The router's end too, so that its work is
    # not done in the balancer's thread.
    for k, dev in (("l", LBDEV), ("r", RTDEV)):
        ns(k, "ethtool", "-K", dev, "gro", "on")
        # `ip netns exec` mounts the namespace's own /sys, where the device is.
        sh("ip", "netns", "exec", NS[k], "sh", "-c", f"echo 1 > /sys/class/net/{dev}/threaded")
    for b in BACKENDS:
        ns(b, RINGX, "lb", "--pin-dir", f"{PIN}/{b}", "backend", "--dev", f"{b}0")
        cfg = os.path.join(TMP, f"{b}.toml")
        open(cfg, "w").write(f"""[runtime]
zones = 1
[[server]]
listen = ["0.0.0.0:{PORT}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{b}\\n" }}
""")
        spawn(b, RINGX, "serve", "-c", cfg, log=os.path.join(TMP, f"{b}.log"))
    lbcfg = os.path.join(TMP, "lb.toml")
    bl = ", ".join(f'"{a}"' for a in BACKENDS.values())
    open(lbcfg, "w").write(f"""[lb]
devices = ["{LBDEV}"]
source_v4 = "{LB}"
pin_dir = "{PIN}/lb"
[[lb.service]]
vip = "{VIP}:{PORT}"
backends = [{bl}]
""")
    hcfg = os.path.join(TMP, "haproxy.cfg")
    servers = "\n".join(f"  server {b} {a}:{PORT}" for b, a in BACKENDS.items())
    open(hcfg, "w").write(f"""global
  maxconn 8000
  nbthread 1
defaults
  mode tcp
  timeout connect 2s
  timeout client 30s
  timeout server 30s
listen vip
  bind {VIP}:{PORT}
  balance roundrobin
{servers}
""")
    deadline = time.time() + 10
    while time.time() < deadline:
        if all(ns(b, "ss", "-ltn", f"sport = :{PORT}").stdout.count("LISTEN") for b in BACKENDS):
            break
        time.sleep(0.1)
    return lbcfg, hcfg


def teardown():
    for p in PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()
    for n in list(NS.values()) + list(FNS.values()):
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
    shutil.rmtree(PIN, ignore_errors=True)
    shutil.rmtree(TMP, ignore_errors=True)


class Setup:
    """Puts the bed into one set-up and back out of it."""

    def __init__(self, lbcfg, hcfg):
        self.lbcfg, self.hcfg, self.haproxy, self.limit = lbcfg, hcfg, None, None

    def enter(self, s):
        ns("r", "ip", "route", "replace", f"{VIP}/32", "via", LB)
        if s == "xdp":
            ns("l", RINGX, "lb", "attach", "--dev", LBDEV, "-c", self.lbcfg)
        elif s == "limit":
            mac = lambda k, dev: json.loads(ns(k, "ip", "-j", "link", "show", "dev", dev).stdout)[
                0]["address"]
            log = os.path.join(TMP, "limit.log")
            self.limit = spawn("l", LB_BENCH, "hold", "--dev", LBDEV, "--seconds", "100000",
                               "--limit", f"{PIN}/limit", "--vip", VIP, "--src", LB,
                               "--backend", BACKENDS["b1"], "--src-mac", mac("l", LBDEV),
                               "--dst-mac", mac("r", RTDEV), log=log)
            deadline = time.time() + 10
            while "attached" not in open(log).read():
                if time.time() > deadline or self.limit.poll() is not None:
                    raise RuntimeError(open(log).read())
                time.sleep(0.05)
        elif s == "dnat":
            ns("l", "sysctl", "-qw", "net.ipv4.ip_forward=1")
            n = len(BACKENDS)
            for i, a in enumerate(BACKENDS.values()):
                rule = ["iptables", "-t", "nat", "-A", "PREROUTING", "-d", VIP, "-p", "tcp",
                        "--dport", str(PORT)]
                if i < n - 1:  # 1/3, then 1/2 of the rest, then the rest
                    rule += ["-m", "statistic", "--mode", "random", "--probability",
                             f"{1 / (n - i):.6f}"]
                ns("l", *rule, "-j", "DNAT", "--to-destination", f"{a}:{PORT}")
            # The answers must come back through the balancer to be translated back.
            for b in BACKENDS:
                ns("r", "ip", "rule", "add", "iif", f"r{b}", "lookup", "100")
            ns("r", "ip", "route", "add", "default", "via", LB, "table", "100")
        elif s == "haproxy":
            ns("l", "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
            self.haproxy = spawn("l", "haproxy", "-f", self.hcfg, "-db",
                                 log=os.path.join(TMP, "haproxy.log"))
            deadline = time.time() + 10
            while "LISTEN" not in ns("l", "ss", "-ltn", f"sport = :{PORT}").stdout:
                if time.time() > deadline or self.haproxy.poll() is not None:
                    raise RuntimeError(open(os.path.join(TMP, "haproxy.log")).read())
                time.sleep(0.05)

    def leave(self, s):
        if s == "xdp":
            ns("l", RINGX, "lb", "--pin-dir", f"{PIN}/lb", "detach", "--dev", LBDEV)
        elif s == "limit":
            self.limit.terminate()
            self.limit.wait(10)
            # Stopped while holding its (pinned) link: detach it through the pin.
            ns("l", RINGX, "xdp", "--pin-dir", f"{PIN}/limit", "detach", "--dev", LBDEV)
        elif s == "dnat":
            ns("l", "iptables", "-t", "nat", "-F", "PREROUTING")
            ns("l", "sysctl", "-qw", "net.ipv4.ip_forward=0")
            for b in BACKENDS:
                ns("r", "ip", "rule", "del", "iif", f"r{b}", "lookup", "100")
            ns("r", "ip", "route", "flush", "table", "100")
        elif s == "haproxy":
            self.haproxy.terminate()
            self.haproxy.wait(10)
            ns("l", "ip", "addr", "del", f"{VIP}/32", "dev", "lo")


def napi_ns(dev):
    """CPU time of the NAPI threads of `dev` (schedstat, ns)."""
    prefix = f"napi/{dev}-"[:15]
    total = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open(f"/proc/{p}/comm").read().startswith(prefix):
                    total += int(open(f"/proc/{p}/schedstat").read().split()[0])
            except OSError:
                continue
    return total


def proc_ns(pid):
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            total += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
    except OSError:
        pass
    return total


def lb_packets():
    # Through netlink: nsenter --net keeps the host's /sys.
    return json.loads(ns("r", "ip", "-j", "-s", "link", "show", "dev", RTDEV).stdout)[0][
        "stats64"]["tx"]["packets"]


# Where the balancer's NAPI thread spends its time: the symbols perf samples, grouped by the
# first group one of whose fragments the name contains.
PROFILE_GROUPS = (
    ("the XDP program", ("bpf_prog_",)),
    ("veth: its receive and the copy of each skb into an XDP buffer", (
        "veth_", "skb_pp_cow", "skb_copy_bits", "memcpy", "copy_skb_header", "page_pool",
        "napi_pp_put_page", "xdp_", "bpf_xdp", "__xdp")),
    ("NAPI scheduling and wake-ups", (
        "schedule", "finish_task_switch", "switch_to", "wake", "napi_threaded", "kthread",
        "enqueue", "dequeue", "update_curr", "pick_next", "sched_clock", "raw_spin", "irq",
        "softirq", "napi_complete", "rcu")),
    ("skb allocation and freeing", ("kfree", "slab", "kmem_cache", "consume_skb", "build_skb",
                                    "alloc", "free")),
    ("the stack (GRO, IP, conntrack, netfilter)", (
        "gro", "ip_", "ipv4", "nf_", "nft_", "netif", "tcp", "fib_", "neigh", "dev_queue",
        "sch_", "conntrack", "skb_", "dev_hard_start", "validate_xmit", "inet_")),
)


def profile_start(tag):
    out = os.path.join(TMP, f"perf-{tag}.data")
    tids = ",".join(map(str, napi_pids(LBDEV)))
    p = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4999", "-t", tids,
                          "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # perf attaches before the work starts
    return p, out


def profile_stop(p, out):
    p.send_signal(2)
    p.wait(30)
    rep = sh("perf", "report", "-i", out, "--stdio", "--sort", "sym", "--percent-limit", "0",
             check=False).stdout
    samples = re.search(r"# Samples: (\S+)", rep)
    syms = []
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[.\]\s+(\S+)", line)
        if m:
            syms.append((m.group(2), float(m.group(1))))
    groups = {g: 0.0 for g, _ in PROFILE_GROUPS}
    groups["other"] = 0.0
    for name, pct in syms:
        g = next((g for g, frags in PROFILE_GROUPS if any(f in name for f in frags)), "other")
        groups[g] += pct
    return {"samples": samples.group(1) if samples else "0",
            "groups": {k: round(v, 1) for k, v in groups.items()},
            "top": [[n, p] for n, p in syms[:15]]}


def measure(workload, n, conc, haproxy, prof=None):
    args = ["ab", "-q", "-n", str(n), "-c", str(conc)]
    if workload == "keepalive":
        args.append("-k")
    hp = haproxy.pid if haproxy else None
    p0 = lb_packets()
    perf = profile_start(prof) if prof else None
    n0, h0, r0, w0 = napi_ns(LBDEV), proc_ns(hp) if hp else 0, napi_ns(RTDEV), time.monotonic()
    out = ns("c", *args, f"http://{VIP}:{PORT}/", timeout=300).stdout
    n1, h1, r1, w1 = napi_ns(LBDEV), proc_ns(hp) if hp else 0, napi_ns(RTDEV), time.monotonic()
    p1 = lb_packets()
    profile = profile_stop(*perf) if perf else None
    done = int(re.search(r"Complete requests:\s+(\d+)", out).group(1))
    failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    non2xx = re.search(r"Non-2xx responses:\s+(\d+)", out)
    return {"requests": done, "failed": failed + (int(non2xx.group(1)) if non2xx else 0),
            "napi_s": (n1 - n0) / 1e9, "process_s": (h1 - h0) / 1e9,
            "cpu_s": (n1 - n0 + h1 - h0) / 1e9, "router_napi_s": (r1 - r0) / 1e9,
            "wall_s": w1 - w0, "lb_packets": p1 - p0,
            **({"profile": profile} if profile else {})}


# ---- the flood: one established flow's packets at the generator's full rate ----

def napi_pids(dev):
    prefix = f"napi/{dev}-"[:15]
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open(f"/proc/{p}/comm").read().startswith(prefix):
                    out.append(int(p))
            except OSError:
                pass
    return out


def flood_setup():
    os.makedirs(TMP, exist_ok=True)
    for n in FNS.values():
        sh("ip", "netns", "add", n)
    for k in FNS:
        sh("ip", "-n", FNS[k], "link", "set", "lo", "up")
    sh("ip", "link", "add", GDEV, "type", "veth", "peer", "name", FDEV)
    for k, dev, addr in (("g", GDEV, "10.89.0.2/24"), ("f", FDEV, "10.89.0.1/24")):
        sh("ip", "link", "set", dev, "netns", FNS[k])
        sh("ip", "-n", FNS[k], "link", "set", dev, "mtu", 1600)
        sh("ip", "-n", FNS[k], "addr", "add", addr, "dev", dev)
        sh("ip", "-n", FNS[k], "link", "set", dev, "up")
        ns(k, "ethtool", "-K", dev, "gro", "on")
        sh("ip", "netns", "exec", FNS[k], "sh", "-c", f"echo 1 > /sys/class/net/{dev}/threaded")
        ns(k, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")
        ns(k, "sysctl", "-qw", f"net.ipv4.conf.{dev}.rp_filter=0")
    gmac = json.loads(ns("g", "ip", "-j", "link", "show", "dev", GDEV).stdout)[0]["address"]
    fmac = json.loads(ns("f", "ip", "-j", "link", "show", "dev", FDEV).stdout)[0]["address"]
    ns("f", "ip", "route", "add", "default", "via", "10.89.0.2")
    ns("f", "ip", "neigh", "replace", "10.89.0.2", "lladdr", gmac, "dev", FDEV, "nud",
       "permanent")
    # The sink: what comes back to the generator's end is dropped there by XDP.
    spawn("g", LB_BENCH, "hold", "--dev", GDEV, "--seconds", "100000",
          log=os.path.join(TMP, "hold.log"))
    deadline = time.time() + 10
    while "attached" not in open(os.path.join(TMP, "hold.log")).read():
        if time.time() > deadline:
            raise RuntimeError(open(os.path.join(TMP, "hold.log")).read())
        time.sleep(0.05)
    cfg = os.path.join(TMP, "flood.toml")
    open(cfg, "w").write(f"""[lb]
source_v4 = "10.89.0.1"
pin_dir = "{PIN}/flood"
[[lb.service]]
vip = "{FVIP}:80"
backends = ["10.89.1.1", "10.89.1.2", "10.89.1.3"]
""")
    return cfg, fmac


FLOOR = {}


def flood_enter(s, cfg):
    if s == "floor":
        log = os.path.join(TMP, "floor.log")
        FLOOR["p"] = spawn("f", LB_BENCH, "hold", "--dev", FDEV, "--seconds", "100000",
                           "--floor", f"{PIN}/floor", log=log)
        deadline = time.time() + 10
        while "attached" not in open(log).read():
            if time.time() > deadline:
                raise RuntimeError(open(log).read())
            time.sleep(0.05)
    elif s == "xdp":
        ns("f", RINGX, "lb", "attach", "--dev", FDEV, "-c", cfg)
    else:
        ns("f", "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for i in range(3):
            rule = ["iptables", "-t", "nat", "-A", "PREROUTING", "-d", FVIP, "-p", "tcp",
                    "--dport", "80"]
            if i < 2:
                rule += ["-m", "statistic", "--mode", "random", "--probability",
                         f"{1 / (3 - i):.6f}"]
            ns("f", *rule, "-j", "DNAT", "--to-destination", f"10.89.1.{i + 1}:80")


def flood_leave(s):
    if s == "floor":
        FLOOR["p"].terminate()
        FLOOR["p"].wait(10)
        # Stopped while holding its (pinned) link: detach it through the pin.
        ns("f", RINGX, "xdp", "--pin-dir", f"{PIN}/floor", "detach", "--dev", FDEV)
    elif s == "xdp":
        ns("f", RINGX, "lb", "--pin-dir", f"{PIN}/flood", "detach", "--dev", FDEV)
    else:
        ns("f", "iptables", "-t", "nat", "-F", "PREROUTING")
        ns("f", "sysctl", "-qw", "net.ipv4.ip_forward=0")


def handled_packets():
    """Frames the balancer's device took in (its NAPI counts each, whatever the verdict)."""
    return json.loads(ns("f", "ip", "-j", "-s", "link", "show", "dev", FDEV).stdout)[0][
        "stats64"]["rx"]["packets"]


def flood_measure(fmac, secs, gen_cpu, lb_cpu):
    # The balancer's NAPI thread (and the sink's) on one CPU, the generator on the other.
    for p in napi_pids(FDEV) + napi_pids(GDEV):
        sh("taskset", "-pc", str(lb_cpu), p)
    c0, p0 = sum(proc_ns(p) for p in napi_pids(FDEV)), handled_packets()
    out = sh("taskset", "-c", str(gen_cpu), "nsenter", f"--net=/run/netns/{FNS['g']}",
             LB_BENCH, "gen", "--dev", GDEV, "--src", "10.89.0.2:40000", "--dst", f"{FVIP}:80",
             "--dst-mac", fmac, "--seconds", str(secs), timeout=secs + 60).stdout
    time.sleep(0.2)  # let the rings drain
    c1, p1 = sum(proc_ns(p) for p in napi_pids(FDEV)), handled_packets()
    g = json.loads(out)
    handled = p1 - p0
    return {"sent": g["sent"], "gen_pps": g["pps"], "handled": handled,
            "handled_pps": handled / g["seconds"], "lb_cpu_s": (c1 - c0) / 1e9,
            "lb_busy": (c1 - c0) / 1e9 / g["seconds"],
            "lb_ns_per_packet": (c1 - c0) / handled if handled else None}


def testrun(quick):
    out = sh(LB_BENCH, "testrun", "--flows", "5000" if quick else "20000",
             "--rounds", "3" if quick else "5", "--repeat", "200000" if quick else "1000000",
             timeout=600).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-readme", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/lb.py needs root (BPF, network namespaces)")
    for tool in ("ip", "nsenter", "ethtool", "iptables", "haproxy", "ab", "ss") + (
            ("perf",) if args.profile else ()):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is missing: run scripts/install-deps.sh")
    for b in (RINGX, LB_BENCH):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is missing: make bench-lb builds it")
    rounds = args.rounds or (1 if args.quick else 3)
    # Enough work that the cheapest set-up's CPU is well above the meter's resolution.
    sizes = {"keepalive": (20000, 16) if args.quick else (100000, 16),
             "connections": (3000, 8) if args.quick else (16000, 8)}
    t_start = time.time()
    res = {"name": "lb", "date": datetime.date.today().isoformat(),
           "mode": "quick" if args.quick else "full", "machine": machine(), "rounds": rounds,
           "ringx": sh(RINGX, "--version").stdout.strip(),
           "haproxy": sh("haproxy", "-v").stdout.splitlines()[0],
           "iptables": sh("iptables", "--version").stdout.strip(),
           "loadavg_before": open("/proc/loadavg").read().split()[:3], "sizes": sizes}
    print("+ testrun", flush=True)
    res["testrun"] = testrun(args.quick)
    t = res["testrun"]
    print(f"  established {t['established_ns']} ns, new flow {t['new_flow_ns']} ns, floor "
          f"{t['floor_ns']} ns: {t['established_ratio']}x and {t['new_flow_ratio']}x", flush=True)
    rows = []
    teardown_needed = True
    try:
        lbcfg, hcfg = setup()
        st = Setup(lbcfg, hcfg)
        for rnd in range(rounds):
            order = list(SETUPS[rnd % len(SETUPS):] + SETUPS[:rnd % len(SETUPS)])
            for s in order:
                st.enter(s)
                try:
                    ns("c", "ab", "-q", "-n", "200", "-c", "4", f"http://{VIP}:{PORT}/")  # warm
                    for w, (n, conc) in sizes.items():
                        prof = (f"{s}-{w}" if args.profile and rnd == 0 and w == "keepalive"
                                and s in ("xdp", "limit") else None)
                        r = measure(w, n, conc, st.haproxy if s == "haproxy" else None, prof)
                        r.update(round=rnd, setup=s, workload=w)
                        rows.append(r)
                        print(f"  round {rnd} {s:<8} {w:<11} {r['requests']} requests "
                              f"({r['failed']} failed) {r['cpu_s']:.2f} s CPU, "
                              f"{r['lb_packets']} packets to the balancer", flush=True)
                finally:
                    st.leave(s)
    finally:
        if teardown_needed:
            teardown()
    res["rows"] = rows
    res["summary"] = summarise(rows, rounds)
    print("+ flood", flush=True)
    secs = 1.0 if args.quick else 2.0
    frows = []
    try:
        cfg, fmac = flood_setup()
        for rnd in range(rounds):
            for s in FLOOD_SETUPS[rnd % 3:] + FLOOD_SETUPS[:rnd % 3]:
                flood_enter(s, cfg)
                try:
                    r = flood_measure(fmac, secs, gen_cpu=1, lb_cpu=0)
                finally:
                    flood_leave(s)
                r.update(round=rnd, setup=s)
                frows.append(r)
                print(f"  round {rnd} {s:<5} {r['handled_pps'] / 1e6:.3f} Mpps handled of "
                      f"{r['gen_pps'] / 1e6:.3f} sent, {r['lb_ns_per_packet']:.0f} ns/packet in "
                      f"the balancer's NAPI thread ({100 * r['lb_busy']:.0f}% busy)", flush=True)
    finally:
        teardown()
    res["flood_rows"] = frows
    ns_pp = {s: statistics.median([r["lb_ns_per_packet"] for r in frows if r["setup"] == s])
             for s in FLOOD_SETUPS}
    def ratio(a, b):
        return round(statistics.median([
            next(r for r in frows if r["round"] == i and r["setup"] == a)["lb_ns_per_packet"] /
            next(r for r in frows if r["round"] == i and r["setup"] == b)["lb_ns_per_packet"]
            for i in range(rounds)]), 3)
    res["flood"] = {"seconds": secs, "ns_per_packet": {k: round(v, 1) for k, v in ns_pp.items()},
                    "xdp_vs_dnat": ratio("xdp", "dnat"), "xdp_vs_floor": ratio("xdp", "floor"),
                    "handled_pps": {s: round(statistics.median(
                        [r["handled_pps"] for r in frows if r["setup"] == s])) for s in FLOOD_SETUPS}}
    res["seconds"] = round(time.time() - t_start, 1)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"lb-{res['date']}{'-quick' if args.quick else ''}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {path}")
    print(json.dumps(res["summary"], indent=1))
    if not args.no_readme:
        readme(res)


def summarise(rows, rounds):
    """Per workload and balancer: its CPU per request and per packet handed to it, and the
    ratios to ringx's (taken inside each round, then medians)."""
    out = {}
    for w in ("keepalive", "connections"):
        per = {s: {"cpu_us_per_request": [], "cpu_ns_per_packet": [], "packets_per_request": []}
               for s in SETUPS}
        ratios = {"xdp_vs_dnat": [], "xdp_vs_haproxy": [], "xdp_vs_limit": [],
                  "limit_vs_dnat": [], "limit_vs_haproxy": []}
        for rnd in range(rounds):
            got = {r["setup"]: r for r in rows if r["round"] == rnd and r["workload"] == w}
            pkt = {}
            for s in per:
                r = got[s]
                per[s]["cpu_us_per_request"].append(r["cpu_s"] / r["requests"] * 1e6)
                per[s]["packets_per_request"].append(r["lb_packets"] / r["requests"])
                pkt[s] = r["cpu_s"] * 1e9 / r["lb_packets"] if r["lb_packets"] else float("nan")
                per[s]["cpu_ns_per_packet"].append(pkt[s])
            for k in ratios:
                a, b = k.split("_vs_")
                ratios[k].append(pkt[a] / pkt[b])
        med = {s: {k: round(statistics.median(v), 2) for k, v in m.items()} for s, m in per.items()}
        for k, v in ratios.items():
            med[k] = round(statistics.median(v), 3)
        out[w] = med
    return out


def readme(res):
    path = os.path.join(HERE, "README.md")
    text = open(path).read()
    t, s = res["testrun"], res["summary"]
    lines = [f"### Latest run: `{res['date']}` ({res['mode']}, {res['rounds']} rounds, "
             f"{res['seconds']} s in all)", "",
             f"Machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, Linux "
             f"{res['machine']['kernel']}. {res['ringx']}; {res['haproxy']}; {res['iptables']}. "
             f"Load average before: {' '.join(res['loadavg_before'])}.", "",
             f"| forwarding path (BPF_PROG_TEST_RUN) | repeat {t['repeat']}: ns/packet | "
             f"x floor | one run per call, {t['cold']['flows']} flows: ns/packet | x floor |",
             "|---|---:|---:|---:|---:|",
             f"| floor: swap MACs, XDP_TX | {t['floor_ns']} | 1 | {t['cold']['floor_ns']} | 1 |",
             f"| established flow (table hit), GUE | {t['established_ns']} | "
             f"{t['established_ratio']} | {t['cold']['established_ns']} | "
             f"{t['cold']['established_ratio']} |",
             f"| new flow (miss, ring, insert), GUE | {t['new_flow_ns']} | "
             f"{t['new_flow_ratio']} | {t['cold']['new_flow_ns']} | "
             f"{t['cold']['new_flow_ratio']} |", "",
             "| work | balancer | CPU per request (us) | per packet to it (ns) | "
             "packets per request |", "|---|---|---:|---:|---:|"]
    for w, m in s.items():
        for b in SETUPS:
            lines.append(f"| {w} | {b} | {m[b]['cpu_us_per_request']} | "
                         f"{m[b]['cpu_ns_per_packet']} | {m[b]['packets_per_request']} |")
    f = res["flood"]
    lines += ["", f"Flood ({f['seconds']} s per case, one established flow's 64-byte frames at "
              "the generator's full rate; CPU of the balancer's NAPI thread per frame it took in):",
              "", "| balancer | ns/packet | Mpps handled |", "|---|---:|---:|"]
    for k in FLOOD_SETUPS:
        lines.append(f"| {k} | {f['ns_per_packet'][k]} | {f['handled_pps'][k] / 1e6:.3f} |")
    lines += ["", f"Flood ratios: ringx XDP / DNAT {f['xdp_vs_dnat']}, ringx XDP / floor "
              f"{f['xdp_vs_floor']}."]
    names = {"xdp": "ringx XDP", "limit": "the limit", "dnat": "iptables DNAT",
             "haproxy": "HAProxy"}
    lines += ["", "Connections bed, CPU per packet, ratios inside each round (medians):", "",
              "| ratio | " + " | ".join(s) + " |", "|---|" + "---:|" * len(s)]
    for k in ("xdp_vs_dnat", "xdp_vs_haproxy", "xdp_vs_limit", "limit_vs_dnat",
              "limit_vs_haproxy"):
        a, b = k.split("_vs_")
        lines.append(f"| {names[a]} / {names[b]} | " + " | ".join(
            str(m[k]) for m in s.values()) + " |")
    profs = [r for r in res["rows"] if "profile" in r]
    if profs:
        lines += ["", "Where the balancer's NAPI thread spends its time (keep-alive, round 0, "
                  "perf cpu-clock samples of the thread, % of them):", "",
                  "| set-up | samples | " + " | ".join(profs[0]["profile"]["groups"]) + " |",
                  "|---|---:|" + "---:|" * len(profs[0]["profile"]["groups"])]
        for r in profs:
            lines.append(f"| {r['setup']} | {r['profile']['samples']} | " + " | ".join(
                str(v) for v in r["profile"]["groups"].values()) + " |")
    block = "<!-- lb:begin -->\n" + "\n".join(lines) + "\n<!-- lb:end -->"
    if "<!-- lb:begin -->" in text:
        text = re.sub(r"<!-- lb:begin -->.*?<!-- lb:end -->", lambda _: block, text, flags=re.S)
    else:
        text += "\n" + block + "\n"
    open(path, "w").write(text)
    print(f"updated {path}")


if __name__ == "__main__":
    main()
