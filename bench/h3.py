#!/usr/bin/env python3
"""HTTP/3 benchmark: ringx against Caddy over HTTP/3, and against ringx's own h2 and HTTPS
(HTTP/1.1) over TLS on the same certificate, on one 2-core machine.

Method as bench/h2.py (bench/README.md): the server pinned to CPU 0 (one ringx zone; Caddy
with GOMAXPROCS=1), the load client to CPU 1, peers alternated A B C D ... for `--rounds`
rounds; the figure that matters is the server's own CPU (every thread, schedstat) per
request. Ratios are to Caddy and to ringx's h2 measured in the same run.

The QUIC client (quic-go, one core; its GETs on raw streams, bench/h3load/raw.go) cannot load
ringx to saturation, where h2load can: a server below its capacity batches less and pays its
wake-ups over fewer requests. So ringx's h2 and HTTPS are offered the rate ringx-h3 reached
in the same round (h2load --rps), and their CPU per request compares like with like; `ringx-h2-max` is h2 unlimited,
for reference. `ringx-h3-nogso` and `ringx-h3-nogro` are ringx-h3 with `[runtime]
quic_gso = false` and `quic_gro = false`: their ratio to ringx-h3 is what each offload
saves (the client, quic-go, sends with GSO itself, so GRO has batches to coalesce).

The 1 MB download also measures the transport floor, what the machine takes to move the
bytes with no protocol work, offered ringx-h3's rate (bench/yardstick/bulk_floor.c):
`floor-udp` sends them as datagrams the size and in the batches ringx-h3 sends (GSO),
`floor-tcp` over TCP; and `seal-packet` / `seal-record`, AES-128-GCM alone per QUIC packet
and per TLS record (`openssl speed -aead`). ringx-h3 is reported against the UDP floor and
ringx-h2 against the TCP floor: how far each protocol stack is from what its transport
allows, beside how far h3 is from h2.

And the QUIC library's own share, in memory with no I/O (crates/quic/benches/transfer.rs):
`lib-quic` is quinn-proto through ringx-quic's configuration sending the same 1 MB in
GSO-sized batches, the server's calls timed; `lib-quiche` the same download on cloudflare's
quiche (bench/quiche_transfer), the other library issue 38 names. A library's row plus
`floor-udp` is what ringx-h3 would cost on it with nothing of its own.

The 1 MB upload gets one the other way: `floor-udp` is a sink that receives with UDP_GRO and
acknowledges as often as ringx-h3 did, sent datagrams of the size and in the GSO batches
ringx-h3 received in the same round (its `ringx_quic_datagrams_total`, `_bytes_total` and
`_batches_total`, direction in), at its rate; `floor-tcp` a TCP sink. With `seal-packet`
(opening a packet costs what sealing it does) they say how much of the upload's h3 × h2 the
machine imposes.

The 64-byte workloads get a floor too: `floor-udp` receives the datagrams ringx-h3 received in
the same round (their number from its `ringx_quic_datagrams_total` over h3load's measured
span, their mean size from `ringx_quic_bytes_total`), at its rate, in bursts of what ringx-h3
took per wake-up (its voluntary context switches), and answers as many as ringx-h3 sent, one
datagram each (of the mean size it sent): the kernel's per-datagram work and the wake-ups,
with no protocol work.
`floor-udp-irq` is the same floor offered the datagrams in bursts of what reached ringx-h3 per
interrupt to its CPU (`ipis`, the function-call interrupts by which RPS hands a datagram over,
under --veth): ringx-h3 took quic-go's datagrams one or two an interrupt without waking, which
`floor-udp`'s bursts do not reproduce. It wakes at each burst where ringx-h3 did not, so the
two floors bound what the datagrams cost the machine from below and from above
(h3_floors.floor_chat). `seal-small` is AES-128-GCM alone on those datagrams (each in and out
once). All are per request, as ringx-h3's requests were per datagram.

Load clients: bench/h3load (quic-go; Debian's h2load is built without HTTP/3), built here
with Go; h2load for h2 and, with --h1, HTTPS.

Two shapes of h2 client on the 64-byte workloads. `ringx-h2` is h2load as it runs by
default, one thread for every connection: each turn of its loop reads the responses of all
the connections that have one and writes their next requests, so they reach the server
together and one wake-up serves many. quic-go instead runs each connection on its own
goroutine: a connection's request goes out as soon as its own response came in, apart from
the others', as separate clients' do. `ringx-h2-apart` is h2 in that shape: h2load with a
thread per connection (`-t` = connections), offered the same rate. Its hundred threads on one
core may fall short of that rate, so `ringx-h3-apart` runs ringx-h3 again offered the rate
`ringx-h2-apart` reached (h3load -rps, per connection as h2load's --rps): the two then share
the client's shape and the rate. A server that sleeps between requests pays a wake-up for
most of them (`wakes_per_req`; on a virtual machine each is a halt and an interrupt, two VM
exits), so "h3 against h2" compares the protocols only when the clients share a shape:
`ringx-h3-apart` against `ringx-h2-apart`, and under `--batch` ringx-h3 against `ringx-h2`
at 10 x 100.

Two shapes of the QUIC client's 64-byte GETs. By default (`stream`) each of a connection's
m requests is its own goroutine: it opens a stream, writes the request and waits for the
answer, so quic-go mostly sends each request as it comes, a datagram of its own. h2load
does otherwise: on each connection it writes, in one write, the requests of every response
that completed since it last wrote. `--batch` (h3load -batch) gives the QUIC peers
h2load's shape: one writer per connection sends those requests back to back, and they
share packets as h2load's share a TLS record. "h3 against h2" under `--batch` is the same
client behaviour on both sides; the default shape is the one where QUIC pays a datagram
per request. The result's `h3_client` says which ran.

Workloads:
  64_10x100   64 B `return`, 10 connections x 100 concurrent streams (HTTPS: 100 conns x 1)
  64_100x1    64 B, 100 connections x 1 stream
  64_new      64 B, a new connection for every request (handshake cost), 8 at a time; h2
              and HTTPS through h3load -proto h2|h1 (Go's net/http on the same crypto/tls as
              quic-go: h2load cannot open a connection per request)
  1m          a 1 MB file, 4 connections x 1 stream: CPU ns per KB
  1m_up       a 1 MB upload (POST to the 64 B `return`, whose body ringx reads and drops),
              4 connections x 1 stream: CPU ns per KB received; where GRO has work. ringx
              only: Caddy's `respond` answers without reading the body (quic-go then stops
              the upload), so its CPU per KB would count bytes it never received

Where the kernel's receive work is charged. Over loopback a packet is received in its
sender's context: what the server receives (a TCP handshake's SYN and ACK, its
acknowledgements, the datagrams of QUIC) is processed on the client's CPU, what it sends on
its own. `--veth` puts the servers in a network namespace of their own behind a veth pair,
with RPS on each end sending its receive work to its own side's CPU (lib.ReceiverCores), as a
NIC's receive queues put it on the receiving host: each side then pays for what it receives.
Beside the threads' schedstat (`cpu_us_per_req`, the headline), every row has the server
core's busy time (`core_us_per_req`, `core_ns_per_kb`): the threads, and the interrupts and
softirqs that ran on that core while they slept (the wake-ups, and under --veth the receive
work that lands there). The floors run where the servers do: under --veth in the servers'
namespace, their clients sending over the veth pair.

veth, like loopback, hands a GSO batch over whole, to be cut into datagrams on the client's
side if at all; `--veth --no-uso` turns UDP segmentation offload off on the server's end, so
the server's CPU cuts its batches as it would for a NIC without it (TCP's segmentation is in
nearly every NIC's hardware).

Usage: bench/h3.py [--quick] [--batch] [--veth [--no-uso]] [--rounds N] [--duration S]
                   [--only WL,...]
Writes bench/results/h3-<date>[-quick][-batch][-veth][-nouso][-WL...].json.
"""
import argparse
import atexit
import contextlib
import datetime
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from h3_floors import (FLOOR_IRQ, FLOORS, FLOOR_SEG, FLOOR_SEGS, FLOOR_WINDOW,  # noqa: E402
                       SEAL_SMALL, SEALS, UDP_FLOORS, floor_binary, floor_chat, floor_env,
                       floor_fetch, floor_push, seal_cost, seal_small, upload_shape)

