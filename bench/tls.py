#!/usr/bin/env python3
"""HTTPS benchmark: ringx (rustls on aws-lc-rs, and on ring) against nginx with OpenSSL 3, the
same certificates (ECDSA P-256 and RSA 2048), on one 2-core machine.

Method as bench/http_bench.py (bench/README.md): the server pinned to CPU 0 (one zone, one
nginx worker), clients to CPU 1, peers alternated A B C A B C ... for `--rounds` rounds, and
the figure that matters is the server's own CPU (every thread, schedstat) per request or per
handshake, so a client slower than the server does not decide the result. Ratios are to nginx
measured in the same run.

Workloads:
  ka64_c50, ka64_c500   HTTPS keep-alive, 64 B, 50 / 500 connections (wrk): CPU per request
  full_ec, full_rsa     a new TLS 1.3 connection per request (openssl s_time -new): CPU per
                        full handshake, ECDSA P-256 and RSA 2048 certificates
  resumed_ec            the same, resuming the session (s_time -reuse)
  file1m_c10            a 1 MB file over HTTPS, keep-alive, 10 connections: CPU per request
  flood                 p99 of 10 keep-alive connections sending 1,000 requests/s in all (open
                        loop, latency from each request's scheduled time: bench/tls_load.c),
                        quiet, then while another client opens 2,000 new TLS 1.3 connections
                        per second (bench/tls_load.c flood: full handshakes, abandoned after
                        1 s); ringx with its handshake budget (share 0.5, the default) and with
                        none (share 1). What the flood reached is reported with it.

Usage: bench/tls.py [--quick] [--rounds N] [--duration S] [--only WL,...] [--peers P,...] [--flood-idle]
  --only   the workloads to run (names above, and `flood`); all by default
  --peers  the peers to alternate (nginx, ringx-aws-lc-rs, ringx-ring); all by default
  --flood-idle  the flood client at SCHED_IDLE (below everything) instead of nice 10
Writes bench/results/tls-<date>.json and the HTTPS section of bench/README.md.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

PEERS = ["nginx", "ringx-aws-lc-rs", "ringx-ring"]
WORKLOADS = {
    "ka64_c50": "HTTPS keep-alive, 64 B, 50 connections: CPU µs per request",
    "ka64_c500": "HTTPS keep-alive, 64 B, 500 connections: CPU µs per request",
    "full_ec": "full TLS 1.3 handshake, ECDSA P-256: CPU µs per connection",
    "full_rsa": "full TLS 1.3 handshake, RSA 2048: CPU µs per connection",
    "resumed_ec": "resumed TLS 1.3 handshake (ticket): CPU µs per connection",
    "file1m_c10": "1 MB file over HTTPS, keep-alive, 10 connections: CPU µs per request",
}


def certs(work):
    """An ECDSA P-256 and an RSA 2048 self-signed certificate for bench.test."""
    out = {}
    for kind, args in [("ec", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
                       ("rsa", ["-newkey", "rsa:2048"])]:
        c, k = os.path.join(work, f"{kind}.pem"), os.path.join(work, f"{kind}.key")
        lib.sh(["openssl", "req", "-x509", *args, "-nodes", "-keyout", k, "-out", c, "-days", "30",
                "-subj", "/CN=bench.test", "-addext", "subjectAltName=DNS:bench.test"], check=True)
        out[kind] = (c, k)
    return out


class Server:
    def __init__(self, name, work, certs, share=0.5):
        self.name, self.work, self.certs, self.share = name, work, certs, share
        self.ec_port, self.rsa_port = lib.free_port(), lib.free_port()
        self.rt = False
        self.bin = None  # another ringx build (--flood-base)

    def start(self):
        w, (ec, eck), (rsa, rsak) = self.work, self.certs["ec"], self.certs["rsa"]
        if self.name == "nginx":
            conf = os.path.join(w, "nginx-tls.conf")
            open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {w}/nginx-tls.pid; error_log {w}/nginx-tls-error.log warn;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_timeout 75s; keepalive_requests 100000000;
  client_body_temp_path {w}/b; proxy_temp_path {w}/p; fastcgi_temp_path {w}/f;
  uwsgi_temp_path {w}/u; scgi_temp_path {w}/s;
  ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m; ssl_session_tickets on;
  server {{ listen 127.0.0.1:{self.ec_port} ssl backlog=4096;
    ssl_certificate {ec}; ssl_certificate_key {eck};
    location = /r64 {{ return 200 "{lib.BODY64}"; }}
    location /static/ {{ alias {w}/www/; }} }}
  server {{ listen 127.0.0.1:{self.rsa_port} ssl backlog=4096;
    ssl_certificate {rsa}; ssl_certificate_key {rsak};
    location = /r64 {{ return 200 "{lib.BODY64}"; }} }} }}
""")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{w}/nginx-tls-error.log"]
        else:
            provider = self.name.split("-", 1)[1]
            conf = os.path.join(w, f"{self.name}-{self.share}.toml")
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
log_level = "warn"
[http]
keepalive_timeout = "75s"
keepalive_requests = 100000000
[tls]
provider = "{provider}"
handshake_share = {self.share}
[[server]]
listen = ["127.0.0.1:{self.ec_port}"]
tls = {{ cert = "{ec}", key = "{eck}" }}
  [[server.location]]
  path = "/r64"
  exact = true
  return = {{ status = 200, body = "{lib.BODY64}" }}
  [[server.location]]
  path = "/static/"
  alias = "{w}/www/"
