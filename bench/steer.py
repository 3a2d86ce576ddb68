#!/usr/bin/env python3
"""Source-port selection micro-benchmark (issue #5): what choosing an upstream connection's
local port costs per connect, and how many steering-hash evaluations it takes.

Runs `cargo bench -p ringx-steer --bench ports` (criterion) and collects, per benchmark, the
mean time per iteration with criterion's 95% interval (target/criterion/*/new/estimates.json)
and the `counters {json}` lines the bench prints (hash evaluations per connect from the port
table's own counters; for the kernel's choice, the share of its ports that would bring the
replies home).

  table            precomputed per-zone table, take + release (target: < 50 ns, 0 hashes)
  dynamic search   F-Stack's ff_rss_check: hash candidate ports until one maps home
  kernel           socket + bind(port 0) + getsockname + close, against socket + close
  connect          whole loopback connects: the kernel's port vs. bind to the table's port
  proxy test bed   short-connection proxy throughput through ringx in network namespaces,
                   software steering on vs off, and the measured locality (bench/steer_proxy.py;
                   root, else skipped with the reason)

Usage: bench/steer.py [--quick] [--no-readme] [--no-proxy]
Writes bench/results/steer-<date>[-quick].json and the "Source-port selection" section of
bench/README.md (between <!-- steer:begin --> and <!-- steer:end -->).
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, HERE)
from lib import machine  # noqa: E402
import steer_proxy  # noqa: E402

TARGET_NS = 50.0
TABLE = "table take+release (DestId)"
CONNECT_TABLE = "connect, table's port (take+bind+connect+release)"


def criterion_home():
    """Where criterion writes (set explicitly: left alone it asks `cargo metadata`, and falls
    back to target/ under the crate when that fails)."""
    tdir = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(os.path.abspath(tdir), "criterion")


def run_bench(quick):
    times = ["--warm-up-time", "1", "--measurement-time", "1" if quick else "3"]
    cmd = ["cargo", "bench", "-p", "ringx-steer", "--bench", "ports", "--"] + times
    print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, CRITERION_HOME=criterion_home())
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    sys.stdout.write(p.stdout[-4000:])
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        sys.exit(f"cargo bench failed with {p.returncode}")
    counters = {}
    for line in p.stdout.splitlines():
        if line.startswith("counters "):
            c = json.loads(line[len("counters "):])
            counters[c.pop("bench")] = c
        m = re.match(r"bind EADDRINUSE retries .*: (\d+)", line)
        if m:
            counters.setdefault(CONNECT_TABLE, {})["bind_eaddrinuse_retries"] = int(m[1])
    return cmd, counters


def criterion_results(base, names, since):
    """name -> mean/median ns with the 95% interval, read from criterion's output files
    written after `since` (older ones are from an earlier run)."""
    out = {}
    for d in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        meta = os.path.join(base, d, "new", "benchmark.json")
        est = os.path.join(base, d, "new", "estimates.json")
        if not (os.path.exists(meta) and os.path.exists(est)) or os.path.getmtime(est) < since:
            continue
        name = json.load(open(meta)).get("full_id")
        if name not in names:
            continue
        e = json.load(open(est))
        out[name] = {
            "mean_ns": e["mean"]["point_estimate"],
            "mean_ci95_ns": [e["mean"]["confidence_interval"]["lower_bound"],
                             e["mean"]["confidence_interval"]["upper_bound"]],
            "median_ns": e["median"]["point_estimate"],
        }
    return out


# Benchmark name -> the counters line that belongs to it (the table benches report under a
# shorter name).
COUNTER_OF = {
    "table take+release (DestId)": "table (DestId)",
    "table take+release (Dest lookup)": "table (Dest lookup)",
}
BENCHES = [
    ("table take+release (DestId)", "table, by destination handle"),
    ("table take+release (Dest lookup)", "table, by destination (one hash-map lookup)"),
    ("dynamic search take+release (2 queues)", "dynamic search, 2 queues"),
    ("dynamic search take+release (4 queues)", "dynamic search, 4 queues"),
    ("dynamic search take+release (16 queues)", "dynamic search, 16 queues"),
    ("kernel socket+bind(0)+getsockname+close", "kernel: socket + bind(0) + getsockname + close"),
    ("kernel socket+close (baseline)", "kernel: socket + close (baseline)"),
    ("connect, kernel's port", "loopback connect, kernel's port"),
    ("connect, table's port (take+bind+connect+release)", "loopback connect, table's port (take + bind + connect + release)"),
]


def fmt_ns(ns):
    return f"{ns / 1000:.2f} µs" if ns >= 1000 else f"{ns:.1f} ns"


def write_readme(result):
    path = os.path.join(HERE, "README.md")
    text = open(path).read()
    rows = []
    for name, label in BENCHES:
        b = result["benches"].get(name)
        if not b:
            continue
        h = b.get("hash_evals_per_connect")
        extra = ""
        if b.get("home_fraction") is not None:
            extra = f"; {100 * b['home_fraction']:.0f}% of its ports bring replies home (1 zone of 4)"
        if b.get("bind_eaddrinuse_retries"):
            extra += f"; {b['bind_eaddrinuse_retries']} ports held by other programs skipped"
        rows.append(f"| {label} | {fmt_ns(b['mean_ns'])} ({fmt_ns(b['mean_ci95_ns'][0])}–"
                    f"{fmt_ns(b['mean_ci95_ns'][1])}) | {'' if h is None else f'{h:.2f}'}{extra} |")
    d = result["derived"]
    connect_note = ("within the run's noise: the 95% intervals overlap" if d["connect_ci_overlap"]
                    else "the 95% intervals do not overlap")
    body = f"""<!-- steer:begin -->

