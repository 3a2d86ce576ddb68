"""Short-connection proxy throughput on the steering test bed (issue #5), steering on vs off.

Three network namespaces joined by two veth pairs, as in tests/test_steering_active.py:

    client (wrk)  --veth--  ringx (2 zones on CPUs 0 and 1)  --veth--  upstream (nginx)

wrk sends every request on a new connection (`Connection: close`); ringx proxies each one over
a new upstream connection (nginx with `keepalive_timeout 0` closes after answering). Modes:

  software     [steering] mode = "software": ringx binds each upstream connection to a port
               of its zone's residue and attaches its XDP program to both of its veths, which
               moves every TCP packet to its zone's CPU (replies by port, client packets by a
               hash)
  software-up  the same, with the program on the upstream-facing veth only: client packets
               are left where veth delivers them (the client's CPU, whose zone accepts them
               with [steering] listen = "cpu")
  off          the kernel chooses ports; packets are processed where veth delivers them (the
               sender's CPU)

Each run gets a fresh test bed (no TIME_WAIT left from the previous one). Runs alternate
between the modes; the machine is shared with other work, so the spread between rounds is
reported with the means. Locality comes from ringx's own /metrics (SO_INCOMING_CPU of each
upstream connection at its first response bytes).

Root only; without root the section records why it was skipped.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

RC_IP, C_IP = "10.233.1.1", "10.233.1.2"
RU_IP, U_IP = "10.233.2.1", "10.233.2.2"
PORT, UP_PORT, ADMIN = 8080, 8081, 9901


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


def _ns(ns, *cmd, **kw):
    return ["nsenter", f"--net=/run/netns/{ns}", *cmd]


class Testbed:
    """Client, ringx and upstream namespaces with static neighbours; removed by close()."""

    def __init__(self, tag):
        self.cli, self.rx, self.up = f"rxb-c{tag}", f"rxb-r{tag}", f"rxb-u{tag}"
        self.rc, self.cr, self.ru, self.ur = f"rxb{tag}rc", f"rxb{tag}cr", f"rxb{tag}ru", f"rxb{tag}ur"
        self.close()
        for ns in (self.cli, self.rx, self.up):
            _ip("netns", "add", ns)
        _ip("link", "add", self.rc, "netns", self.rx, "type", "veth", "peer", "name", self.cr,
            "netns", self.cli)
        _ip("link", "add", self.ru, "netns", self.rx, "type", "veth", "peer", "name", self.ur,
            "netns", self.up)
        links = ((self.rx, self.rc, RC_IP), (self.cli, self.cr, C_IP), (self.rx, self.ru, RU_IP),
                 (self.up, self.ur, U_IP))
        for ns, dev, addr in links:
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

        def mac(ns, dev):
            return json.loads(_ip("-n", ns, "-j", "link", "show", "dev", dev).stdout)[0]["address"]

        for ns, dev, peer_ip, pns, pdev in ((self.cli, self.cr, RC_IP, self.rx, self.rc),
                                            (self.rx, self.rc, C_IP, self.cli, self.cr),
                                            (self.rx, self.ru, U_IP, self.up, self.ur),
                                            (self.up, self.ur, RU_IP, self.rx, self.ru)):
            _ip("-n", ns, "neigh", "replace", peer_ip, "lladdr", mac(pns, pdev), "dev", dev,
                "nud", "permanent")

    def close(self):
        for ns in (self.cli, self.rx, self.up):
            _ip("netns", "del", ns, check=False)


def _wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def _listening(ns, port):
    out = subprocess.run(_ns(ns, "ss", "-Htln", f"sport = :{port}"), capture_output=True, text=True)
    return str(port) in out.stdout


def _metrics(ns):
    out = subprocess.run(_ns(ns, "curl", "-s", "--max-time", "5", f"http://127.0.0.1:{ADMIN}/metrics"),
                         capture_output=True, text=True).stdout
    tot = {}
    for name, labels, v in re.findall(r"^(ringx_\w+)(\{[^}]*\})? (\S+)$", out, re.M):
        cpu = re.search(r'cpu="(\w+)"', labels or "")
        key = f"{name}:{cpu[1]}" if cpu else name
        tot[key] = tot.get(key, 0) + float(v)
    return tot


def one_run(ringx_bin, nginx_bin, mode, secs, conns, work, tag):
    """One fresh test bed, one wrk run; rps, latency, errors and ringx's counters."""
    tb = Testbed(tag)
    procs = []
    try:
        up_conf = os.path.join(work, "up.conf")
        open(up_conf, "w").write(f"""
worker_processes 2; daemon off; pid {work}/up.pid; error_log {work}/up-error.log warn;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_timeout 0;
  client_body_temp_path {work}/b; proxy_temp_path {work}/p; fastcgi_temp_path {work}/f;
  uwsgi_temp_path {work}/u; scgi_temp_path {work}/s;
  server {{ listen {U_IP}:{UP_PORT} backlog=4096; location / {{ return 200 "ok\\n"; }} }} }}
""")
        procs.append(subprocess.Popen(_ns(tb.up, nginx_bin, "-c", up_conf, "-e", f"{work}/up-error.log"),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(lambda: _listening(tb.up, UP_PORT), 10, "nginx upstream")
        steering = 'mode = "off"\n'
        if mode != "off":
            devs = [tb.rc, tb.ru] if mode == "software" else [tb.ru]
            steering = 'mode = "software"\ndevice = [' + ", ".join(f'"{d}"' for d in devs) + "]\n"
        conf = os.path.join(work, f"ringx-{mode}.toml")
        open(conf, "w").write(f"""
[runtime]
zones = 2
cpus = [0, 1]
engine = "uring"
[steering]
listen = "cpu"
{steering}
[admin]
listen = "127.0.0.1:{ADMIN}"
[[upstream]]
name = "app"
servers = ["{U_IP}:{UP_PORT}"]
keepalive = 0
[[server]]
listen = ["{RC_IP}:{PORT}"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
""")
        log = open(os.path.join(work, f"ringx-{mode}.log"), "w")
        procs.append(subprocess.Popen(_ns(tb.rx, ringx_bin, "serve", "-c", conf),
                                      stdout=log, stderr=log))
        _wait(lambda: _listening(tb.rx, PORT), 10, "ringx")
        # Warm-up, then the measured run.
        subprocess.run(_ns(tb.cli, "wrk", "-t2", "-c8", "-d1s", "-H", "Connection: close",
                           f"http://{RC_IP}:{PORT}/"), capture_output=True, timeout=30)
        before = _metrics(tb.rx)
        cmd = ["wrk", "-t2", f"-c{conns}", f"-d{secs}s", "--latency", "-H", "Connection: close",
               f"http://{RC_IP}:{PORT}/"]
        res = subprocess.run(_ns(tb.cli, *cmd), capture_output=True, text=True, timeout=secs + 60)
        after = _metrics(tb.rx)
        out = res.stdout
        m = re.search(r"Requests/sec:\s+([\d.]+)", out)
        if not m:
            raise RuntimeError(f"wrk gave no result:\n{out}\n{res.stderr}")

        def ms(v):
            n = float(re.match(r"[\d.]+", v)[0])
            return n / 1000 if v.endswith("us") else n * 1000 if v.endswith("s") and not v.endswith("ms") else n

        lat = re.search(r"^\s+Latency\s+(\S+)", out, re.M)
        p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
        errors = re.search(r"Socket errors: (.*)", out)
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        home, away = d.get("ringx_upstream_locality_total:home", 0), d.get("ringx_upstream_locality_total:away", 0)
        return {
            "mode": mode,
            "rps": float(m[1]),
            "lat_avg_ms": ms(lat[1]) if lat else None,
            "lat_p99_ms": ms(p99[1]) if p99 else None,
            "errors": (errors[1] if errors else "") + (f" non2xx={non2xx[1]}" if non2xx else ""),
            "upstream_connects": d.get("ringx_upstream_connects_total", 0),
            "locality_home": home,
            "locality_away": away,
            "locality": home / (home + away) if home + away else None,
            "table_hits": d.get("ringx_steering_table_hits_total", 0),
            "dynamic_searches": d.get("ringx_steering_dynamic_searches_total", 0),
            "hash_evals": d.get("ringx_steering_hash_evaluations_total", 0),
            "fallbacks": d.get("ringx_steering_fallbacks_total", 0),
            "port_busy": d.get("ringx_steering_port_busy_total", 0),
            "command": " ".join(cmd),
        }
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        tb.close()


def skip_reason(ringx_bin, nginx_bin):
    if os.geteuid() != 0:
        return "not root (network namespaces, veth, XDP)"
    for tool in ("ip", "nsenter", "wrk", "curl", "ss"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not nginx_bin:
        return "nginx is not installed (the upstream)"
    if not os.access(ringx_bin, os.X_OK):
        return f"no ringx binary at {ringx_bin}"
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        return "needs CPUs 0 and 1"
    return None


MODES = ("software", "software-up", "off")


def run(ringx_bin, quick):
    """Alternating rounds of the modes; the section for the JSON result."""
    nginx_bin = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    why = skip_reason(ringx_bin, nginx_bin)
    if why:
        print(f"proxy test bed: skipped: {why}", flush=True)
        return {"skipped": why}
    secs, rounds, conns = (3, 1, 32) if quick else (6, 3, 32)
    runs = []
    with tempfile.TemporaryDirectory(prefix="ringx-steer-bench-") as work:
        for r in range(rounds):
            for mode in MODES:
                res = one_run(ringx_bin, nginx_bin, mode, secs, conns, work, f"{os.getpid() % 10000}")
                res["round"] = r
                loc = "-" if res["locality"] is None else f"{100 * res['locality']:.1f}%"
                print(f"proxy test bed: round {r} {mode}: {res['rps']:.0f} req/s, locality {loc}, "
                      f"table hits {res['table_hits']:.0f}, hash evals {res['hash_evals']:.0f}, "
                      f"fallbacks {res['fallbacks']:.0f} {res['errors']}", flush=True)
                runs.append(res)

    def agg(mode):
        rs = [x for x in runs if x["mode"] == mode]
        rps = [x["rps"] for x in rs]
        loc = [x["locality"] for x in rs if x["locality"] is not None]
        return {
            "rps_mean": sum(rps) / len(rps),
            "rps_min": min(rps),
            "rps_max": max(rps),
            "lat_avg_ms_mean": sum(x["lat_avg_ms"] for x in rs) / len(rs),
            "lat_p99_ms_mean": sum(x["lat_p99_ms"] for x in rs) / len(rs),
            "locality_mean": sum(loc) / len(loc) if loc else None,
            "upstream_connects": sum(x["upstream_connects"] for x in rs),
            "table_hits": sum(x["table_hits"] for x in rs),
            "hash_evals": sum(x["hash_evals"] for x in rs),
            "fallbacks": sum(x["fallbacks"] for x in rs),
        }

    by_mode = {m: agg(m) for m in MODES}
    off = by_mode["off"]
    for m in MODES:
        by_mode[m]["rps_ratio_to_off"] = by_mode[m]["rps_mean"] / off["rps_mean"]
    return {
        "setup": {"seconds": secs, "rounds": rounds, "connections": conns, "engine": "uring",
                  "zones": "2 on CPUs 0, 1", "upstream": "nginx, 2 workers, keepalive_timeout 0",
                  "client": "wrk -t2 with Connection: close, in its own namespace"},
        "loadavg_1m": os.getloadavg()[0],
        "runs": runs,
        "modes": by_mode,
    }