PEERS = ["caddy", "ringx-h3", "ringx-h3-nogso", "ringx-h3-nogro", "ringx-h2", "ringx-h2-apart",
         "ringx-h3-apart", "ringx-h1", "ringx-h2-max", "floor-udp", FLOOR_IRQ, "floor-tcp"]
QUIC = ("caddy", "ringx-h3", "ringx-h3-nogso", "ringx-h3-nogro", "ringx-h3-apart")
# What each ringx-h3 variant turns off ([runtime]): the offloads' gain is its ratio to ringx-h3.
OFFLOAD_OFF = {"ringx-h3-nogso": "quic_gso = false", "ringx-h3-nogro": "quic_gro = false"}
SMALL = {"64_10x100": 10, "64_100x1": 100}
WORKLOADS = {
    "64_10x100": "64 B, 10 conns x 100 streams (h1: 100 conns): CPU µs per request",
    "64_100x1": "64 B, 100 conns x 1 stream: CPU µs per request",
    "64_new": "64 B, a new connection per request: CPU µs per request",
    "1m": "1 MB file, 4 conns: CPU ns per KB",
    "1m_up": "1 MB upload, 4 conns: CPU ns per KB received",
}
# The libraries' share of a new connection (crates/quic/benches/handshake.rs): one full
# handshake in memory, no I/O or HTTP, QUIC (quinn-proto through ringx-quic's configuration)
# and TLS 1.3 over TCP (rustls), the server's calls timed; run on the server's CPU in each
# round of 64_new.
LIB_HANDSHAKE = {"lib-quic": "quic", "lib-tls-tcp": "tls-tcp"}
# The library's share of the 1 MB download (crates/quic/benches/transfer.rs): 1 MB over one
# QUIC stream in memory, no I/O or HTTP, quinn-proto through ringx-quic's configuration in
# GSO-sized batches, the server's calls timed; `lib-quic` in each round of 1m, on the
# server's CPU. With the UDP floor (the kernel's part of moving the same datagrams) it bounds
# from below what ringx-h3 can cost on this QUIC library.
LIB_TRANSFER = "lib-quic"
# The same download on cloudflare's quiche (bench/quiche_transfer, outside the workspace: it
# builds BoringSSL with cmake): `lib-quiche` beside `lib-quic` in each round of 1m, what the
# other QUIC library issue 38 names would cost the server in its place.
LIB_QUICHE = "lib-quiche"
# The TCP peers that 64_new loads with h3load over TLS on TCP (`-proto`), by what they speak.
NEW_TCP = {"ringx-h2": "h2", "ringx-h1": "h1"}
# Per KB rather than per request: the bulk transfers.
PER_KB = ("1m", "1m_up")
SNI = "bench.test"
# Where the servers listen, and what their commands run under: loopback by default; with
# --veth the address of the server's end of lib.ReceiverCores' veth pair, and `ip netns exec`.
NET = {"host": "127.0.0.1", "prefix": [], "name": "loopback"}