## Source-port selection (issue #5)

`make bench` also runs `python3 bench/steer.py`: the criterion micro-benchmark in
`crates/steer/benches/ports.rs` of choosing an upstream connection's local port so that the
replies come back to the zone's core (RSS model: default Toeplitz key, 128-entry table over 4
queues, destination `10.0.0.1 → 10.0.0.2:8080`, zone 1). Mean per iteration with criterion's
95% interval; hash evaluations from the port table's own counters. Results:
`bench/results/{result['name']}.json`.

Run `{result['date']}`: {result['machine']['cpu']}, {result['machine']['cores']} cores,
Linux {result['machine']['kernel']}.

| selection | time per connect | hash evaluations per connect |
|---|---|---|
{chr(10).join(rows)}

- **Table: {fmt_ns(d['table_ns'])} per connect, {d['table_hash_evals']:.0f} hash evaluations**
  (target < {TARGET_NS:.0f} ns and 0: {'met' if d['target_met'] else 'NOT met'}).
- The dynamic search costs about one Toeplitz hash per queue ({fmt_ns(d['dynamic_4q_ns'])} at
  4 queues). The kernel's own choice costs {fmt_ns(d['kernel_choice_ns'])} of system calls
  (bind(0) + getsockname over socket + close) and brings the replies home only by chance.
- A whole loopback connect bound to the table's port: {fmt_ns(d['connect_table_ns'])}, with the
  kernel's port: {fmt_ns(d['connect_kernel_ns'])} ({d['connect_delta_ns']:+.0f} ns, {connect_note}).
  The explicit bind replaces the port search connect() does itself.
- Load average during the run: {result['loadavg'][0]:.2f} before, {result['loadavg'][1]:.2f} after
  (the machine is shared; the system-call figures move with it, the table's do not).
{proxy_section(result.get('proxy'))}
<!-- steer:end -->"""
    if "<!-- steer:begin -->" in text:
        text = re.sub(r"<!-- steer:begin -->.*?<!-- steer:end -->", lambda _: body, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    open(path, "w").write(text)


def proxy_section(p):
    """The README part for the proxy test bed."""
    head = """
### Short-connection proxy on the steering test bed

Client, ringx (2 zones, CPUs 0 and 1, io_uring) and upstream (nginx, 2 workers,
`keepalive_timeout 0`) in three network namespaces over two veth pairs; `wrk -t2 -c32` with
`Connection: close` from the client namespace, so every request is a new client connection
and a new upstream connection (`bench/steer_proxy.py`). Locality: the share of upstream
connections whose replies were processed on the owning zone's CPU (ringx's
`ringx_upstream_locality_total`, from `SO_INCOMING_CPU`).
"""
    if not p:
        return head + "\nNot run (`--no-proxy`).\n"
    if p.get("skipped"):
        return head + f"\nSkipped: {p['skipped']}.\n"
    st = p["setup"]
    rows = []
    labels = {
        "software": "software steering (XDP on both veths)",
        "software-up": "software steering (XDP on the upstream veth only)",
        "off": "off (kernel's ports, no XDP)",
    }
    for m, label in labels.items():
        v = p["modes"][m]
        loc = "–" if v["locality_mean"] is None else f"{100 * v['locality_mean']:.1f}%"
        rows.append(f"| {label} | {v['rps_mean']:.0f} ({v['rps_min']:.0f}–{v['rps_max']:.0f}) | "
                    f"{v['rps_ratio_to_off']:.2f}× | {v['lat_avg_ms_mean']:.2f} / {v['lat_p99_ms_mean']:.1f} | "
                    f"{loc} | {v['table_hits']:.0f} / {v['hash_evals']:.0f} / {v['fallbacks']:.0f} |")
    sw, off = p["modes"]["software"], p["modes"]["off"]
    return head + f"""
{st['rounds']} rounds of {st['seconds']} s per mode, alternating; mean (min–max) over rounds;
load average {p['loadavg_1m']:.1f} at the end on this {st['zones'].split()[0]}-zone, shared machine.

