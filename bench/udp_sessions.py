#!/usr/bin/env python3
"""New UDP sessions: how fast ringx `[[stream]] protocol = "udp"` and nginx's `stream` UDP
proxy take clients they have not seen, and what the kernel drops at the listener meanwhile
(issue 35).

Same set-up as bench/udp.py (its Proxy and bench/udp_load.c): each proxy pinned to CPU 0
(one zone, one nginx worker), the load and the upstream (a C echo server) on CPU 1, the
proxy's CPU from its threads' schedstat, peers alternated A B C A B C over the rounds, ratios
to nginx in the same run. Every datagram comes from a client address the proxy has not seen
(127.4.0.0 upwards, all loopback; one client socket sets each datagram's source with
IP_PKTINFO, so the client pays no socket per source), 64 bytes, each answered once
(`responses = 1`, nginx `proxy_responses 1`): every datagram opens a session and a socket to
the server, and its answer ends it. Listener drops are the drops column of /proc/net/udp
for the proxy's port (the kernel's count for that socket; the system-wide RcvbufErrors delta
of /proc/net/snmp is kept beside it).

Three measurements:
- `rate` (closed loop): 64 new clients in flight, each answer sends the next; new sessions
  per proxy CPU-second, and per second.
- `sustained` (open loop): new clients at a fixed rate for a fixed time, a ladder of rates
  from 0.6x the peer's closed-loop rate of that round, x1.1 a step until a rate fails twice
  (a stall of the shared machine is forgiven once), then once halfway back; a rate is kept
  when the listener dropped nothing, every datagram was answered, and the queue did not grow
  (the median latency of the last quarter's datagrams under 10 ms: a queue that grows by 1%
  of the rate over 2 s shows as 17 ms). The figure is the highest rate kept. A failed rate
  says why, and whether other tasks had the proxy's CPU or the load's CPU was full.
- `burst`: 10 000 datagrams from 10 000 new sources as fast as one sendmmsg loop sends them,
  then the listener's drops: ringx with its default buffer (4m), `rcvbuf = "208k"` (the
  kernel doubles what it is given, so that is 416 KiB) and `rcvbuf = "0"` (the kernel default,
  208 KiB, which is what ringx had before 03dd01f); nginx with its default (the kernel's) and
  `listen ... udp rcvbuf=4m`.

The peers for `rate` and `sustained` are nginx with the kernel's buffer (as in bench/udp.py),
nginx with rcvbuf=4m (ringx's default, so the same buffer), and ringx on io_uring and on
epoll with their default. Full: 3 rounds, 2 s per run and per rate, about 5.5 minutes;
--quick: 2 rounds of 1 s, about 2 minutes.

Usage: bench/udp_sessions.py [--quick] [--rounds N] [--duration S]
Writes bench/results/udp-sessions-<date>.json and its block of bench/README.md's UDP section.
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
import udp  # noqa: E402  (Proxy, free_udp_port)

ROOT = lib.ROOT
RESULTS = lib.RESULTS
LOAD_CPU = lib.CLIENT_CPU
SIZE = 64
WINDOW = 64
BURST = 10_000
LAT_LIMIT_US = 10_000
STEP = 1.1
MAX_UP = 20
MAX_DOWN = 4
# name: (rcvbuf or None for the peer's default, description)
CONFIGS = {
    "nginx": (None, "nginx, kernel default buffer (rmem_default)"),
    "nginx-4m": ("4m", "nginx, listen ... udp rcvbuf=4m"),
    "ringx-uring": (None, "ringx io_uring, default rcvbuf (4m)"),
    "ringx-epoll": (None, "ringx epoll, default rcvbuf (4m)"),
    "ringx-uring-208k": ("208k", 'ringx io_uring, rcvbuf = "208k"'),
    "ringx-epoll-208k": ("208k", 'ringx epoll, rcvbuf = "208k"'),
    "ringx-uring-0": ("0", 'ringx io_uring, rcvbuf = "0" (kernel default, as before 03dd01f)'),
    "ringx-epoll-0": ("0", 'ringx epoll, rcvbuf = "0" (kernel default, as before 03dd01f)'),
}
PEERS = ["nginx", "nginx-4m", "ringx-uring", "ringx-epoll"]
BURST_PEERS = ["nginx", "nginx-4m", "ringx-uring", "ringx-uring-208k", "ringx-uring-0",
               "ringx-epoll", "ringx-epoll-208k", "ringx-epoll-0"]


class Sources:
    """The next unused client address index (udp_load takes it as FIRST): every run starts
    past what the earlier ones used."""

    def __init__(self):
        self.next = 0

    def take(self, n):
        first = self.next
        self.next += n
        return first


def listener_drops(port):
    """What the kernel dropped at the UDP sockets bound to `port` (/proc/net/udp drops)."""
    total = 0
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port:
                total += int(f[-1])
    return total


def rcvbuf_errors():
    lines = [ln.split() for ln in open("/proc/net/snmp") if ln.startswith("Udp:")]
    return int(lines[1][lines[0].index("RcvbufErrors")])


def skmem_rb(port):
    """The listener's receive buffer as the kernel keeps it (ss -m rb, bytes)."""
    out = lib.sh(["ss", "-uamnH", "sport", "=", f":{port}"]).stdout
    sizes = [int(x) for x in re.findall(r"rb(\d+)", out)]
    return sizes[0] if sizes else None