def h3load_binary(work):
    """bench/h3load built with Go (install-deps provides one); None with why printed."""
    found = [shutil.which("go"), "/usr/local/go/bin/go", *sorted(glob.glob("/usr/lib/go-1.*/bin/go"))]
    go = next((g for g in found if g and os.access(g, os.X_OK)), "go")
    out = os.path.join(work, "h3load")
    r = lib.sh([go, "build", "-o", out, "."], cwd=os.path.join(lib.BENCH, "h3load"))
    if r.returncode != 0:
        print(f"bench/h3: building bench/h3load failed: {(r.stdout + r.stderr)[-600:]}")
        return None
    return out


def yardstick_binary(name):
    """crates/quic/benches/`name`.rs built (cargo bench --no-run); None with why printed."""
    r = lib.sh(["cargo", "bench", "-p", "ringx-quic",
                "--bench", name, "--no-run"], cwd=lib.ROOT)
    m = re.search(rf"\((\S+/deps/{name}-[0-9a-f]+)\)", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        print(f"bench/h3: building the {name} yardstick failed: {(r.stdout + r.stderr)[-600:]}")
        return None
    return m.group(1) if os.path.isabs(m.group(1)) else os.path.join(lib.ROOT, m.group(1))


def lib_handshake(binary):
    """µs per handshake of the server's calls, in memory: {"lib-quic": .., "lib-tls-tcp": ..}."""
    out = lib.sh(["taskset", "-c", lib.SERVER_CPU, binary, "1"]).stdout
    m = re.search(r"tls-tcp ([\d.]+) us, quic ([\d.]+) us", out)
    if not m:
        raise RuntimeError(f"bench/h3: the handshake yardstick's output not understood: {out[-400:]}")
    return {"lib-tls-tcp": float(m.group(1)), "lib-quic": float(m.group(2))}


def quiche_binary():
    """bench/quiche_transfer built (cargo build --release there); None with why printed."""
    d = os.path.join(lib.BENCH, "quiche_transfer")
    r = lib.sh(["cargo", "build", "--release", "--quiet"], cwd=d)
    out = os.path.join(d, "target", "release", "quiche-transfer")
    if r.returncode != 0 or not os.access(out, os.X_OK):
        print(f"bench/h3: building bench/quiche_transfer failed (quiche builds BoringSSL with "
              f"cmake; scripts/install-deps.sh installs it), lib-quiche left out: "
              f"{(r.stdout + r.stderr)[-600:]}")
        return None
    return out


def lib_transfer(binary, name):
    """ns per KB of the server's calls in a 1 MB QUIC download, in memory (one round of 64),
    by the yardstick `binary` whose output names the library `name` (quic, quiche)."""
    out = lib.sh(["taskset", "-c", lib.SERVER_CPU, binary, "1"]).stdout
    m = re.search(rf"ns per KB: {name} (\d+)", out)
    if not m:
        raise RuntimeError(f"bench/h3: the transfer yardstick's output not understood: {out[-400:]}")
    return float(m.group(1))


class Server:
    def __init__(self, name, work, cert, sink=None):
        """`sink`: for a floor, the upload's (ringx-h3's row in this round): it then receives
        instead of sending."""
        self.name, self.work, self.cert, self.sink = name, work, cert, sink
        self.port = lib.free_port()
        self.host = NET["host"]
        # ringx-h3's metrics: what it received and sent, for the 64-byte floor.
        self.admin = lib.free_port() if name == "ringx-h3" else None

    def start(self):
        w, (c, k) = self.work, self.cert
        env = None
        if self.name in FLOORS or self.name == FLOOR_IRQ:
            udp = ["udp", str(self.port), str(FLOOR_SEG), str(FLOOR_SEGS), str(FLOOR_WINDOW)]
            tcp = ["tcp", str(self.port)]
            if self.sink:
                udp = ["udp-sink", str(self.port), str(upload_shape(self.sink)[2])]
                tcp = ["tcp-sink", str(self.port)]
            cmd = [*NET["prefix"], "taskset", "-c", lib.SERVER_CPU, floor_binary(w), "serve",
                   *(udp if self.name in UDP_FLOORS else tcp)]
            self.log = open(os.path.join(w, f"{self.name}.log"), "w")
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                         env=floor_env(self.host))
            if self.proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"bench/h3: {self.name} did not start (see {self.log.name})")
            return self
        if self.name == "caddy":
            conf = os.path.join(w, "Caddyfile")
            open(conf, "w").write(f"""{{
\tadmin off
\tauto_https off
\tdefault_sni {SNI}
\tservers {{
\t\tprotocols h1 h2 h3
\t}}
}}
https://{NET["host"]}:{self.port} {{
\ttls {c} {k}
\trespond /r64 "{lib.BODY64}" 200
\thandle_path /w/* {{
\t\troot * {w}/www
\t\tfile_server
\t}}
}}
""")
            cmd = ["caddy", "run", "--config", conf, "--adapter", "caddyfile"]
            env = {**os.environ, "GOMAXPROCS": "1", "XDG_DATA_HOME": w, "XDG_CONFIG_HOME": w}
        else:
            # keepalive_requests as bench/h2.py sets nginx's: over HTTP/1.1 ringx closes a
            # connection after 1,000 requests by default (as nginx does), and h2load --rps
            # never stops a client that was reconnecting when its -D span ended: it goes on
            # at its rate and h2load never exits (1 run in 10 to 15 at 100 connections).
            # Neither h2 nor h3 closes on a count, so nor does HTTP/1.1 here.
            conf = os.path.join(w, f"{self.name}.toml")
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
log_level = "warn"
{OFFLOAD_OFF.get(self.name, "")}
{f'[admin]{chr(10)}listen = "{NET["host"]}:{self.admin}"' if self.name == "ringx-h3" else ""}
[http]
keepalive_timeout = "75s"
keepalive_requests = 100000000
[[server]]
listen = ["{NET["host"]}:{self.port}"]
tls = {{ cert = "{c}", key = "{k}" }}
quic = true
  [[server.location]]
  path = "/r64"
  exact = true
  return = {{ status = 200, body = "{lib.BODY64}" }}
  [[server.location]]
  path = "/w/"
  alias = "{w}/www/"
