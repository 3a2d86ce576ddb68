#!/usr/bin/env python3
"""gRPC clients that never open their windows (issue 36, point 1) at full size, ringx against
nginx's `grpc_pass`, and what a neighbour's calls see during the attack and after it.

The proxy (ringx, one zone; nginx, one worker) listens h2c on CPU 0 and proxies every call to
one gRPC upstream on CPU 1: Python grpcio's asyncio server (not the thread pool of
tests/grpc_upstream.py, whose 32 workers the attack's 1280 calls would all take, so the
neighbour would wait in the upstream whatever the proxy did). Per peer and round:

- a neighbour, in a process of its own, makes a unary call every 20 ms (grpcio, 10 s
  deadline) from before the attack to 5 s after it, keeping each call's start, latency and
  status;
- `--conns` h2c connections (default 10) announce SETTINGS_INITIAL_WINDOW_SIZE = 0 and open
  `--calls` server-streaming calls each (default 128), each asking for `--mb` MB (default 20,
  in 64 KiB messages); once every response head is in they hold for `--hold` s (default 8),
  never opening a window, then close.

Reported: the neighbour's latencies during the attack (p50, p99, max) and its failures; after
the close, how long until a call that started after it succeeded; and the proxy's upstream
connections during and 5 s after.

Usage: bench/grpc_wedge.py [--conns N] [--calls N] [--mb N] [--hold S] [--rounds N] [--base BIN]
Writes bench/results/grpc-wedge-<date>.json and prints a table.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

# bench/h2.py would shadow the `h2` package the attackers use: out of the path once lib is in.
sys.path = [d for d in sys.path if os.path.abspath(d or ".") != lib.BENCH]
sys.path.insert(0, os.path.join(lib.ROOT, "tests"))
from test_grpc_abuse import RawClient  # noqa: E402
from test_h2_held import connections_to  # noqa: E402

CHUNK = 64 * 1024

UPSTREAM = r"""
import asyncio, sys
import grpc

async def unary(req, ctx):
    return req[::-1]

async def server_stream(req, ctx):
    n, size = (int(x) for x in req.split())
    for i in range(n):
        yield bytes([i % 251]) * size

async def main():
    ident = lambda b: b
    h = grpc.method_handlers_generic_handler("t.T", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, ident, ident),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream, ident, ident),
    })
    s = grpc.aio.server(options=[("grpc.max_concurrent_streams", 100000)])
    s.add_generic_rpc_handlers((h,))
    s.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
    await s.start()
    print("ready", flush=True)
    await s.wait_for_termination()

asyncio.run(main())
"""

NEIGHBOUR = r"""
import sys, time
import grpc
port, out = sys.argv[1], open(sys.argv[2], "w", buffering=1)
with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
    call = ch.unary_unary("/t.T/Unary")
    nxt = time.monotonic()
    while True:
        t = time.monotonic()
        try:
            ok = call(b"ping", timeout=10) == b"gnip"
            out.write(f"{t} {time.monotonic() - t} {'OK' if ok else 'WRONG'}\n")
        except grpc.RpcError as e:
            why = " ".join(str(e.details()).split())
            out.write(f"{t} {time.monotonic() - t} {e.code().name}: {why}\n")
        nxt += 0.02
        time.sleep(max(0.0, nxt - time.monotonic()))
"""


def start_upstream(port):
    p = subprocess.Popen(["taskset", "-c", lib.CLIENT_CPU, sys.executable, "-c", UPSTREAM,
                          str(port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdout.readline().strip() == b"ready"
    return p


def start_proxy(peer, binary, work, port, up):
    if peer == "nginx":
        d = os.path.join(work, f"nginx-{port}")
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""{"user root;" if os.geteuid() == 0 else ""}
daemon off; master_process off; worker_processes 1; worker_rlimit_nofile 65536;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 32768; }}
http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d};
  fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
  server {{ listen 127.0.0.1:{port} http2; http2_max_concurrent_streams 128;
    location / {{ grpc_pass grpc://127.0.0.1:{up}; }} }} }}
""")
        cmd = [lib.nginx_bin(), "-p", d, "-c", conf]
        log = open(os.path.join(work, f"nginx-{port}.log"), "wb")
        p = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, *cmd], stdout=log, stderr=log,
                             preexec_fn=lib.raise_nofile)
        lib.wait_port(port, p)
        return p
    return lib.start_ringx_zone(binary, work, port, f'proxy_pass = "grpc://127.0.0.1:{up}"',
                                f"ringx-{port}.log")