def cpu_ticks():
    """/proc/stat's counters of the proxy's and the load's CPUs: {cpu: (busy, all)}."""
    out = {}
    for ln in open("/proc/stat"):
        f = ln.split()
        if f[0] in (f"cpu{lib.SERVER_CPU}", f"cpu{LOAD_CPU}"):
            v = list(map(int, f[1:9]))
            out[f[0]] = (sum(v) - v[3] - v[4], sum(v))  # less idle and iowait
    return out


def busy(before, after):
    """Each CPU's busy share between two cpu_ticks()."""
    return {c: round((after[c][0] - before[c][0]) / max(1, after[c][1] - before[c][1]), 3)
            for c in before}


def run_load(args, timeout):
    cmd = ["taskset", "-c", LOAD_CPU, *map(str, args)]
    out = lib.sh(cmd, timeout=timeout)
    shown = " ".join(["taskset", "-c", LOAD_CPU, "udp_load", *map(str, args[1:])])
    return out.stdout.strip(), shown, out.stderr.strip()


def fields(line):
    return {k: float(v) for k, v in re.findall(r"(\w+) (-?[\d.]+)", line)}


def closed_loop(load, p, secs, src):
    pids = lib.proc_tree(p.proc.pid)
    d0, e0, t0, c0 = listener_drops(p.port), rcvbuf_errors(), cpu_ticks(), lib.cpu_ns(pids)
    first = src.take(int(secs * 400_000))
    out, cmd, _ = run_load([load, "fresh", p.port, WINDOW, secs, SIZE, first], secs + 30)
    c1, t1, d1, e1 = lib.cpu_ns(pids), cpu_ticks(), listener_drops(p.port), rcvbuf_errors()
    f = fields(out)
    if "answered" not in f:
        raise RuntimeError(f"{cmd} gave no result: {out!r}")
    cpu_s = (c1 - c0) / 1e9
    return {"peer": p.name, "sent": int(f["sent"]), "answered": int(f["answered"]),
            "lost": int(f["lost"]), "seconds": f["seconds"], "proxy_cpu_s": round(cpu_s, 4),
            "sessions_per_s": f["answered"] / f["seconds"],
            "sessions_per_cpu_s": f["answered"] / cpu_s if cpu_s > 0 else None,
            "listener_drops": d1 - d0, "rcvbuf_errors": e1 - e0,
            "cpu_busy": busy(t0, t1), "cmd": cmd}