""")
            cmd = [lib.RINGX, "serve", "-c", conf]
        self.log = open(os.path.join(w, f"{self.name}.log"), "w")
        self.proc = subprocess.Popen([*NET["prefix"], "taskset", "-c", lib.SERVER_CPU, *cmd],
                                     env=env, stdout=self.log, stderr=self.log)
        lib.wait_port(self.port, self.proc, host=NET["host"])
        return self

    def sample(self):
        """What a measured span is taken between: the server's CPU and wake-ups, the time
        stolen, its core's clock, the interrupts to that core, and the server's ticks in
        user mode and in the kernel."""
        pids = lib.proc_tree(self.proc.pid)
        return (lib.cpu_ns(pids), lib.wakes(pids), lib.steal_ms(), lib.core_ns(),
                lib.call_ipis(), lib.user_system(pids))

    def quic_counters(self):
        """ringx-h3's QUIC counters, all zones: datagrams `in` and `out`
        (`ringx_quic_datagrams_total`), their bytes `bytes_in` and `bytes_out`
        (`ringx_quic_bytes_total`), packets `sent` and `lost`
        (`ringx_quic_packets_sent_total`, `ringx_quic_packets_lost_total`)."""
        with urllib.request.urlopen(f"http://{NET['host']}:{self.admin}/metrics", timeout=5) as f:
            text = f.read().decode()
        got = {"in": 0, "out": 0, "sent": 0, "lost": 0, "bytes_in": 0, "bytes_out": 0,
               "batches_in": 0, "batches_out": 0}
        for m in re.finditer(r'^ringx_quic_(datagrams_total\{[^}]*direction="(in|out)"|'
                             r'bytes_total\{[^}]*direction="(in|out)"|'
                             r'batches_total\{[^}]*direction="(in|out)"|'
                             r'packets_(sent|lost)_total\{)[^}]*\} (\d+)', text, re.M):
            key = (m.group(2) or (m.group(3) and "bytes_" + m.group(3))
                   or (m.group(4) and "batches_" + m.group(4)) or m.group(5))
            got[key] += int(m.group(6))
        return got

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name.startswith("ringx") else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def h3load(binary, url, conns, streams, secs, new=False, post=None, span=None, batch=False,
           rate=None, proto="h3"):
    """h3load's figures; `span(mark)` is called with "counting" and "counted" as its measured
    span starts and ends (its connections are made before), to sample the server there;
    `batch`: GETs in h2load's shape (h3load -batch); `rate`: requests per second in all
    (spread over the connections, as h2load's --rps); `proto`: h3, or h2 or h1 over TLS on
    TCP."""
    cmd = ["taskset", "-c", lib.CLIENT_CPU, binary, "-url", url, "-sni", SNI, "-proto", proto,
           "-c", str(conns), "-m", str(streams), "-d", f"{secs}s", "-warmup", "0s",
           *(["-marks"] if span else []), *(["-batch"] if batch else []),
           *(["-rps", str(max(1, round(rate / conns)))] if rate else [])]
    if new:
        cmd.append("-new")
    if post:
        cmd += ["-post", post]
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        killer = threading.Timer(secs + 60, p.kill)
        killer.start()
        lines = []
        try:
            for line in p.stdout:
                if span and line.strip() in ("counting", "counted"):
                    span(line.strip())
                else:
                    lines.append(line)
            p.wait()
        finally:
            killer.cancel()
        err.seek(0)
        stderr = err.read()
    try:
        return json.loads(lines[-1].strip())
    except (json.JSONDecodeError, IndexError):
        raise RuntimeError(f"h3load output not understood:\n{''.join(lines)[-1000:]}{stderr[-1000:]}")


def h2load(url, conns, streams, secs, log, h1=False, rate=None, post=None, threads=1):
    """h2load's figures; `rate`: requests per second in all (spread over the connections);
    `post`: a file each request uploads; `threads`: h2load's, among which the connections
    are shared."""
    cmd = ["taskset", "-c", lib.CLIENT_CPU, "h2load", *(["--h1"] if h1 else []),
           *(["-d", post] if post else []),
           "-c", str(conns), "-m", str(streams), "-t", str(threads), "-D", str(secs),
           "--log-file", log,
           *([f"--rps={max(1, round(rate / conns))}"] if rate else []), url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 120).stdout
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
    if not m:
        raise RuntimeError(f"h2load output not understood:\n{out[-2000:]}")
    lat = sorted(int(p[2]) for p in (ln.split() for ln in open(log))
                 if len(p) >= 3 and p[1] == "200")
    pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000) if lat else (lambda q: None)
    data = re.search(r"\((\d+)\) data", out)
    return {"requests": int(m.group(1)), "succeeded": int(m.group(2)),
            "failed": int(m.group(3)), "bytes": int(data.group(1)) if data else None,
            "lat_p50_ms": pct(0.5), "lat_p99_ms": pct(0.99)}


def measure(srv, wl, secs, work, h3bin, rate=None, h3row=None, batch=False):
    path = "/w/1m.bin" if wl == "1m" else "/r64"
    url = f"https://{NET['host']}:{srv.port}{path}"
    shape = {"64_10x100": (10, 100), "64_100x1": (100, 1), "64_new": (8, 1), "1m": (4, 1),
             "1m_up": (4, 1)}[wl]
    post = os.path.join(work, "www", "1m.bin") if wl == "1m_up" else None
    # ringx-h3's datagram counters, read outside the measured span (an admin request is
    # ringx's work too): here, and where h3load's span starts and ends, just before and just
    # after the server is sampled there.
    quic = srv.quic_counters() if srv.admin else None
    quic_end = None
    before, woke, stolen, core, ipis, ticks = srv.sample()
    end = None  # srv.sample() where the span ended
    if srv.name in UDP_FLOORS and wl in SMALL:
        r = floor_chat(srv, secs, SMALL[wl], h3row)
    elif srv.name in FLOORS and wl == "1m_up":
        r = floor_push(srv, secs, os.path.getsize(post), rate, h3row)
    elif srv.name in FLOORS:
        r = floor_fetch(srv, secs, os.path.getsize(os.path.join(work, "www", "1m.bin")), rate)
    elif srv.name in QUIC or wl == "64_new":
        # Sampled where h3load's span starts and ends: its connections, made before,
        # are not charged to the requests (a slow handshaker would pay for them). A new
        # connection per request over TCP is h3load's too (h2load keeps its connections),
        # offered ringx-h3's rate as h2load would be. The datagrams are counted over the
        # same span: h3load's connections make requests while later ones are still being
        # made (100 handshakes take it about 0.3 s), which the span leaves out, and counted
        # over the whole run they read 9% more datagrams per request than there were
        # (ringx-h3 at 100 x 1: 1.10 in and out per request, against 1.013 and 1.003 in
        # quinn-proto's statistics of the same connections).
        marks, counts = {}, {}

        def span(mark):
            if mark == "counting" and srv.admin:
                counts[mark] = srv.quic_counters()
            marks[mark] = srv.sample()
            if mark == "counted" and srv.admin:
                counts[mark] = srv.quic_counters()
        r = h3load(h3bin, url, *shape, secs, new=wl == "64_new", post=post, span=span,
                   batch=batch and wl in SMALL,
                   rate=rate if srv.name == "ringx-h3-apart" or srv.name in NEW_TCP else None,
                   proto=NEW_TCP.get(srv.name, "h3"))
        if len(marks) == 2:
            (before, woke, stolen, core, ipis, ticks), end = marks["counting"], marks["counted"]
            if len(counts) == 2:
                quic, quic_end = counts["counting"], counts["counted"]
    else:
        conns, streams = shape
        h1 = srv.name == "ringx-h1"
        if h1 and streams > 1:
            # HTTP/1.1 has one request at a time per connection: 100 connections.
            conns, streams = 100, 1
        r = h2load(url, conns, streams, secs, os.path.join(work, f"{srv.name}-{wl}.log"), h1,
                   None if srv.name == "ringx-h2-max" else rate, post,
                   threads=conns if srv.name == "ringx-h2-apart" else 1)
    cpu_end, woke_end, stolen_end, core_end, ipis_end, ticks_end = end or srv.sample()
    cpu = cpu_end - before
    # The kernel's share of the server's CPU (its ticks there over all its ticks): what a
    # faster protocol stack in user space would leave as it is.
    user, system = ticks_end[0] - ticks[0], ticks_end[1] - ticks[1]
    r["kernel_share"] = system / (user + system) if user + system else None
    # The server's core, busy for anyone: the server's threads, and the interrupts and
    # softirqs that woke it or received for it while it slept (with --veth, all its receive
    # work); what else ran there in the span (the kernel's own housekeeping) too.
    busy = lib.core_busy_ns(core, core_end)
    r["wakes"] = woke_end - woke
    r["steal_ms"] = stolen_end - stolen
    # Function-call interrupts to the server's CPU: under --veth, how RPS hands it what it
    # receives, one per datagram unless one is pending there already (FLOOR_IRQ's bursts).
    r["ipis"] = ipis_end - ipis
    if quic:
        after = quic_end or srv.quic_counters()
        # Datagrams (what the 64-byte floor is offered), and the packets QUIC declared lost:
        # a round whose p99 stands out with losses is the path's, not the CPU's.
        r["dgrams_in"], r["dgrams_out"] = after["in"] - quic["in"], after["out"] - quic["out"]
        r["dgram_bytes_in"] = after["bytes_in"] - quic["bytes_in"]
        r["dgram_bytes_out"] = after["bytes_out"] - quic["bytes_out"]
        r["batches_in"] = after["batches_in"] - quic["batches_in"]
        r["packets_sent"] = after["sent"] - quic["sent"]
        r["packets_lost"] = after["lost"] - quic["lost"]
    r["cpu_us_per_req"] = cpu / 1000 / max(r["succeeded"], 1)
    if r["kernel_share"] is not None:
        r["kernel_us_per_req"] = r["cpu_us_per_req"] * r["kernel_share"]
    r["core_us_per_req"] = busy / 1000 / max(r["succeeded"], 1)
    r["wakes_per_req"] = r["wakes"] / max(r["succeeded"], 1)
    r["ipis_per_req"] = r["ipis"] / max(r["succeeded"], 1)
    if wl == "1m_up":
        # Each request that succeeded carried the whole file (a floor counts what arrived).
        r["sent"] = r.get("received") or r["succeeded"] * os.path.getsize(post)
        r["cpu_ns_per_kb"] = cpu / max(r["sent"] / 1024, 1)
        r["core_ns_per_kb"] = busy / max(r["sent"] / 1024, 1)
    elif wl == "1m":
        r["cpu_ns_per_kb"] = cpu / max((r.get("bytes") or 0) / 1024, 1)
        r["core_ns_per_kb"] = busy / max((r.get("bytes") or 0) / 1024, 1)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--only", help="comma-separated workloads (all by default)")
    ap.add_argument("--batch", action="store_true",
                    help="the QUIC peers' 64 B GETs in h2load's shape (h3load -batch)")
    ap.add_argument("--veth", action="store_true",
                    help="the servers in a network namespace behind a veth pair, each end's "
                         "receive work on its own side's CPU (lib.ReceiverCores; root)")
    ap.add_argument("--no-uso", action="store_true",
                    help="with --veth: UDP segmentation offload off on the server's end, so "
                         "its CPU cuts GSO batches into datagrams as for a NIC without it")
    args = ap.parse_args()
    if args.no_uso and not args.veth:
        ap.error("--no-uso goes with --veth")
    why = lib.ReceiverCores.check() if args.veth else None
    if why and os.geteuid() != 0:
        # As the kernel-facing tests do without root: skipped, and why.
        print(f"bench/h3: --veth skipped: {why}", flush=True)
        sys.exit(0)
    if why:
        sys.exit(f"bench/h3: --veth: {why}")
    workloads = WORKLOADS
    if args.only:
        unknown = [w for w in args.only.split(",") if w not in WORKLOADS]
        if unknown:
            ap.error(f"unknown workloads {unknown}; known: {list(WORKLOADS)}")
        workloads = {w: d for w, d in WORKLOADS.items() if w in args.only.split(",")}
    if not shutil.which("caddy"):
        sys.exit("bench/h3: caddy is missing (apt-get install caddy, or scripts/install-deps.sh)")
    rounds = args.rounds or (1 if args.quick else 3)
    secs = args.duration or (2 if args.quick else 5)
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="ringx-bench-h3-")
    rows, run = [], {"finished": False}
    atexit.register(tidy, work, rows, run)
    os.chmod(work, 0o755)
    os.makedirs(os.path.join(work, "www"), mode=0o755)
    with open(os.path.join(work, "www", "1m.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    os.chmod(os.path.join(work, "www", "1m.bin"), 0o644)
    h3bin = h3load_binary(work)
    if not h3bin:
        sys.exit(1)
    hs_bin = yardstick_binary("handshake") if "64_new" in workloads else None
    tr_bin = yardstick_binary("transfer") if "1m" in workloads else None
    qc_bin = quiche_binary() if "1m" in workloads else None
    c, k = lib.ec_cert(work, SNI)
    speed0 = lib.host_speed(3)
    # A SIGTERM (timeout, CI) unwinds as Ctrl-C does, so the veth pair and namespace go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench/h3: terminated"))
    with contextlib.ExitStack() as net:
        if args.veth:
            sides = net.enter_context(lib.ReceiverCores("h3", uso=not args.no_uso))
            NET.update(host=sides.addr, prefix=sides.prefix,
                       name="veth, receive work on the receiver's CPU (RPS)"
                       + ("; UDP segmentation offload off on the server's end"
                          if args.no_uso else ""))
        run_rounds(args, rounds, secs, workloads, work, h3bin, (hs_bin, tr_bin, qc_bin), (c, k),
                   rows)
    summary = lib.summarise(rows, workloads, [*PEERS, *SEALS, SEAL_SMALL, *LIB_HANDSHAKE,
                                              LIB_QUICHE],
                            bases=("caddy", "ringx-h2", "ringx-h2-apart", "ringx-h3", *FLOORS, FLOOR_IRQ,
                                   "lib-tls-tcp", LIB_TRANSFER))
    caddy_v = lib.sh(["caddy", "version"]).stdout.strip()
    result = {"date": datetime.date.today().isoformat(), "mode": "quick" if args.quick else "full",
              "h3_client": "batch" if args.batch else "stream", "network": NET["name"],
              "rounds": rounds, "duration_s": secs, "elapsed_s": round(time.time() - t0),
              "machine": lib.machine(),
              "versions": {**lib.versions(), "caddy": caddy_v,
                           "h2load": lib.sh(["h2load", "--version"]).stdout.strip(),
                           "h3load": "bench/h3load (quic-go, see its go.mod)",
                           "quiche": "bench/quiche_transfer (see its Cargo.lock)"},
              "load_before": os.getloadavg(), "host_speed_before": speed0,
              "host_speed_after": lib.host_speed(3), "workloads": workloads, "rows": rows,
              "summary": summary}
    name = f"h3-{result['date']}" + ("-quick" if args.quick else "") + \
        ("-batch" if args.batch else "") + ("-veth" if args.veth else "") + \
        ("-nouso" if args.no_uso else "") + \
        ("-" + "-".join(workloads) if args.only else "")
    os.makedirs(lib.RESULTS, exist_ok=True)
    with open(os.path.join(lib.RESULTS, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"bench/h3: wrote bench/results/{name}.json", flush=True)
    run["finished"] = True
    report(summary, workloads)


def tidy(work, rows, run):
    """At exit: the work directory (certificate, h3load, each client's request log: some
    100 MB a run) goes, unless the run stopped early or a row has no figure; then it stays
    for its logs, and this says where."""
    failed = [r for r in rows if "error" in r]
    if run["finished"] and not failed:
        shutil.rmtree(work, ignore_errors=True)
        return
    why = f"{len(failed)} rows without a figure" if failed else "the run stopped early"
    print(f"bench/h3: {why}; its servers' and clients' logs are kept in {work}", flush=True)


def run_rounds(args, rounds, secs, workloads, work, h3bin, yardsticks, cert, rows):
    """Every round: each workload, its peers alternated; the rows go into `rows`.
    `yardsticks`: the handshake's and the transfers' (quinn-proto, quiche) binaries (None
    where not run)."""
    hs_bin, tr_bin, qc_bin = yardsticks
    for rnd in range(rounds):
        for wl in workloads:
            h3_rate, h3row, apart_rate = None, None, None
            for peer in PEERS:
                if (wl == "64_new" and peer not in QUIC and peer not in NEW_TCP) or (wl == "1m_up" and peer == "caddy") \
                        or (peer == "floor-tcp" and wl not in PER_KB) \
                        or (peer in FLOORS and wl == "1m_up" and not h3row) \
                        or (peer == "ringx-h2-apart" and wl not in SMALL) \
                        or (peer == "ringx-h3-apart" and (args.batch or not apart_rate)) \
                        or (peer == "floor-udp" and wl not in PER_KB and not (h3row and wl in SMALL)) \
                        or (peer == FLOOR_IRQ and not (h3row and wl in SMALL)):
                    continue
                sink = h3row if peer in FLOORS and wl == "1m_up" else None
                srv = Server(peer, work, cert, sink).start()
                try:
                    rate = apart_rate if peer == "ringx-h3-apart" else h3_rate
                    r = measure(srv, wl, secs, work, h3bin, rate, h3row, args.batch)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    # A client that hangs or fails costs its row, not the run's other rows:
                    # the row says why, the round goes on, and the run keeps its logs.
                    why = (str(e).splitlines() or [type(e).__name__])[0]
                    rows.append({"peer": peer, "workload": wl, "round": rnd, "error": why})
                    print(f"bench/h3 round {rnd} {wl} {peer}: no figure: {why}", flush=True)
                    if peer == "ringx-h3":
                        # The peers after it are offered its rate: they would compare nothing.
                        print(f"bench/h3 round {rnd} {wl}: the other peers skipped (no "
                              "ringx-h3 rate to offer them)", flush=True)
                        break
                    continue
                finally:
                    srv.stop()
                r.update(peer=peer, workload=wl, round=rnd)
                if peer == "ringx-h3":
                    h3_rate, h3row = r["succeeded"] / secs, r
                if peer == "ringx-h2-apart":
                    apart_rate = r["succeeded"] / secs
                rows.append(r)
                extra = f", {r['cpu_ns_per_kb']:.0f} ns/KB" if wl in PER_KB else ""
                if r.get("dgrams_in"):
                    extra += (f", {r['dgrams_in'] / max(r['succeeded'], 1):.2f} datagrams in "
                              f"per request, {r['wakes'] / r['dgrams_in']:.2f} wake-ups and "
                              f"{r['ipis'] / r['dgrams_in']:.2f} interrupts each")
                if "packets_lost" in r:
                    extra += f", {r['packets_lost']} of {r['packets_sent']} packets lost"
                if r.get("kernel_share") is not None:
                    extra += f", {r['kernel_share']:.0%} in the kernel"
                extra += f", {r['steal_ms']:.0f} ms stolen"
                print(f"bench/h3 round {rnd} {wl} {peer}: {r['cpu_us_per_req']:.2f} µs/req"
                      f"{extra}, p99 {r['lat_p99_ms']} ms ({r['succeeded']} ok, "
                      f"{r['failed']} failed)", flush=True)
            if wl in PER_KB:
                for name, size in SEALS.items():
                    ns = seal_cost(size)
                    rows.append({"peer": name, "workload": wl, "round": rnd, "cpu_ns_per_kb": ns})
                    print(f"bench/h3 round {rnd} {wl} {name}: {ns or 0:.0f} ns/KB", flush=True)
            if wl == "1m":
                for name, binary, lib_name in ((LIB_TRANSFER, tr_bin, "quic"),
                                               (LIB_QUICHE, qc_bin, "quiche")):
                    if not binary:
                        continue
                    ns = lib_transfer(binary, lib_name)
                    rows.append({"peer": name, "workload": wl, "round": rnd,
                                 "cpu_ns_per_kb": ns})
                    print(f"bench/h3 round {rnd} {wl} {name}: {ns:.0f} ns/KB, in memory",
                          flush=True)
            if wl == "64_new" and hs_bin:
                for name, us in lib_handshake(hs_bin).items():
                    rows.append({"peer": name, "workload": wl, "round": rnd, "cpu_us_per_req": us})
                    print(f"bench/h3 round {rnd} {wl} {name}: {us:.1f} µs per handshake, in memory",
                          flush=True)
            if wl in SMALL and h3row:
                us = seal_small(h3row)
                rows.append({"peer": SEAL_SMALL, "workload": wl, "round": rnd, "cpu_us_per_req": us})
                print(f"bench/h3 round {rnd} {wl} {SEAL_SMALL}: {us or 0:.2f} µs/req", flush=True)


def report(summary, workloads):
    """What the run says, workload by workload."""
    for wl in workloads:
        s = summary[wl].get("ringx-h3", {})
        key = "cpu_ns_per_kb" if wl in PER_KB else "cpu_us_per_req"
        cpu, p99 = s.get(key, {}), s.get("lat_p99_ms", {})
        print(f"  {wl}: ringx-h3 {cpu.get('median', 0):.2f} ({key}); "
              f"{cpu.get('ratio_to_caddy', 0):.2f}x Caddy, "
              f"{cpu.get('ratio_to_ringx-h2', 0) or 0:.2f}x ringx h2; "
              f"p99 {p99.get('ratio_to_caddy', 0):.2f}x Caddy")
        core = s.get("core_ns_per_kb" if wl in PER_KB else "core_us_per_req", {})
        if core:
            print(f"    the server's core, busy for anyone (its receive work included under "
                  f"--veth): ringx-h3 {core['median']:.2f}, "
                  f"{core.get('ratio_to_caddy', 0):.2f}x Caddy, "
                  f"{core.get('ratio_to_ringx-h2', 0) or 0:.2f}x ringx h2")
        kernel = s.get("kernel_us_per_req", {}).get("median")
        h2cpu = summary[wl].get("ringx-h2", {}).get(key, {}).get("median")
        if kernel and h2cpu and wl not in PER_KB:
            print(f"    ringx-h3's time in the kernel alone: {kernel:.2f} µs/req, "
                  f"{kernel / h2cpu:.2f}x all of ringx h2's")
        apart = summary[wl].get("ringx-h2-apart", {}).get(key, {})
        h3apart = summary[wl].get("ringx-h3-apart", {}).get(key, {})
        if apart:
            wakes = {p: summary[wl].get(p, {}).get("wakes_per_req", {}).get("median", 0)
                     for p in ("ringx-h3", "ringx-h2", "ringx-h2-apart", "ringx-h3-apart")}
            print(f"    {cpu.get('ratio_to_ringx-h2-apart', 0) or 0:.2f}x ringx h2 with a client "
                  f"thread per connection ({apart['median']:.2f}); wake-ups per request: "
                  + ", ".join(f"{p} {w:.3f}" for p, w in wakes.items()))
        if h3apart:
            print(f"    ringx-h3 at ringx-h2-apart's rate: {h3apart['median']:.2f}, "
                  f"{h3apart.get('ratio_to_ringx-h2-apart', 0) or 0:.2f}x ringx-h2-apart")
        h2 = summary[wl].get("ringx-h2", {}).get(key, {})
        lq, lt = (summary[wl].get(p, {}).get(key, {}) for p in LIB_HANDSHAKE)
        if lq and lt and h2:
            print(f"    the libraries alone, in memory: QUIC {lq['median']:.1f}, TLS over TCP "
                  f"{lt['median']:.1f} µs per handshake, "
                  f"{lq.get('ratio_to_lib-tls-tcp', 0):.2f}x; ringx adds "
                  f"{cpu.get('median', 0) - lq['median']:.0f} µs to QUIC's, "
                  f"{h2['median'] - lt['median']:.0f} to TLS's")
        for off in OFFLOAD_OFF:
            o = summary[wl].get(off, {}).get(key, {})
            print(f"    {off}: {o.get('ratio_to_ringx-h3', 0) or 0:.2f}x ringx-h3")
        fu, ft = (summary[wl].get(f, {}).get(key, {}) for f in FLOORS)
        small = summary[wl].get(SEAL_SMALL, {}).get(key, {})
        per = {"floor-udp": "wake-ups", FLOOR_IRQ: "interrupts"}
        for name, f in ((n, summary[wl].get(n, {})) for n in UDP_FLOORS):
            fc = f.get(key, {})
            if not (fc and small and h2 and wl not in PER_KB):
                continue
            fcore = f.get("core_us_per_req", {})
            print(f"    UDP floor in ringx-h3's datagrams per {per[name]} ({name}): "
                  f"{fc['median']:.2f} µs/req (its core {fcore.get('median', 0):.2f}), "
                  f"{fc.get('ratio_to_ringx-h2', 0):.2f}x ringx-h2 (core "
                  f"{fcore.get('ratio_to_ringx-h2', 0):.2f}x); with AES-GCM on each datagram "
                  f"({small['median']:.2f}): {(fc['median'] + small['median']) / h2['median']:.2f}x "
                  f"ringx-h2; ringx-h3 {cpu.get('ratio_to_' + name, 0):.2f}x it (core "
                  f"{core.get('ratio_to_' + name, 0):.2f}x)")
        if fu and ft:
            print(f"    transport floor: UDP {fu['median']:.0f}, TCP {ft['median']:.0f} ({key}); "
                  f"ringx-h3 {cpu.get('ratio_to_floor-udp', 0):.2f}x the UDP floor, ringx-h2 "
                  f"{h2.get('ratio_to_floor-tcp', 0):.2f}x the TCP floor; the UDP floor is "
                  f"{fu.get('ratio_to_ringx-h2', 0):.2f}x ringx-h2")
            seal = summary[wl].get("seal-packet", {}).get(key, {})
            if seal and h2:
                print(f"    UDP floor + sealing per packet ({seal['median']:.0f} ns/KB): "
                      f"{(fu['median'] + seal['median']) / h2['median']:.2f}x ringx-h2")
            if lq and h2 and wl == "1m":
                print(f"    the QUIC library alone, in memory ({LIB_TRANSFER}): "
                      f"{lq['median']:.0f} ns/KB; with the UDP floor "
                      f"{(fu['median'] + lq['median']) / h2['median']:.2f}x ringx-h2; ringx-h3 "
                      f"adds {cpu.get('median', 0) - fu['median'] - lq['median']:.0f} ns/KB "
                      f"to the two")
                qc = summary[wl].get(LIB_QUICHE, {}).get(key, {})
                if qc:
                    print(f"    quiche in its place ({LIB_QUICHE}): {qc['median']:.0f} ns/KB, "
                          f"{qc.get('ratio_to_lib-quic', 0):.2f}x quinn-proto's; with the UDP "
                          f"floor {(fu['median'] + qc['median']) / h2['median']:.2f}x ringx-h2")


if __name__ == "__main__":
    main()
