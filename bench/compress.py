#!/usr/bin/env python3
"""Compression benchmark: what each level costs, and ringx against nginx compressing the same
100 KB HTML page on the fly with gzip.

1. Levels (`crates/server/examples/compress_levels.rs`): CPU µs per compression of the page
   and the compressed size, gzip 1-9, brotli 0-9, zstd 1-19, in one process on the server
   CPU. The default levels (crates/config/src/compress.rs) are chosen from this table.
2. gzip on the fly, ringx (io_uring, epoll) against nginx (Debian's, `gzip on`), each at
   gzip levels 1 (nginx's default), 5 (ringx's default) and 6: the server pinned to CPU 0 (one
   zone, one nginx worker), wrk on CPU 1 with `Accept-Encoding: gzip`, 10 keep-alive
   connections, peers alternated A B C A B C ... for `--rounds` rounds; the figure is the
   server's CPU (every thread, schedstat) per request, with the ratio to nginx in the same run.
   Both serve the file from the page cache, compress it whole per request, and send the same
   coding at the same level (nginx: zlib 1.2.13, ringx: flate2 on zlib-rs).

Usage: bench/compress.py [--quick] [--rounds N] [--duration S]
Writes bench/results/compress-<date>.json and the Compression section of bench/README.md.
"""
import argparse
import datetime
import gzip
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

PEERS = ["nginx", "ringx-uring", "ringx-epoll"]
LEVELS = [1, 5, 6]


def page(path, size=100_000):
    """A deterministic HTML page of `size` bytes that compresses like real markup (about 4x
    with gzip -5): nested tags, attributes, words from a vocabulary, repeated navigation."""
    rnd = random.Random(23)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 10)))
             for _ in range(3000)]
    nav = "".join(f'<li class="nav-item"><a href="/section/{w}">{w.title()}</a></li>'
                  for w in words[:40])
    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Bench</title>"
           f"</head><body><nav><ul>{nav}</ul></nav><main>"]
    n = 0
    while sum(map(len, out)) < size:
        n += 1
        para = " ".join(rnd.choice(words) for _ in range(rnd.randint(30, 90)))
        out.append(f'<article id="a{n}" class="post"><h2>{rnd.choice(words).title()}</h2>'
                   f'<p class="lead">{para}</p><a class="more" href="/post/{n}">read more</a>'
                   f"</article>\n")
    body = ("".join(out) + "</main></body></html>\n")[:size].encode()
    with open(path, "wb") as f:
        f.write(body)
    return body


def levels_table(file):
    """The level sweep, run in one process pinned to the server CPU."""
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "ringx-server", "--example",
                    "compress_levels"], cwd=lib.ROOT, check=True)
    exe = os.path.join(lib.ROOT, "target", "release", "examples", "compress_levels")
    out = lib.sh(["taskset", "-c", lib.SERVER_CPU, exe, file, "5"], timeout=1800).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


class Server:
    def __init__(self, name, work, level):
        self.name, self.work, self.level = name, work, level
        self.port = lib.free_port()

    def start(self):
        w = self.work
        if self.name == "nginx":
            conf = os.path.join(w, f"nginx-gz{self.level}.conf")
            open(conf, "w").write(f"""
worker_processes 1; daemon off; pid {w}/nginx.pid; error_log {w}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_timeout 75s; keepalive_requests 100000000; sendfile on;
  include /etc/nginx/mime.types;
  client_body_temp_path {w}/b; proxy_temp_path {w}/p; fastcgi_temp_path {w}/f;
  uwsgi_temp_path {w}/u; scgi_temp_path {w}/s;
  gzip on; gzip_comp_level {self.level}; gzip_min_length 256; gzip_vary on;
  server {{ listen 127.0.0.1:{self.port} backlog=4096; location / {{ root {w}/www; }} }} }}
""")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{w}/nginx-error.log"]
        else:
            engine = self.name.split("-", 1)[1]
            conf = os.path.join(w, f"{self.name}-gz{self.level}.toml")
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
engine = "{engine}"
log_level = "warn"
[http]
keepalive_timeout = "75s"
keepalive_requests = 100000000
gzip = {{ types = ["text/html"], min_length = 256, level = {self.level} }}
[[server]]
listen = ["127.0.0.1:{self.port}"]
  [[server.location]]
  path = "/"
  root = "{w}/www"