def paced(load, p, rate, secs, src):
    pids = lib.proc_tree(p.proc.pid)
    d0, e0, t0, c0 = listener_drops(p.port), rcvbuf_errors(), cpu_ticks(), lib.cpu_ns(pids)
    w0 = time.monotonic()
    first = src.take(int(rate * secs) + 64)
    out, cmd, _ = run_load([load, "paced", p.port, round(rate), secs, SIZE, first], secs + 30)
    c1, t1, d1, e1 = lib.cpu_ns(pids), cpu_ticks(), listener_drops(p.port), rcvbuf_errors()
    wall = time.monotonic() - w0
    f = fields(out)
    if "answered" not in f:
        raise RuntimeError(f"{cmd} gave no result: {out!r}")
    sent, answered = int(f["sent"]), int(f["answered"])
    drops = d1 - d0
    why = []
    if f["rate"] < 0.97 * rate:
        why.append(f"the client sent {f['rate']:.0f}/s only")
    if drops:
        why.append(f"{drops} dropped at the listener")
    if answered < sent:
        why.append(f"{sent - answered} unanswered")
    if f["tail_p50_us"] > LAT_LIMIT_US or f["tail_p50_us"] < 0:
        why.append(f"queue grew (last quarter's median latency {f['tail_p50_us'] / 1000:.1f} ms)")
    cpu_s = (c1 - c0) / 1e9
    b = busy(t0, t1)
    load_busy, proxy_busy = b.get(f"cpu{LOAD_CPU}", 0), b.get(f"cpu{lib.SERVER_CPU}", 0)
    # The proxy's share of its CPU's busy time: the rest went to other tasks (the machine is
    # shared), and a proxy that gets less of its CPU keeps a lower rate.
    share = cpu_s / (wall * proxy_busy) if wall > 0 and proxy_busy > 0 else None
    if why and share is not None and share < 0.8:
        why.append(f"the proxy had {min(share, 1):.0%} of its CPU's busy time")
    if why and load_busy >= 0.97:
        why.append(f"the load's CPU {load_busy:.0%} busy")
    return {"peer": p.name, "rate": round(rate), "sent": sent, "answered": answered,
            "achieved_rate": f["rate"], "seconds": f["seconds"],
            "p50_us": f["p50_us"], "p99_us": f["p99_us"], "tail_p50_us": f["tail_p50_us"],
            "max_us": f["max_us"], "listener_drops": drops, "rcvbuf_errors": e1 - e0,
            "proxy_cpu_s": round(cpu_s, 4), "cpu_busy": b, "interval_s": round(wall, 3),
            "proxy_share_of_cpu": round(share, 3) if share is not None else None,
            "sessions_per_cpu_s": answered / cpu_s if cpu_s > 0 else None,
            "kept": not why, "why": "; ".join(why), "cmd": cmd}


def ladder(load, p, start, secs, src, log):
    """The highest rate kept, from `start` up by STEP until a rate fails (down by 0.75 while
    the first ones fail), then one step halfway between the last kept and the first failed.
    A rate that fails is tried once more (a stall of the shared machine is not the proxy's
    rate); it fails when both tries do."""
    steps, ended_by = [], [None]

    def attempt(rate):
        for _ in range(2):
            r = paced(load, p, rate, secs, src)
            steps.append(r)
            log(r)
            time.sleep(0.3)
            if r["kept"]:
                return True
        ended_by[0] = f"{r['rate']}/s: {r['why']}"
        return False

    rate, kept, failed = start, None, None
    for _ in range(MAX_UP):
        if attempt(rate):
            kept = rate
            rate *= STEP
        else:
            failed = rate
            break
    if kept is None:
        rate = start
        for _ in range(MAX_DOWN):
            rate *= 0.75
            if attempt(rate):
                kept = rate
                break
            failed = rate
    if kept is not None and failed is not None:
        mid = (kept * failed) ** 0.5
        if attempt(mid):
            kept = mid
    if failed is None:
        ended_by[0] = f"none failed up to {round(kept)}/s, the ladder's top (a lower bound)"
    return (round(kept) if kept else None), steps, ended_by[0]


