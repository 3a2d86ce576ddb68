#!/usr/bin/env python3
"""The interception overhead of libringx_preload.so, in ns per connect() and per accept4(),
against the plain calls (issue #25). One C program (bench/preload_calls.c), pinned to CPU 1,
connects to its own loopback reuseport listener and accepts, ROUNDS times per run, timing
each call; the configurations alternate, RUNS times each, and the medians are reported:

* plain: no library;
* inert: the library preloaded without settings (every call one pointer load away from libc);
* listen: `RINGX_PRELOAD_LISTEN=cpu` (the listener grouped and claimed; accept4 checks it);
* connect: also `RINGX_PRELOAD_MODE=software` with the listener as a table destination, so
  every connect takes a table port and binds it first (the XDP program is not needed to
  measure the calls and is not attached).

Root for the listen configurations (eBPF). Writes bench/results/preload-<date>.json.
Usage: bench/preload.py [--quick]
"""

import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import build_c, free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    quick = "--quick" in sys.argv
    runs, rounds = (3, 2000) if quick else (9, 4000)
    lib = os.path.join(ROOT, "target", "release", "libringx_preload.so")
    if not os.path.isfile(lib):
        sys.exit(f"bench: {lib} is missing (make release)")
    work = tempfile.mkdtemp(prefix="ringx-preload-bench-")
    prog = build_c("preload_calls.c", os.path.join(work, "preload_calls"))
    if prog is None:
        sys.exit(1)
    cpu = sorted(os.sched_getaffinity(0))[-1]
    configs = {
        "plain": {},
        "inert": {"LD_PRELOAD": lib},
        "listen": {"LD_PRELOAD": lib, "RINGX_PRELOAD_LISTEN": "cpu"},
        "connect": {"LD_PRELOAD": lib, "RINGX_PRELOAD_LISTEN": "cpu",
                    "RINGX_PRELOAD_MODE": "software", "RINGX_PRELOAD_CPUS": str(cpu)},
    }
    samples = {k: {"connect": [], "accept": []} for k in configs}
    for _ in range(runs):
        for name, env in configs.items():
            port = free_port()
            env = dict(env)
            if name == "connect":
                env["RINGX_PRELOAD_DESTS"] = f"127.0.0.1 127.0.0.1 {port}"
            p = subprocess.run(["taskset", "-c", str(cpu), prog, str(port), str(rounds)],
                               env={**os.environ, **env}, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"bench: {name}: {p.stderr.strip()}")
            c, a = map(int, p.stdout.split())
            samples[name]["connect"].append(c)
            samples[name]["accept"].append(a)
    med = {k: {op: statistics.median(v) for op, v in s.items()} for k, s in samples.items()}
    print(f"interception overhead, ns per call (median of {runs} runs x {rounds} rounds, CPU {cpu})")
    print(f"{'config':<8} {'connect':>9} {'+ vs plain':>10} {'accept4':>9} {'+ vs plain':>10}")
    for k, m in med.items():
        print(f"{k:<8} {m['connect']:>9.0f} {m['connect'] - med['plain']['connect']:>+10.0f} "
              f"{m['accept']:>9.0f} {m['accept'] - med['plain']['accept']:>+10.0f}")
    out = os.path.join(ROOT, "bench", "results",
                       f"preload-{datetime.date.today().isoformat()}{'-quick' if quick else ''}.json")
    with open(out, "w") as f:
        json.dump({"runs": runs, "rounds": rounds, "cpu": cpu, "median_ns": med,
                   "samples_ns": samples}, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