""")
            cmd = [lib.RINGX, "serve", "-c", conf]
        self.log = open(os.path.join(w, f"{self.name}.log"), "w")
        self.proc = subprocess.Popen(["taskset", "-c", lib.SERVER_CPU, *cmd],
                                     stdout=self.log, stderr=self.log)
        lib.wait_port(self.port, self.proc)
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


def check(port, body):
    """The page really comes gzip-encoded, and decodes to the file."""
    out = subprocess.run(["curl", "-s", "-D", "-", "-H", "Accept-Encoding: gzip", "-o", "-",
                          f"http://127.0.0.1:{port}/page.html"], capture_output=True).stdout
    head, _, data = out.partition(b"\r\n\r\n")
    if b"Content-Encoding: gzip" not in head or gzip.decompress(data) != body:
        raise RuntimeError(f"not a gzip body from :{port}: {head[:300]!r}")
    return len(data)


def measure(srv, secs):
    before = srv.cpu()
    r = lib.run_wrk(srv.port, "/page.html", 10, secs, ["-H", "Accept-Encoding: gzip"])
    if r["errors"]:
        raise RuntimeError(f"wrk errors {r['errors']}: {r['cmd']}")
    r["cpu_us_per_req"] = (srv.cpu() - before) / 1000 / max(r["requests"], 1)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--no-levels", action="store_true", help="skip the level sweep")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    secs = args.duration or (2 if args.quick else 4)
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="ringx-bench-compress-")
    os.makedirs(os.path.join(work, "www"))
    body = page(os.path.join(work, "www", "page.html"))
    for d in (work, os.path.join(work, "www")):
        os.chmod(d, 0o755)  # nginx's worker runs as nobody
    os.chmod(os.path.join(work, "www", "page.html"), 0o644)
    speed0 = lib.host_speed(3)
    table = [] if args.no_levels else levels_table(os.path.join(work, "www", "page.html"))
    for t in table:
        print(f"bench/compress level {t['coding']} {t['level']}: {t['us']:.0f} µs, "
              f"{t['bytes']} bytes ({t['input'] / t['bytes']:.2f}x)", flush=True)
    rows, sizes = [], {}
    workloads = {f"gzip{lv}": f"100 KB HTML, gzip level {lv} on the fly, keep-alive, 10 "
                 "connections: server CPU µs per request" for lv in LEVELS}
    for rnd in range(rounds):
        for lv in LEVELS:
            for peer in PEERS:
                srv = Server(peer, work, lv).start()
                try:
                    sizes[(peer, lv)] = check(srv.port, body)
                    lib.run_wrk(srv.port, "/page.html", 10, 1, ["-H", "Accept-Encoding: gzip"])
                    r = measure(srv, secs)
                finally:
                    srv.stop()
                r.update(peer=peer, workload=f"gzip{lv}", round=rnd)
                rows.append(r)
                print(f"bench/compress round {rnd} gzip{lv} {peer}: {r['cpu_us_per_req']:.0f} "
                      f"µs/req ({r['requests']} in {secs} s)", flush=True)
    summary = lib.summarise(rows, workloads, PEERS)
    result = {"date": datetime.date.today().isoformat(), "mode": "quick" if args.quick else "full",
              "rounds": rounds, "duration_s": secs, "elapsed_s": round(time.time() - t0),
              "machine": lib.machine(), "versions": lib.versions(),
              "load_before": os.getloadavg(), "host_speed_before": speed0,
              "host_speed_after": lib.host_speed(3), "page_bytes": len(body),
              "gzip_bytes": {f"{p} gzip{lv}": n for (p, lv), n in sizes.items()},
              "levels": table, "workloads": workloads, "rows": rows, "summary": summary}
    name = f"compress-{result['date']}" + ("-quick" if args.quick else "")
    os.makedirs(lib.RESULTS, exist_ok=True)
    with open(os.path.join(lib.RESULTS, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"bench/compress: wrote bench/results/{name}.json", flush=True)
    for wl in workloads:
        cells = []
        for p in PEERS:
            s = summary[wl].get(p, {}).get("cpu_us_per_req")
            if s:
                cells.append(f"{p} {s['median']:.0f} ({s.get('ratio_to_nginx', 1):.2f}×)")
        print(f"  {wl}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
