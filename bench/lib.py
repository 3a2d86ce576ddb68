"""The benchmark harness the scripts in bench/ share: pinning and process trees, the cgroup
CPU cap and CPU meter, wrk and ab runs with their figures parsed, C yardsticks built with gcc,
host noise, the machine's description, and medians with ratios to a base peer.

Not a benchmark itself: bench/http_bench.py (HTTP against nginx), proxy.py, echo.py, ops.py,
steer.py and xdp.py import it. Method: see bench/README.md.
"""
import datetime
import glob
import json
import os
import re
import shutil
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
RESULTS = os.path.join(BENCH, "results")
RINGX = os.environ.get("RINGX_BIN", os.path.join(ROOT, "target", "release", "ringx"))
CAP_PCT = 40


def shown(text):
    """`text` (a path or a command line) as results record it: paths inside this checkout
    relative to its root, so a result names no machine's directory."""
    return None if text is None else str(text).replace(ROOT + os.sep, "")

SERVER_CPU = "0"
CLIENT_CPU = "1"

# The response bodies the HTTP and proxy benchmarks serve.
BODY64 = "0123456789abcdef" * 4
BODY1K = ("0123456789abcdef" * 64)


def ringx_binary(peer, base=None):
    """The ringx build a peer runs: `ringx-*` this tree's, `base-*` the one given with
    --base (an A/B run of two builds alternated in one run)."""
    if peer.startswith("base-"):
        if not base:
            raise RuntimeError(f"{peer}: no --base binary given")
        return base
    return RINGX


def base_peers(base, engines=("uring", "epoll")):
    """The peers --base adds: the other build on each engine."""
    return [f"base-{e}" for e in engines] if base else []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=10, host="127.0.0.1"):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


def raise_nofile():
    """The soft limit on open files up to the hard one (this process and its children)."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def pct_ms(v, q):
    """The q-quantile of latencies v (seconds), in ms; None when there are none."""
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] * 1000 if v else None


def write_results(stem, rows, **extra):
    """Writes bench/results/<stem>-<date>.json: the machine, the versions, the command line,
    `extra` and the rows; says where, and returns the path."""
    day = datetime.date.today().isoformat()
    out = os.path.join(RESULTS, f"{stem}-{day}.json")
    with open(out, "w") as f:
        json.dump({"machine": machine(), "versions": versions(), "command": " ".join(sys.argv),
                   **extra, "rows": rows}, f, indent=1)
    print(f"wrote {out}")
    return out


def start_ringx_zone(binary, work, port, location, log_name):
    """ringx with one zone pinned to the server CPU, listening on `port` with one `/` location
    whose settings are `location` (TOML lines); waits until it listens."""
    cfg = os.path.join(work, f"ringx-{port}.toml")
    with open(cfg, "w") as f:
        f.write(f"""[runtime]
