#!/usr/bin/env python3
"""A wrong-password flood against a neighbour on the same zone (issue 35, point 9): the p99
latency of a normal client's plain `return` requests while four clients send wrong
`auth_basic` passwords (bcrypt at cost 10, `htpasswd -B -C 10`: 54 ms a verification here),
for nginx, ringx before the auth pool, and ringx with it.

Each server is pinned to CPU 0 whole (`taskset -c 0`: one zone and, for ringx with the pool,
its `auth_threads = 2` worker threads on the zone's own CPU; nginx with `worker_processes 1`),
both clients to CPU 1; all servers run at once on their own ports, the same htpasswd file, and
are measured alternately, round after round. The neighbour is one keep-alive connection asking
`GET /` 200 times a second; each request's latency is from its send to its response, and one
that could not go on time because the one before was late goes at once (the schedule slips
instead of piling up; the neighbour then made fewer requests, also reported). Each round
measures it first alone ("quiet"), then during the flood: four keep-alive connections, each
sending `GET /g/` with a wrong password as soon as the last was answered (nginx serves `/g/`
from a file: its `return` would run before `auth_basic`).

Peers: `nginx` (Debian's, `auth_basic` + `auth_basic_user_file`: its worker runs `crypt()`);
`ringx-before` (`--base BIN`: a build of the commit before the auth pool, where the zone thread
verified); `ringx-inline` (this build with `auth_threads = 0`: verification on the zone, the
config switch); `ringx` (this build, the default `auth_threads = 2`). Figures: median over the
rounds of each round's p50/p99/max, the flood's wrong answers per second, and the p99 as a ratio
to nginx's in the same run.

Usage: bench/auth_flood.py [--quick] [--rounds N] [--duration S] [--base BIN] [--no-report]
(`make bench-auth BASE_BIN=BIN`; BIN: `cargo build --release -p ringx` of commit b813ea7, the one
before the auth pool. Without it ringx-before is left out, and ringx-inline, the same code path,
stands for it.)
Writes bench/results/auth-flood-<date>[-quick].json and the auth-flood section of bench/README.md.
"""
import argparse
import base64
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

RATE = 200
FLOODERS = 4
COST = 10
HTTP_FRAME = "GET {path} HTTP/1.1\r\nHost: b\r\n{extra}\r\n"


# -- the clients (run as subprocesses of this script, pinned to the client CPU) ------------------

def read_response(s, buf):
    """One response (a Content-Length body) from `s`; returns (status, rest of the buffer)."""
    while True:
        i = buf.find(b"\r\n\r\n")
        if i >= 0:
            head = buf[:i].decode("latin-1")
            n = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    n = int(v)
            end = i + 4 + n
            if len(buf) >= end:
                return int(head.split(" ", 2)[1]), buf[end:]
        d = s.recv(65536)
        if not d:
            raise ConnectionError("closed")
        buf += d


