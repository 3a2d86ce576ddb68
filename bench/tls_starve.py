#!/usr/bin/env python3
"""Does a legitimate client still get through a flood of ClientHellos beyond the zone's
handshake capacity? (issue 35, point 7: the handshake queue)

ringx runs one zone pinned to CPU 0 with its handshake budget (`[tls] handshake_share`, 0.5 by
default). First its capacity is measured: `tls_load hello` (bench/tls_load.c: a recorded
ClientHello per connection, closed once the server's flight is back, so the server pays a
full handshake's public-key work) at far more than it can take, for a few seconds; the
handshakes answered per second are the capacity. Then the same flood at twice that rate, and
meanwhile curl (TLS 1.3, a full handshake, then one GET) every 250 ms from CPU 1: how many
get their answer, and how long their handshake took (curl's time_appconnect).

`--flood hold` makes the flood hold its connections (`tls_load hold`): none is given up before
the end, answered or not, so the server's queue only drains by the server's own work and its
connection table fills; the plain flood gives up each connection after 1 s, which also bounds
an unordered queue.

Before the queue was bounded and ordered, a new client waited behind every ClientHello queued
before it, and its second flight went to the back of the queue again. `--base BIN` measures
another build beside this one (alternated, `--rounds` rounds).

Usage: bench/tls_starve.py [--base BIN] [--rounds N] [--secs S] [--flood hello|hold]
Writes bench/results/tls-starve[-hold]-<date>.json and prints a table.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

sys.path.insert(0, os.path.join(lib.ROOT, "tests"))
from tls_pki import Pki  # noqa: E402


def start(binary, work, cert, port, admin):
    cfg = os.path.join(work, f"ringx-{port}.toml")
    with open(cfg, "w") as f:
        f.write(f"""[runtime]
zones = 1
[admin]
listen = "127.0.0.1:{admin}"
[tls]
handshake_share = 0.5
[[server]]
listen = ["127.0.0.1:{port}"]
server_name = ["a.test"]
tls = {{ cert = "{cert[0]}", key = "{cert[1]}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok\\n" }}
""")
    log = open(os.path.join(work, f"ringx-{port}.log"), "wb")
    env = dict(os.environ, RUST_LOG=os.environ.get("STARVE_LOG", "info"))
    p = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, binary, "serve", "-c", cfg], env=env,
                         stdout=log, stderr=log)
    lib.wait_port(port, p)
    return p


def hello(tool, port, rate, secs):
    out = subprocess.run(["taskset", "-c", lib.CLIENT_CPU, tool, "hello", "127.0.0.1", str(port),
                          str(rate), str(secs)], capture_output=True, text=True,
                         timeout=secs + 60).stdout
    return json.loads(out.strip().splitlines()[-1])


def curl(port, ca):
    r = subprocess.run(["taskset", "-c", lib.CLIENT_CPU, "curl", "-sS", "--tlsv1.3",
                        "--max-time", "10", "--interface", "127.0.0.2", "--cacert", str(ca), "--resolve",
                        f"a.test:{port}:127.0.0.1", "-o", "/dev/null", "-w",
                        "%{http_code} %{time_appconnect}", f"https://a.test:{port}/"],
                       capture_output=True, text=True, timeout=20)
    code, t = (r.stdout.split() + ["0", "0"])[:2]
    if code != "200":
        print(f"  curl: {code} {r.stderr.strip()[:200]}", flush=True)
    return code == "200", float(t)


def handshake_cpu_s(admin):
    """The zone's handshake CPU so far (ringx_tls_handshake_cpu_seconds_total)."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r'^ringx_tls_handshake_cpu_seconds_total\{zone="0"\} ([0-9.]+)$', text, re.M)
    return float(m.group(1))


def measure(binary, tool, work, pki, cert, secs, flood_mode):
    port, admin = lib.free_port(), lib.free_port()
    p = start(binary, work, cert, port, admin)
    try:
        # The capacity: the budget's share of a second over what one handshake's first
        # flight costs the zone, measured under a flood the budget does not cap.
        before = handshake_cpu_s(admin)
        probe = hello(tool, port, 500, 3)
        cost = (handshake_cpu_s(admin) - before) / max(probe["done"], 1)
        cap = 0.5 / cost
        rate = max(int(2 * cap), 100)
        fl = subprocess.Popen(["taskset", "-c", lib.CLIENT_CPU, tool, flood_mode, "127.0.0.1",
                               str(port), str(rate), str(secs + 1)],
                              stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        tries = []
        end = time.monotonic() + secs
        while time.monotonic() < end:
            tries.append(curl(port, pki.ca_path))
            time.sleep(0.25)
        flood = json.loads(fl.communicate(timeout=secs + 60)[0].strip().splitlines()[-1])
    finally:
        p.kill()
        p.wait()
    ok = [t for good, t in tries if good]
    return {"handshake_cost_s": cost, "capacity_per_s": cap, "flood_rate_asked": rate, "flood": flood,
            "curl_tries": len(tries), "curl_ok": len(ok),
            "curl_handshake_p50_s": statistics.median(ok) if ok else None,
            "curl_handshake_max_s": max(ok) if ok else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", help="another ringx binary, measured beside this build")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--secs", type=int, default=8)
    ap.add_argument("--flood", choices=["hello", "hold"], default="hello")
    a = ap.parse_args()
    this = os.path.join(lib.ROOT, "target", "release", "ringx")
    peers = [("this build", this)] + ([("base", a.base)] if a.base else [])
    work = tempfile.mkdtemp(prefix="ringx-starve-")
    tool = lib.build_c("tls_load.c", os.path.join(work, "tls_load"), libs=["-lssl", "-lcrypto"])
    pki = Pki(os.path.join(work, "pki"))
    cert = pki.leaf("a", ["a.test"])
    rows = []
    for r in range(a.rounds):
        for name, binary in peers:
            m = measure(binary, tool, work, pki, cert, a.secs, a.flood)
            m.update(peer=name, round=r)
            rows.append(m)
            print(f"{name} round {r}: capacity {m['capacity_per_s']:.0f}/s, flood asked "
                  f"{m['flood_rate_asked']}/s (started {m['flood']['started_per_s']:.0f}/s, "
                  f"answered {m['flood']['done_per_s']:.0f}/s, held at the end "
                  f"{m['flood']['inflight_at_end']}); curl {m['curl_ok']}/{m['curl_tries']} "
                  f"ok, handshake p50 {m['curl_handshake_p50_s']} s, max {m['curl_handshake_max_s']} s",
                  flush=True)
    kind = "" if a.flood == "hello" else f"-{a.flood}"
    lib.write_results(f"tls-starve{kind}", rows, base=a.base, flood=a.flood)


if __name__ == "__main__":
    main()