zones = 1
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  {location}
""")
    log = open(os.path.join(work, log_name), "wb")
    p = subprocess.Popen(["taskset", "-c", SERVER_CPU, binary, "serve", "-c", cfg],
                         stdout=log, stderr=log, preexec_fn=raise_nofile)
    wait_port(port, p)
    return p


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


def wakes(pids):
    """Times every thread of `pids` went to sleep of its own accord (voluntary context
    switches): a server's wake-ups, the other half of what it pays per request at a rate it
    does not saturate."""
    total = 0
    for p in pids:
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                try:
                    for ln in open(f"/proc/{p}/task/{t}/status"):
                        if ln.startswith("voluntary_ctxt_switches:"):
                            total += int(ln.split()[1])
                except OSError:
                    pass
        except OSError:
            pass
    return total


def user_system(pids):
    """Clock ticks every thread of `pids` spent in user mode and in the kernel
    (/proc/PID/task/TID/stat's utime and stime): sampled at each tick, so their split of a
    span's CPU is read to a tick in some hundreds. The kernel's share holds the interrupts
    and softirqs that came while the thread ran (a server busy between datagrams receives
    them in its own time), not those that woke it."""
    user = system = 0
    for p in pids:
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                try:
                    # After the command's closing parenthesis: state is field 3, utime 14.
                    f = open(f"/proc/{p}/task/{t}/stat").read().rsplit(")", 1)[1].split()
                    user, system = user + int(f[11]), system + int(f[12])
                except (OSError, IndexError, ValueError):
                    pass
        except OSError:
            pass
    return user, system


def steal_ms(cpus=(SERVER_CPU, CLIENT_CPU)):
    """Time the hypervisor gave `cpus` to other guests (/proc/stat's steal, ms): the
    measured processes' on-CPU time leaves it out, but a round with much of it ran on a
    shared, slower host (caches and memory bandwidth taken by others)."""
    names = {f"cpu{c}" for c in cpus}
    with open("/proc/stat") as f:
        # cpuN user nice system idle iowait irq softirq steal ...: in clock ticks.
        ticks = sum(int(x[8]) for x in map(str.split, f) if x and x[0] in names and len(x) > 8)
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


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


class ReceiverCores:
    """The server in a network namespace of its own behind a veth pair, the clients in the
    root namespace, and RPS on each end sending its receive processing to its own side's CPU
    (SERVER_CPU for what the server receives, CLIENT_CPU for what the clients receive).

    Over loopback the kernel receives a packet in the sender's context: a server's TCP
    handshakes, the segments and acknowledgements it receives, and the datagrams it receives
    are processed on the client's CPU and charged to the client, while what the server sends
    is received on the server's CPU. On a real network the NIC's receive work lands on the
    receiver's core (RSS, RPS), as here. veth, like loopback, hands a GSO or TSO batch over
    whole; `uso=False` turns UDP segmentation off on the server's end, so that the server's
    CPU cuts its GSO batches into datagrams as it would for a NIC without UDP segmentation
    offload (TCP's is in nearly every NIC). Use as a context manager: `prefix` runs a command
    in the namespace, `addr` is the server's address; what it made is removed on exit."""

    SUBNET = "10.203.77"

    def __init__(self, tag, uso=True):
        pid = os.getpid()
        self.ns = f"ringx-{tag}-{pid}"
        # Interface names: 15 bytes at most; the full pid keeps runs apart.
        self.host_if, self.ns_if = f"rxc{pid}", f"rxs{pid}"
        self.addr, self.client_addr = f"{self.SUBNET}.1", f"{self.SUBNET}.2"
        self.prefix = ["ip", "netns", "exec", self.ns]
        self.uso = uso
        self.made = []

    @classmethod
    def check(cls):
        """Why a pair cannot be made here, or None: root is needed, and the subnet must be
        free (a pair another run left behind would take the clients' packets)."""
        if os.geteuid() != 0:
            return "a network namespace and RPS need root"
        used = sh(["ip", "-o", "addr", "show", "to", f"{cls.SUBNET}.0/30"]).stdout.strip()
        if used:
            return (f"{cls.SUBNET}.0/30 is in use ({used.split()[1]}): a pair an earlier run "
                    "left behind? `ip link delete` it")
        return None

    def __enter__(self):
        why = self.check()
        if why:
            raise RuntimeError(why)
        run = lambda *c: sh(list(c), check=True)  # noqa: E731
        try:
            run("ip", "netns", "add", self.ns)
            self.made.append("ns")
            run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            self.made.append("link")
            run("ip", "link", "set", self.ns_if, "netns", self.ns)
            run("ip", "addr", "add", f"{self.client_addr}/30", "dev", self.host_if)
            run("ip", "link", "set", self.host_if, "up")
            run(*self.prefix, "ip", "addr", "add", f"{self.addr}/30", "dev", self.ns_if)
            run(*self.prefix, "ip", "link", "set", self.ns_if, "up")
            run(*self.prefix, "ip", "link", "set", "lo", "up")
            if not self.uso:
                run(*self.prefix, "ethtool", "-K", self.ns_if, "tx-udp-segmentation", "off")
            mask = lambda cpu: format(1 << int(cpu), "x")  # noqa: E731
            with open(f"/sys/class/net/{self.host_if}/queues/rx-0/rps_cpus", "w") as f:
                f.write(mask(CLIENT_CPU))
            # The namespace's own sysfs holds its end of the pair.
            run(*self.prefix, "sh", "-c", f"echo {mask(SERVER_CPU)} > "
                f"/sys/class/net/{self.ns_if}/queues/rx-0/rps_cpus")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        # Only what this run made. Deleting the namespace deletes its end of the pair, and
        # with it the other end; a pair not yet moved into it goes by its host end.
        if "ns" in self.made:
            sh(["ip", "netns", "delete", self.ns])
        if "link" in self.made:
            sh(["ip", "link", "delete", self.host_if])
        self.made = []
        return False


def core_ns(cpu=SERVER_CPU):
    """A reading of CPU `cpu`'s clock: (ns since boot, ns it spent idle, ns stolen from it).
    Two readings give what the core was busy for between them, whoever it was busy for: the
    server's threads, and the interrupts and softirqs that ran while they slept (waking
    them, receiving for them), which no thread's schedstat holds. Idle time from cpuidle
    (exact, but counted only when an idle period ends: the reading is taken from the core
    itself, the calling thread moved there for it, which ends the one in progress), else
    /proc/stat's idle and iowait (clock ticks, which count the period in progress)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(cpu)})
    try:
        now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        tick = 10**9 // os.sysconf("SC_CLK_TCK")
        with open("/proc/stat") as f:
            row = next((x for x in map(str.split, f) if x and x[0] == f"cpu{cpu}"), None)
        if row is None:
            raise RuntimeError(f"/proc/stat has no cpu{cpu}")
        stolen = int(row[8]) * tick
        states = glob.glob(f"/sys/devices/system/cpu/cpu{cpu}/cpuidle/state*/time")
        if states:
            idle = sum(int(open(s).read()) for s in states) * 1000
        else:
            idle = (int(row[4]) + int(row[5])) * tick
        return now, idle, stolen
    finally:
        os.sched_setaffinity(0, before)


def call_ipis(cpu=SERVER_CPU):
    """Function-call interrupts CPU `cpu` has taken since boot (/proc/interrupts' CAL row):
    among them the ones by which RPS hands a CPU the packets it is to receive (a veth pair's,
    lib.ReceiverCores), one for each packet that finds none pending there. 0 where the row
    is not there (not x86)."""
    with open("/proc/interrupts") as f:
        cols = f.readline().split()
        for line in f:
            p = line.split()
            if p and p[0] == "CAL:" and f"CPU{cpu}" in cols:
                return int(p[1 + cols.index(f"CPU{cpu}")])
    return 0


def core_busy_ns(before, after):
    """What the CPU of two `core_ns` readings was busy for between them, in ns (time stolen
    by the hypervisor left out)."""
    return (after[0] - before[0]) - (after[1] - before[1]) - (after[2] - before[2])


def ec_cert(work, name="bench.test"):
    """A self-signed ECDSA P-256 certificate for `name` (its CN and subjectAltName) and its
    key, in `work`, readable by servers that drop privileges; returns (cert, key)."""
    c, k = os.path.join(work, "ec.pem"), os.path.join(work, "ec.key")
    sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-keyout", k, "-out", c, "-days", "30", "-subj", f"/CN={name}",
        "-addext", f"subjectAltName=DNS:{name}"], check=True)
    os.chmod(k, 0o644)
    return c, k


def build_c(src, out, libs=()):
    """Compiles one C file of the repository (`src`, relative to bench/) with gcc -O2 into
    `out`; returns `out`, or None with gcc's complaint printed."""
    path = os.path.join(BENCH, src)
    r = sh(["gcc", "-O2", "-Wall", "-o", out, path, *libs])
    if r.returncode != 0:
        print(f"bench: gcc {src} failed: {(r.stdout + r.stderr).strip()[:400]}", flush=True)
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


def summarise(rows, workloads, peers, bases=("nginx",)):
    """Median and min-max per workload, peer and metric, with `ratio_to_<base>` for each base
    peer measured in the same run."""
    summary = {}
    metrics = ["cpu_us_per_req", "cpu_ns_per_kb", "core_us_per_req", "core_ns_per_kb", "rps",
               "capped_rps", "lat_avg_ms", "lat_p99_ms", "wakes_per_req", "kernel_us_per_req"]
    for wl in workloads:
        summary[wl] = {}
        for peer in peers:
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