[[server]]
listen = ["127.0.0.1:{self.rsa_port}"]
tls = {{ cert = "{rsa}", key = "{rsak}" }}
  [[server.location]]
  path = "/r64"
  exact = true
  return = {{ status = 200, body = "{lib.BODY64}" }}
""")
            cmd = [self.bin or lib.RINGX, "serve", "-c", conf]
        self.log = open(os.path.join(w, f"{self.name}.log"), "w")
        self.proc = subprocess.Popen([*(["chrt", "-f", "50"] if self.rt else []), "taskset", "-c", lib.SERVER_CPU, *cmd],
                                     stdout=self.log, stderr=self.log)
        lib.wait_port(self.ec_port, self.proc)
        return self

    def cpu(self):
        return lib.cpu_ns(lib.proc_tree(self.proc.pid))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name != "nginx" else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def wrk(port, path, conns, secs):
    cmd = ["taskset", "-c", lib.CLIENT_CPU, "wrk", "-t1", f"-c{conns}", f"-d{secs}s", "--latency",
           f"https://127.0.0.1:{port}{path}"]
    out = lib.sh(cmd, timeout=secs + 60).stdout
    m = re.search(r"(\d+) requests in", out)
    if not m:
        raise RuntimeError(f"wrk gave no result: {' '.join(cmd)}\n{out}")
    p99 = re.search(r"99%\s+(\S+)", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad:
        raise RuntimeError(f"{bad.group(1)} non-2xx responses: {' '.join(cmd)}\n{out}")
    return {"requests": int(m.group(1)), "lat_p99_ms": lib.to_ms(p99.group(1)) if p99 else None,
            "cmd": " ".join(cmd)}


def s_time(port, secs, reuse, procs=1, nice=0):
    """Connections made by `procs` openssl s_time clients in `secs` (TLS 1.3, no page fetch
    for -new; -reuse fetches / so the ticket arrives)."""
    mode = ["-reuse", "-www", "/r64"] if reuse else ["-new"]
    cmd = ["nice", "-n", str(nice), "taskset", "-c", lib.CLIENT_CPU, "openssl", "s_time", "-connect", f"127.0.0.1:{port}",
           "-tls1_3", "-time", str(secs), *mode]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
          for _ in range(procs)]
    total = 0
    for p in ps:
        out = p.communicate(timeout=secs + 60)[0]
        m = re.findall(r"(\d+) connections in [\d.]+ real seconds", out) or \
            re.findall(r"(\d+) connections in [\d.]+s", out)
        if not m:
            raise RuntimeError(f"s_time gave no result: {' '.join(cmd)}\n{out}")
        total += int(m[-1])
    return {"requests": total, "cmd": " ".join(cmd)}


def measure(srv, wl, secs):
    before = srv.cpu()
    if wl == "ka64_c50":
        r = wrk(srv.ec_port, "/r64", 50, secs)
    elif wl == "ka64_c500":
        r = wrk(srv.ec_port, "/r64", 500, secs)
    elif wl == "file1m_c10":
        r = wrk(srv.ec_port, "/static/1m.bin", 10, secs)
    elif wl == "full_ec":
        r = s_time(srv.ec_port, secs, False)
    elif wl == "full_rsa":
        r = s_time(srv.rsa_port, secs, False)
    else:
        r = s_time(srv.ec_port, secs, True)
    r["cpu_us_per_req"] = (srv.cpu() - before) / 1000 / max(r["requests"], 1)
    return r


FLOOD_RATE = 2000  # new connections per second
KA_CONNS, KA_RPS = 10, 1000  # the established clients
# --flood-idle: the flood client at SCHED_IDLE instead of nice 10, so that it only ever takes
# CPU the measured client does not want (on a 2-core machine the two share a CPU, and at nice
# 10 the flood client's CPU shows in the measured latency); it then reaches a lower rate.
FLOOD_IDLE = False
# --flood-kind: "hello" (default) sends a recorded ClientHello and closes once the server's
# flight is back: the server does all of a full handshake's public-key work, the client none,
# so one client CPU reaches 2,000/s. "full" completes each handshake with OpenSSL (the client's
# own key exchange and signature check), which one shared client CPU cannot do 2,000 times a
# second (bench/README.md).
FLOOD_KIND = "hello"
# --rt: the servers and the measured client run SCHED_FIFO (the flood client does not), so the
# p99 shows the server's own scheduling of handshakes against established requests, not the
# flood client, the measured client and anything else on the machine taking turns on the CPUs
# (on a real edge the flood comes from elsewhere).
RT = False
# --flood-base BIN: another ringx build measured beside this one (share 0.5), alternated.
FLOOD_BASE = None


def tls_load(work):
    """bench/tls_load.c, built once per run."""
    out = lib.build_c("tls_load.c", os.path.join(work, "tls_load"), libs=["-lssl", "-lcrypto"])
    if not out:
        raise RuntimeError("bench/tls: cannot build bench/tls_load.c (apt-get install libssl-dev)")
    return out


def rt_prefix():
    return ["chrt", "-f", "50"] if RT else []


def keepalive(tool, port, secs):
    cmd = [*rt_prefix(), "taskset", "-c", lib.CLIENT_CPU, tool, "keepalive", "127.0.0.1", str(port), str(KA_CONNS),
           str(KA_RPS), str(secs), "/r64"]
    r = json.loads(lib.sh(cmd, timeout=secs + 60).stdout.strip().splitlines()[-1])
    r["cmd"] = " ".join(cmd)
    return r


def flood(work, c, secs, rounds=1):
    """Keep-alive p99 quiet and under a handshake flood, per server (and budget), `rounds`
    times alternated."""
    tool = tls_load(work)
    rows = []
    configs = [("nginx", None, None), ("ringx-aws-lc-rs", 0.5, None), ("ringx-aws-lc-rs", 1.0, None)]
    if FLOOD_BASE:
        configs.append(("ringx-aws-lc-rs", 0.5, FLOOD_BASE))
    for name, share, base in configs * rounds:
        srv = Server(name, work, c, share or 0.5)
        srv.rt = RT
        srv.bin = base
        srv.start()
        try:
            wrk(srv.ec_port, "/r64", 10, 1)
            quiet = keepalive(tool, srv.ec_port, secs)
            # Niced below the measured client, which needs little CPU (open loop, 1,000
            # requests/s): the flood takes the rest of the client CPU.
            prio = ["chrt", "-i", "0"] if FLOOD_IDLE else ["nice", "-n", "10"]
            fcmd = [*prio, "taskset", "-c", lib.CLIENT_CPU, tool, FLOOD_KIND, "127.0.0.1",
                    str(srv.ec_port), str(FLOOD_RATE), str(secs + 2)]
            fl = subprocess.Popen(fcmd, stdout=subprocess.PIPE, text=True)
            time.sleep(1)
            cpu0 = srv.cpu()
            loaded = keepalive(tool, srv.ec_port, secs)
            cpu = (srv.cpu() - cpu0) / 1e9 / secs
            fr = json.loads(fl.communicate(timeout=secs + 60)[0].strip().splitlines()[-1])
        finally:
            srv.stop()
        rows.append({"peer": name if share is None else f"{name} share {share}" + (" (base build)" if base else ""),
                     "quiet": quiet, "flood": loaded, "flood_client": fr, "flood_cmd": " ".join(fcmd),
                     "server_cpu_share_under_flood": round(cpu, 3),
                     "quiet_p99_ms": quiet["p99_ms"], "flood_p99_ms": loaded["p99_ms"],
                     "p99_ratio": loaded["p99_ms"] / max(quiet["p99_ms"], 1e-9),
                     "new_connections_per_s": fr["started_per_s"],
                     "handshakes_done_per_s": fr["done_per_s"]})
        print(f"bench/tls flood {rows[-1]['peer']}: p99 {quiet['p99_ms']:.2f} -> {loaded['p99_ms']:.2f} ms "
              f"({rows[-1]['p99_ratio']:.2f}x), flood started {fr['started_per_s']:.0f}/s, "
              f"done {fr['done_per_s']:.0f}/s, timed out {fr['timed_out']}, server CPU {cpu:.2f}", flush=True)
    return rows


def flood_summary(rows):
    """Per peer: the median quiet and flood p99 over the rounds, and their ratio."""
    out = {}
    for peer in dict.fromkeys(r["peer"] for r in rows):
        rs = [r for r in rows if r["peer"] == peer]
        q = statistics.median(r["quiet_p99_ms"] for r in rs)
        f = statistics.median(r["flood_p99_ms"] for r in rs)
        out[peer] = {"rounds": len(rs), "quiet_p99_ms": q, "flood_p99_ms": f,
                     "p99_ratio_of_medians": f / max(q, 1e-9),
                     "p99_ratio_per_round": [round(r["p99_ratio"], 2) for r in rs],
                     "handshakes_done_per_s": statistics.median(r["handshakes_done_per_s"] for r in rs),
                     "server_cpu_share_under_flood": statistics.median(
                         r["server_cpu_share_under_flood"] for r in rs)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--only", help="comma-separated workloads (and `flood`)")
    ap.add_argument("--peers", help="comma-separated peers")
    ap.add_argument("--flood-kind", choices=["hello", "full"], default="hello",
                    help="hello: recorded ClientHellos (the server's full work, none for the client); "
                         "full: complete OpenSSL handshakes")
    ap.add_argument("--rt", action="store_true",
                    help="servers and the measured client at SCHED_FIFO for the flood workload")
    ap.add_argument("--flood-base", help="another ringx binary to alternate with in the flood workload")
    ap.add_argument("--flood-idle", action="store_true",
                    help="run the flood client at SCHED_IDLE rather than nice 10")
    args = ap.parse_args()
    global FLOOD_IDLE, FLOOD_KIND, RT, FLOOD_BASE
    FLOOD_IDLE = args.flood_idle
    FLOOD_KIND = args.flood_kind
    RT = args.rt
    FLOOD_BASE = args.flood_base
    only = args.only.split(",") if args.only else [*WORKLOADS, "flood"]
    unknown = [w for w in only if w not in WORKLOADS and w != "flood"]
    if unknown:
        ap.error(f"unknown workloads {unknown}; known: {[*WORKLOADS, 'flood']}")
    peers = args.peers.split(",") if args.peers else PEERS
    if any(p not in PEERS for p in peers):
        ap.error(f"unknown peers in {peers}; known: {PEERS}")
    workloads = {w: d for w, d in WORKLOADS.items() if w in only}
    rounds = args.rounds or (1 if args.quick else 3)
    secs = args.duration or (2 if args.quick else 5)
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="ringx-bench-tls-")
    os.makedirs(os.path.join(work, "www"))
    with open(os.path.join(work, "www", "1m.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    # nginx's worker runs as nobody: it must be able to read the files and the certificates.
    for d in (work, os.path.join(work, "www")):
        os.chmod(d, 0o755)
    os.chmod(os.path.join(work, "www", "1m.bin"), 0o644)
    c = certs(work)
    speed0 = lib.host_speed(3)
    rows = []
    for rnd in range(rounds):
        for wl in workloads:
            for peer in peers:
                srv = Server(peer, work, c).start()
                try:
                    if wl.startswith("ka") or wl.startswith("file"):
                        wrk(srv.ec_port, "/r64", 10, 1)  # warm up
                    r = measure(srv, wl, secs)
                finally:
                    srv.stop()
                r.update(peer=peer, workload=wl, round=rnd)
                rows.append(r)
                print(f"bench/tls round {rnd} {wl} {peer}: {r['cpu_us_per_req']:.1f} µs/req "
                      f"({r['requests']} in {secs} s)", flush=True)
    fl = flood(work, c, secs * 2, rounds) if "flood" in only else []
    summary = lib.summarise(rows, workloads, peers)
    result = {"date": datetime.date.today().isoformat(), "mode": "quick" if args.quick else "full",
              "rounds": rounds, "duration_s": secs, "elapsed_s": round(time.time() - t0),
              "machine": lib.machine(), "versions": {**lib.versions(),
                                                     "openssl": lib.sh(["openssl", "version"]).stdout.strip()},
              "host_speed_before": speed0, "host_speed_after": lib.host_speed(3),
              "workloads": workloads, "peers": peers, "rows": rows, "summary": summary, "flood": fl,
              "flood_client": "SCHED_IDLE" if args.flood_idle else "nice 10",
              "flood_kind": FLOOD_KIND, "rt": RT, "flood_summary": flood_summary(fl)}
    name = f"tls-{result['date']}" + ("-quick" if args.quick else "") + \
        ("-" + "-".join(only) if args.only else "") + ("-idle" if args.flood_idle else "") + \
        ("-full" if FLOOD_KIND == "full" and "flood" in only else "") + ("-rt" if RT else "")
    os.makedirs(lib.RESULTS, exist_ok=True)
    with open(os.path.join(lib.RESULTS, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"bench/tls: wrote bench/results/{name}.json", flush=True)
    for wl in workloads:
        cells = []
        for p in peers:
            s = summary[wl].get(p, {}).get("cpu_us_per_req")
            if s:
                cells.append(f"{p} {s['median']:.1f} ({s.get('ratio_to_nginx', 1):.2f}×)")
        print(f"  {wl}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