| mode | req/s | vs off | latency avg / p99 ms | locality | table hits / hash evals / fallbacks |
|---|---|---|---|---|---|
{chr(10).join(rows)}

- Locality: **{100 * (sw['locality_mean'] or 0):.1f}%** with software steering against
  {100 * (off['locality_mean'] or 0):.1f}% without (about 1/2 expected: the upstream's replies
  are processed on whichever CPU its worker ran).
- Throughput: software steering {sw['rps_ratio_to_off']:.2f}× of off ({verdict(sw, off)}),
  upstream veth only {p['modes']['software-up']['rps_ratio_to_off']:.2f}× ({verdict(p['modes']['software-up'], off)}).
  On veth every packet is already processed on its sender's CPU, so the program's work is
  pure overhead there unless it buys locality: each packet it moves costs a cpumap hop (a
  queue, a wake-up of the target CPU's cpumap kernel thread, usually an inter-processor
  interrupt, which a VM pays as an exit, and that thread competing with the zone, wrk and
  nginx for two CPUs), while the cache misses locality saves are small on a 2-CPU VM.
  Moving client packets too (both veths) costs the most: veth had already delivered them
  on the client's CPU, whose zone accepts them (`listen = "cpu"`). The hop is what a NIC
  without RSS needs, where every packet arrives on the one queue's CPU; this test bed
  cannot show that case.
"""


def verdict(a, b):
    """Whether a's throughput differs from b's beyond the spread of their rounds."""
    if a["rps_min"] > b["rps_max"]:
        return "faster in every round"
    if a["rps_max"] < b["rps_min"]:
        return "slower in every round"
    return "the rounds overlap: within this machine's noise"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 s measurements")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite bench/README.md")
    ap.add_argument("--no-proxy", action="store_true", help="skip the proxy test bed")
    args = ap.parse_args()
    start = time.time()
    load_before = os.getloadavg()[0]
    cmd, counters = run_bench(args.quick)
    load_after = os.getloadavg()[0]
    names = [n for n, _ in BENCHES]
    crit = criterion_results(criterion_home(), names, start)
    benches = {}
    for name in names:
        if name not in crit:
            sys.exit(f"no criterion result for {name!r}")
        b = dict(crit[name])
        c = counters.get(COUNTER_OF.get(name, name))
        if c is not None:
            b.update(c)
        elif name.startswith("kernel") or name == "connect, kernel's port":
            b["hash_evals_per_connect"] = 0.0
        benches[name] = b
    ns = lambda n: benches[n]["mean_ns"]  # noqa: E731
    derived = {
        "table_ns": ns(TABLE),
        "table_hash_evals": benches[TABLE].get("hash_evals_per_connect", float("nan")),
        "dynamic_4q_ns": ns("dynamic search take+release (4 queues)"),
        "kernel_choice_ns": ns("kernel socket+bind(0)+getsockname+close") - ns("kernel socket+close (baseline)"),
        "connect_kernel_ns": ns("connect, kernel's port"),
        "connect_table_ns": ns("connect, table's port (take+bind+connect+release)"),
    }
    derived["connect_delta_ns"] = derived["connect_table_ns"] - derived["connect_kernel_ns"]
    ck = benches["connect, kernel's port"]["mean_ci95_ns"]
    ct = benches[CONNECT_TABLE]["mean_ci95_ns"]
    derived["connect_ci_overlap"] = ck[0] <= ct[1] and ct[0] <= ck[1]
    derived["target_met"] = derived["table_ns"] < TARGET_NS and derived["table_hash_evals"] == 0
    proxy = None
    if not args.no_proxy:
        ringx_bin = os.environ.get("RINGX_BIN", os.path.join(ROOT, "target", "release", "ringx"))
        proxy = steer_proxy.run(ringx_bin, args.quick)
    today = datetime.date.today().isoformat()
    name = "steer-" + today + ("-quick" if args.quick else "")
    result = {
        "name": name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "rustc": subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip(),
        "command": " ".join(cmd),
        "loadavg": [load_before, load_after],
        "elapsed_s": round(time.time() - start, 1),
        "target": {"table_ns_below": TARGET_NS, "table_hash_evals": 0},
        "benches": benches,
        "derived": derived,
        "proxy": proxy,
    }
    os.makedirs(RESULTS, exist_ok=True)
    out = os.path.join(RESULTS, name + ".json")
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"wrote {out}")
    if not args.no_readme and not args.quick:
        write_readme(result)
        print("updated bench/README.md")
    print(f"table: {derived['table_ns']:.1f} ns/connect, {derived['table_hash_evals']} hash "
          f"evaluations (target < {TARGET_NS:.0f} ns, 0): {'met' if derived['target_met'] else 'NOT MET'}")
    return 0 if derived["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