def burst(load, p, src):
    d0, e0 = listener_drops(p.port), rcvbuf_errors()
    first = src.take(BURST)
    out, cmd, err = run_load([load, "burst", p.port, BURST, SIZE, first], 30)
    time.sleep(0.1)
    d1, e1 = listener_drops(p.port), rcvbuf_errors()
    f = fields(out)
    if "answered" not in f:
        raise RuntimeError(f"{cmd} gave no result: {out!r} {err!r}")
    sent, answered, drops = int(f["sent"]), int(f["answered"]), d1 - d0
    return {"peer": p.name, "sent": sent, "answered": answered, "listener_drops": drops,
            "other_lost": sent - answered - drops, "rcvbuf_errors": e1 - e0,
            "send_seconds": f["send_seconds"],
            "send_rate": sent / f["send_seconds"] if f["send_seconds"] > 0 else None,
            "cmd": cmd}


def stats(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)}


def summarise(rows):
    s = {"rate": {}, "sustained": {}, "burst": {}}
    for peer in PEERS:
        rs = [r for r in rows["rate"] if r["peer"] == peer]
        if rs:
            s["rate"][peer] = {m: stats([r[m] for r in rs])
                               for m in ("sessions_per_cpu_s", "sessions_per_s")}
            s["rate"][peer]["lost"] = sum(r["lost"] for r in rs)
            s["rate"][peer]["listener_drops"] = sum(r["listener_drops"] for r in rs)
        ks = [r for r in rows["sustained"] if r["peer"] == peer]
        if ks:
            s["sustained"][peer] = {"rate": stats([r["kept"] for r in ks])}
            at = [st["sessions_per_cpu_s"] for r in ks for st in r["steps"]
                  if st["kept"] and round(st["rate"]) == r["kept"]]
            s["sustained"][peer]["sessions_per_cpu_s_at_rate"] = stats(at)
            s["sustained"][peer]["ended_by"] = [r["ended_by"] for r in ks]
            s["sustained"][peer]["failed_once_then_kept"] = sum(
                1 for r in ks for a, b in zip(r["steps"], r["steps"][1:])
                if not a["kept"] and b["kept"] and a["rate"] == b["rate"])
    for peer in BURST_PEERS:
        bs = [r for r in rows["burst"] if r["peer"] == peer]
        if bs:
            s["burst"][peer] = {m: stats([r[m] for r in bs])
                                for m in ("listener_drops", "answered", "other_lost",
                                          "send_rate")}
    for part, metric in (("rate", "sessions_per_cpu_s"), ("rate", "sessions_per_s"),
                         ("sustained", "rate")):
        for base in ("nginx", "nginx-4m"):
            b = s[part].get(base, {}).get(metric)
            for peer, v in s[part].items():
                if b and v.get(metric) and b["median"]:
                    v[metric][f"ratio_to_{base}"] = v[metric]["median"] / b["median"]
    return s