def neighbour(port, rate, secs):
    """Keep-alive GET / requests at `rate` per second for `secs`; prints each one's latency
    (ms, from its send to its response). One that could not go on time because the one
    before was late goes at once: the schedule slips rather than piling up."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = HTTP_FRAME.format(path="/", extra="").encode()
    buf, lat, bad = b"", [], 0
    end = time.perf_counter() + secs
    due = time.perf_counter() + 0.05
    while due < end:
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        sent = time.perf_counter()
        s.sendall(req)
        status, buf = read_response(s, buf)
        done = time.perf_counter()
        lat.append((done - sent) * 1000)
        bad += status != 200
        due = max(due + 1 / rate, done)
    print(json.dumps({"lat_ms": lat, "non200": bad}))


def flood(port, n, secs, auth):
    """`n` connections sending wrong passwords back to back; prints the answers by status."""
    req = HTTP_FRAME.format(path="/g/", extra=f"Authorization: {auth}\r\n").encode()
    end = time.monotonic() + secs
    counts, lock = {}, threading.Lock()

    def one():
        s = socket.create_connection(("127.0.0.1", port))
        buf = b""
        while time.monotonic() < end:
            s.sendall(req)
            try:
                status, buf = read_response(s, buf)
            except ConnectionError:
                s = socket.create_connection(("127.0.0.1", port))
                buf = b""
                continue
            with lock:
                counts[status] = counts.get(status, 0) + 1
        s.close()
    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"answers": counts, "secs": secs}))


# -- the servers ---------------------------------------------------------------------------------

class Server:
    def __init__(self, name, work, users, base):
        self.name, self.work, self.users, self.base = name, work, users, base
        self.port = lib.free_port()

    def start(self):
        w = self.work
        if self.name == "nginx":
            conf = os.path.join(w, "auth-nginx.conf")
            open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {w}/auth-nginx.pid; error_log {w}/auth-nginx-error.log crit;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_timeout 75s; keepalive_requests 1000000;
  client_body_temp_path {w}/n-body; proxy_temp_path {w}/n-proxy; fastcgi_temp_path {w}/n-fcgi;
  uwsgi_temp_path {w}/n-uwsgi; scgi_temp_path {w}/n-scgi;
  server {{ listen 127.0.0.1:{self.port} backlog=4096;
    location = / {{ return 200 "open\\n"; }}
    location /g/ {{ auth_basic "team"; auth_basic_user_file {self.users}; alias {w}/www/; }} }} }}
""")
            # A file, not `return`: nginx's return runs before its access phase, auth_basic's.
            os.makedirs(f"{w}/www", exist_ok=True)
            open(f"{w}/www/index.html", "w").write("in\n")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{w}/auth-nginx-error.log"]
        else:
            threads = "auth_threads = 0\n" if self.name == "ringx-inline" else ""
            conf = os.path.join(w, f"auth-{self.name}.toml")
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
engine = "uring"
log_level = "error"
{threads}
[http]
keepalive_timeout = "75s"
keepalive_requests = 1000000
[[server]]
listen = ["127.0.0.1:{self.port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "open\\n" }}
  [[server.location]]
  path = "/g/"
  return = {{ status = 200, body = "in\\n" }}
  auth_basic = {{ realm = "team", user_file = "{self.users}" }}
""")
            binary = self.base if self.name == "ringx-before" else lib.RINGX
            cmd = [binary, "serve", "-c", conf]
        self.log = open(os.path.join(w, f"auth-{self.name}.log"), "w")
        self.proc = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, *cmd],
                                     stdout=self.log, stderr=self.log)
        lib.wait_port(self.port, self.proc)

    def stop(self):
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name.startswith("ringx") else signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def client(*args):
    """Runs this script as a client on the client CPU; returns what it printed."""
    cmd = ["taskset", "-c", lib.CLIENT_CPU, sys.executable, os.path.abspath(__file__), *map(str, args)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True), " ".join(map(str, cmd))


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def measure(srv, secs, wrong):
    """The neighbour alone, then during the flood."""
    out = {}
    q, qcmd = client("--neighbour", srv.port, RATE, secs / 2)
    quiet = json.loads(q.communicate()[0])
    f, fcmd = client("--flood", srv.port, FLOODERS, secs + 1, wrong)
    time.sleep(0.5)  # the flood is under way
    n, ncmd = client("--neighbour", srv.port, RATE, secs)
    loaded = json.loads(n.communicate()[0])
    flooded = json.loads(f.communicate()[0])
    for name, r in (("quiet", quiet), ("flood", loaded)):
        if r["non200"]:
            raise RuntimeError(f"{srv.name}: {r['non200']} neighbour requests were not 200")
        out[name] = {"requests": len(r["lat_ms"]), "non200": r["non200"],
                     "p50_ms": pct(r["lat_ms"], 50), "p99_ms": pct(r["lat_ms"], 99),
                     "max_ms": max(r["lat_ms"])}
    a = flooded["answers"]
    if set(a) != {"401"}:
        raise RuntimeError(f"{srv.name}: the flood got {a}, not only 401s")
    out["flood_answers"] = a
    out["flood_401_per_s"] = a.get("401", 0) / flooded["secs"]
    out["cmds"] = {"quiet": qcmd, "flood": fcmd, "neighbour": ncmd}
    return out


def summary(rows, peers):
    s = {}
    for p in peers:
        rs = [r for r in rows if r["peer"] == p]
        if not rs:
            continue
        med = lambda f: statistics.median(f(r) for r in rs)  # noqa: E731
        s[p] = {"rounds": len(rs),
                "quiet_p99_ms": med(lambda r: r["quiet"]["p99_ms"]),
                "flood_p50_ms": med(lambda r: r["flood"]["p50_ms"]),
                "flood_p99_ms": med(lambda r: r["flood"]["p99_ms"]),
                "flood_p99_min_ms": min(r["flood"]["p99_ms"] for r in rs),
                "flood_p99_max_ms": max(r["flood"]["p99_ms"] for r in rs),
                "flood_max_ms": med(lambda r: r["flood"]["max_ms"]),
                "flood_requests": med(lambda r: r["flood"]["requests"]),
                "flood_401_per_s": med(lambda r: r["flood_401_per_s"])}
    base = s.get("nginx", {}).get("flood_p99_ms")
    for p in s.values():
        if base:
            p["flood_p99_ratio_to_nginx"] = p["flood_p99_ms"] / base
    return s


def report(result, name):
    s = result["summary"]
    m, v = result["machine"], result["versions"]
    lines = [f"### Latest run: `{result['date'][:10]}` ({result['mode']}, {result['rounds']} rounds, "
             f"{result['duration_s']} s of flood per peer and round, {result['elapsed_s']:.0f} s in all)", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, kernel {m['kernel']}; {v['nginx']}; {v['ringx']}; "
             f"{v['rustc']}. ringx-before: {result['base']}. Load average before "
             f"{result['load_avg_before'][0]:.2f}, after {result['load_avg_after'][0]:.2f}. "
             f"Raw data: `bench/results/auth-flood-{name}.json`.", "",
             f"Neighbour: `GET /` at {RATE}/s on one keep-alive connection; flood: {FLOODERS} "
             f"connections of wrong passwords, bcrypt cost {COST}. Median over the rounds (p99: min–max); "
             "**bold**: the flood p99 as a ratio to nginx's in the same run.", "",
             "| peer | quiet p99 ms | flood p50 ms | flood p99 ms | flood max ms | neighbour requests | wrong passwords answered/s |",
             "|---|---|---|---|---|---|---|"]
    for p in result["peers"]:
        if p not in s:
            continue
        r = s[p]
        ratio = f" **{r['flood_p99_ratio_to_nginx']:.3f}×**" if "flood_p99_ratio_to_nginx" in r else ""
        lines.append(f"| {p} | {r['quiet_p99_ms']:.2f} | {r['flood_p50_ms']:.2f} | {r['flood_p99_ms']:.2f} "
                     f"({r['flood_p99_min_ms']:.2f}–{r['flood_p99_max_ms']:.2f}){ratio} | "
                     f"{r['flood_max_ms']:.1f} | {r['flood_requests']:.0f} of {RATE * result['duration_s']:.0f} | "
                     f"{r['flood_401_per_s']:.1f} |")
    lines += ["", f"Command: `{result['command']}`."]
    readme = os.path.join(lib.ROOT, "bench", "README.md")
    txt = open(readme).read()
    begin, end = "<!-- auth-flood:begin -->", "<!-- auth-flood:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in txt:
        txt = txt[:txt.index(begin)] + block + txt[txt.index(end) + len(end):]
    else:
        txt += ("\n## A wrong-password flood beside a neighbour (`bench/auth_flood.py`)\n\n" +
                "\n\n".join(__doc__.split("\n\n")[1:3]) + "\n\n" + block + "\n")
    open(readme, "w").write(txt)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--neighbour":
        return neighbour(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--flood":
        return flood(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=float, help="seconds of flood per peer and round")
    ap.add_argument("--base", help="ringx built from the commit before the auth pool (ringx-before)")
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    secs = args.duration or (3 if args.quick else 10)
    if not shutil.which("htpasswd"):
        sys.exit("bench/auth_flood: needs htpasswd (apache2-utils)")
    peers = ["nginx"] + (["ringx-before"] if args.base else []) + ["ringx-inline", "ringx"]
    work = tempfile.mkdtemp(prefix="ringx-auth-bench-")
    os.chmod(work, 0o755)
    users = os.path.join(work, "users")
    line = subprocess.run(["htpasswd", "-nbB", "-C", str(COST), "alice", "right"],
                          capture_output=True, text=True, check=True).stdout.strip()
    open(users, "w").write(line + "\n")
    os.chmod(users, 0o644)
    wrong = "Basic " + base64.b64encode(b"alice:wrong").decode()
    servers = {p: Server(p, work, users, args.base) for p in peers}
    rows, t0, load0 = [], time.time(), os.getloadavg()
    try:
        for s in servers.values():
            s.start()
        time.sleep(0.3)
        for rnd in range(rounds):
            for p in peers:
                r = {"peer": p, "round": rnd, **measure(servers[p], secs, wrong)}
                rows.append(r)
                print(f"r{rnd} {p:13s} quiet p99 {r['quiet']['p99_ms']:7.2f} ms | flood p50 "
                      f"{r['flood']['p50_ms']:7.2f} p99 {r['flood']['p99_ms']:8.2f} max "
                      f"{r['flood']['max_ms']:8.1f} ms | 401/s {r['flood_401_per_s']:5.1f} "
                      f"{r['flood_answers']}", flush=True)
    finally:
        for s in servers.values():
            s.stop()
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "mode": "quick" if args.quick else "full", "rounds": rounds, "duration_s": secs,
              "elapsed_s": round(time.time() - t0, 1), "machine": lib.machine(),
              "versions": lib.versions(), "base": lib.shown(args.base),
              "command": " ".join(["python3", "bench/auth_flood.py",
                                   *(lib.shown(a) for a in sys.argv[1:])]),
              "load_avg_before": load0, "load_avg_after": os.getloadavg(),
              "method": {"server_cpu": lib.SERVER_CPU, "client_cpu": lib.CLIENT_CPU,
                         "neighbour_rate": RATE, "flooders": FLOODERS, "bcrypt_cost": COST},
              "peers": peers, "rows": rows, "summary": summary(rows, peers)}
    os.makedirs(lib.RESULTS, exist_ok=True)
    name = datetime.date.today().isoformat() + ("-quick" if args.quick else "")
    path = os.path.join(lib.RESULTS, f"auth-flood-{name}.json")
    json.dump(result, open(path, "w"), indent=1)
    print(f"bench/auth_flood: wrote {path}")
    if not args.no_report:
        report(result, name)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