def measure(peer, binary, work, up, a):
    port = lib.free_port()
    p = start_proxy(peer, binary, work, port, up)
    samples = os.path.join(work, f"neighbour-{peer}-{port}.txt")
    n = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(port), samples])
    try:
        time.sleep(2)
        t_attack = time.monotonic()
        ask = f"{a.mb * (1 << 20) // CHUNK} {CHUNK}".encode()
        attackers = [RawClient(port, window=0) for _ in range(a.conns)]
        want = {c: {c.call("ServerStream", ask) for _ in range(a.calls)} for c in attackers}
        for c in attackers:
            c.flush()
        deadline = time.monotonic() + 120
        started = 0
        for c in attackers:
            while not want[c] <= (c.heads | c.ended) and time.monotonic() < deadline:
                if not c.pump():
                    break
            started += len(want[c] & c.heads)
        t_heads = time.monotonic()
        ups_during = connections_to(up)
        time.sleep(a.hold)
        for c in attackers:
            c.close()
        t_close = time.monotonic()
        time.sleep(5)
        ups_after = connections_to(up)
        t_end = time.monotonic()
    finally:
        n.kill()
        n.wait()
        p.send_signal(signal.SIGKILL)
        p.wait()
    rows = []
    with open(samples) as f:
        for line in f:
            t, lat, st = line.rstrip("\n").split(" ", 2)
            rows.append((float(t), float(lat), st))
    during = [r for r in rows if t_attack <= r[0] < t_close]
    before = [r for r in rows if r[0] < t_attack]
    after = [r for r in rows if t_close <= r[0] < t_end]
    def ok(rs):
        return [r[1] for r in rs if r[2] == "OK"]

    first_ok = next((r[0] + r[1] - t_close for r in after if r[2] == "OK"), None)
    return {"peer": peer, "attack_calls": a.conns * a.calls, "calls_started": started,
            "heads_in_s": t_heads - t_attack,
            "upstream_conns_during": ups_during, "upstream_conns_5s_after": ups_after,
            "neighbour_before_p99_ms": lib.pct_ms(ok(before), 0.99),
            "neighbour_during_calls": len(during),
            "neighbour_during_failed": [r[2] for r in during if r[2] != "OK"],  # "CODE: details"
            "neighbour_during_p50_ms": lib.pct_ms(ok(during), 0.5),
            "neighbour_during_p99_ms": lib.pct_ms(ok(during), 0.99),
            "neighbour_during_max_ms": lib.pct_ms(ok(during), 1.0),
            "neighbour_after_failed": [r[2] for r in after if r[2] != "OK"],
            "first_ok_after_close_s": first_ok}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--calls", type=int, default=128)
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--hold", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--base", help="another ringx binary, measured beside this build")
    a = ap.parse_args()
    lib.raise_nofile()
    work = tempfile.mkdtemp(prefix="ringx-grpcwedge-")
    up = lib.free_port()
    upstream = start_upstream(up)
    peers = [("nginx", None), ("ringx", lib.RINGX)] + ([("ringx-base", a.base)] if a.base else [])
    rows = []
    try:
        for r in range(a.rounds):
            for name, binary in peers:
                m = measure("nginx" if name == "nginx" else "ringx", binary, work, up, a)
                m.update(peer=name, round=r)
                rows.append(m)
                print(f"{name} round {r}: {m['calls_started']}/{m['attack_calls']} calls started "
                      f"in {m['heads_in_s']:.1f} s, upstream conns {m['upstream_conns_during']}; "
                      f"neighbour during: {m['neighbour_during_calls']} calls, "
                      f"{len(m['neighbour_during_failed'])} failed, p50 "
                      f"{m['neighbour_during_p50_ms']} ms, p99 {m['neighbour_during_p99_ms']} ms, "
                      f"max {m['neighbour_during_max_ms']} ms; after close: first OK in "
                      f"{m['first_ok_after_close_s']} s, {len(m['neighbour_after_failed'])} "
                      f"failed; upstream conns 5 s after {m['upstream_conns_5s_after']}",
                      flush=True)
    finally:
        upstream.kill()
        upstream.wait()
    lib.write_results("grpc-wedge", rows)


if __name__ == "__main__":
    main()