def report(result, name):
    s, cf = result["summary"], result["configs"]
    k = lambda v: f"{v / 1000:.1f}k"  # noqa: E731
    lines = [f"Run of {result['date']} ({result['mode']}, {result['rounds']} round(s), "
             f"{result['duration_s']} s per closed-loop run and per rate, "
             f"{result['elapsed_s']:.0f} s in all) on {result['machine']['cpu']}, kernel "
             f"{result['machine']['kernel']}; {result['versions']['nginx']}, "
             f"{result['versions']['ringx']}; load average before "
             f"{result['load_avg_before'][0]:.2f}, after {result['load_avg_after'][0]:.2f}. "
             f"Raw data: `bench/results/udp-sessions-{name}.json`.", "",
             "**New sessions**, every datagram from a new client address, answered once. "
             "Median (min–max) over the rounds; ratio to nginx (kernel buffer) in bold.", "",
             "| peer | new sessions per proxy CPU-second | closed loop, sessions/s "
             "| sustained rate, sessions/s (no listener drop, no queue) | lost |",
             "|---|---|---|---|---|"]
    for peer in PEERS:
        r, u = s["rate"].get(peer), s["sustained"].get(peer)
        if not r or not r.get("sessions_per_cpu_s"):
            continue
        c, q = r["sessions_per_cpu_s"], r["sessions_per_s"]
        sus = "—"
        if u and u.get("rate"):
            x = u["rate"]
            sus = (f"{k(x['median'])} ({k(x['min'])}–{k(x['max'])}) "
                   f"**{x.get('ratio_to_nginx', 0):.2f}×**")
        lines.append(f"| {peer} | {k(c['median'])} ({k(c['min'])}–{k(c['max'])}) "
                     f"**{c.get('ratio_to_nginx', 0):.2f}×** | {k(q['median'])} "
                     f"**{q.get('ratio_to_nginx', 0):.2f}×** | {sus} | {r['lost']} |")
    lines += ["", "What ended each peer's ladder (the rate just above the one kept, failed "
              "twice; per round): " +
              "; ".join(f"{peer}: " + " / ".join(w or "none failed" for w in u["ended_by"])
                        for peer, u in s["sustained"].items()) + ". Rates that failed once "
              "and were kept on the second try: " +
              ", ".join(f"{peer} {u['failed_once_then_kept']}"
                        for peer, u in s["sustained"].items()) + ".", "",
              f"**A burst of {BURST} new clients** sent as fast as one sendmmsg loop goes "
              "(median send rate in the table), and what the kernel dropped at the listener. "
              "Median (min–max) over the rounds.", "",
              "| peer | listener buffer (ss -m rb) | sent at | dropped at the listener "
              "| answered |", "|---|---|---|---|---|"]
    for peer in BURST_PEERS:
        b = s["burst"].get(peer)
        if not b:
            continue
        d, a, sr = b["listener_drops"], b["answered"], b["send_rate"]
        rb = cf[peer]["rb"]
        lines.append(f"| {cf[peer]['desc']} | {rb // 1024 if rb else '?'} KiB "
                     f"| {k(sr['median'])}/s | {d['median']:.0f} ({d['min']:.0f}–{d['max']:.0f}) "
                     f"| {a['median']:.0f} |")
    cmds = sorted({re.sub(r"(udp_load \w+) \d+ ", r"\1 PORT ",
                          re.sub(r" \d+$", " FIRST", r["cmd"]))
                   for part in ("rate", "burst") for r in result["rows"][part]})
    lines += ["", "Command: `flock /tmp/ringx-bench.lock python3 bench/udp_sessions.py"
              + (" --quick" if result["mode"] == "quick" else "") + "` (`make bench-udp` runs "
              "it after bench/udp.py); the load: " + "; ".join(f"`{c}`" for c in cmds) +
              "; the ladder: `udp_load paced PORT RATE SECONDS 64 FIRST`."]
    readme = os.path.join(ROOT, "bench", "README.md")
    txt = open(readme).read()
    begin, end = "<!-- udp-sessions:begin -->", "<!-- udp-sessions:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in txt:
        txt = txt[:txt.index(begin)] + block + txt[txt.index(end) + len(end):]
    else:
        anchor = "<!-- udp:end -->"
        i = txt.index(anchor) + len(anchor)
        txt = (txt[:i] + "\n\n### New sessions (`bench/udp_sessions.py`, also in `make "
               "bench-udp`)\n\n" + block + txt[i:])
    open(readme, "w").write(txt)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=float, help="seconds per closed-loop run and per rate")
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    secs = args.duration or (1 if args.quick else 2)
    if not os.path.exists(udp.NGINX_STREAM):
        sys.exit(f"bench/udp_sessions: {udp.NGINX_STREAM} missing (scripts/install-deps.sh "
                 "installs libnginx-mod-stream)")
    if not os.path.exists(lib.RINGX):
        sys.exit(f"bench/udp_sessions: {lib.RINGX} missing (cargo build --release)")
    work = tempfile.mkdtemp(prefix="ringx-udp-sessions-")
    os.chmod(work, 0o755)
    load = lib.build_c("udp_load.c", os.path.join(work, "udp_load"))
    if not load:
        sys.exit("bench/udp_sessions: cannot build bench/udp_load.c")
    up_port = udp.free_udp_port()
    up = subprocess.Popen(["taskset", "-c", LOAD_CPU, load, "echo", str(up_port)])
    src = Sources()
    load_before = os.getloadavg()
    rows = {"rate": [], "sustained": [], "burst": []}
    t0 = time.time()
    proxies = {}
    try:
        for name, (rcvbuf, _) in CONFIGS.items():
            p = udp.Proxy(name, "sessions", work, up_port, responses=1, rcvbuf=rcvbuf)
            p.start()
            proxies[name] = p
            closed_loop(load, p, 0.5, src)  # warm-up
        configs = {n: {"rcvbuf": CONFIGS[n][0], "desc": CONFIGS[n][1],
                       "rb": skmem_rb(p.port)} for n, p in proxies.items()}
        for rnd in range(rounds):
            closed = {}
            for name in PEERS:
                r = closed_loop(load, proxies[name], secs, src)
                r["round"] = rnd
                rows["rate"].append(r)
                closed[name] = r["sessions_per_s"]
                print(f"rate   r{rnd} {name:16s} sessions/s={r['sessions_per_s']:>8.0f} "
                      f"per cpu-s={r['sessions_per_cpu_s'] or 0:>8.0f} lost={r['lost']} "
                      f"drops={r['listener_drops']}", flush=True)
            for name in PEERS:
                def log(st, name=name):
                    print(f"ladder r{rnd} {name:16s} rate={st['rate']:>7d} "
                          f"sent/s={st['achieved_rate']:>7.0f} p50={st['p50_us']:.0f}us "
                          f"tail_p50={st['tail_p50_us']:.0f}us drops={st['listener_drops']} "
                          f"{'kept' if st['kept'] else 'FAIL: ' + st['why']}", flush=True)
                kept, steps, ended = ladder(load, proxies[name], 0.6 * closed[name], secs,
                                            src, log)
                rows["sustained"].append({"peer": name, "round": rnd, "kept": kept,
                                          "ended_by": ended, "steps": steps})
                print(f"sustained r{rnd} {name:16s} {kept}", flush=True)
            for name in BURST_PEERS:
                r = burst(load, proxies[name], src)
                r["round"] = rnd
                rows["burst"].append(r)
                print(f"burst  r{rnd} {name:16s} sent={r['sent']} in {r['send_seconds']:.3f}s "
                      f"answered={r['answered']} listener_drops={r['listener_drops']} "
                      f"other={r['other_lost']}", flush=True)
                time.sleep(0.2)
    finally:
        for p in proxies.values():
            p.stop()
        up.kill()
        up.wait()
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "mode": "quick" if args.quick else "full", "rounds": rounds, "duration_s": secs,
              "elapsed_s": round(time.time() - t0, 1), "machine": lib.machine(),
              "versions": {"nginx": lib.sh([lib.nginx_bin(), "-v"]).stderr.strip(),
                           "ringx": lib.sh([lib.RINGX, "--version"]).stdout.strip(),
                           "ringx_commit": lib.sh(["git", "-C", ROOT, "rev-parse", "--short",
                                                   "HEAD"]).stdout.strip()},
              "command": " ".join(["python3", "bench/udp_sessions.py", *sys.argv[1:]]),
              "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
              "sysctl": {k: open(f"/proc/sys/net/core/{k}").read().strip()
                         for k in ("rmem_default", "rmem_max")},
              "method": {"proxy_cpu": lib.SERVER_CPU, "load_and_upstream_cpu": LOAD_CPU,
                         "cpu": "schedstat run time of the proxy's processes only",
                         "sources": "every datagram from a new 127.4.0.0/8+ address "
                                    "(IP_PKTINFO on one client socket), 64 B, responses 1",
                         "window": WINDOW, "burst": BURST, "ladder_step": STEP,
                         "kept_if": f"no listener drop, all answered, last quarter's median "
                                    f"latency <= {LAT_LIMIT_US} us, client sent >= 97% of "
                                    f"the rate",
                         "listener_drops": "/proc/net/udp drops column of the proxy's port"},
              "configs": configs, "rows": rows, "summary": summarise(rows)}
    os.makedirs(RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "")
    path = os.path.join(RESULTS, f"udp-sessions-{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench/udp_sessions: wrote {path}")
    if not args.no_report:
        report(result, name)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
