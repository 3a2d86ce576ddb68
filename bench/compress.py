#!/usr/bin/env python3
"""Compression benchmark: what each level costs, and ringx against nginx compressing the same
100 KB HTML page on the fly with gzip.

1. Levels: ringx serving the page with one coding at one level (gzip 1-9, brotli 0-9, zstd
   1-19), the server's CPU per request and the size it sent, the identity response first as
   the floor. The default levels (crates/config/src/compress.rs) are chosen from this table.
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
    """A deterministic HTML page of `size` bytes that compresses like real markup (gzip -6
    takes it to about a quarter): articles of words drawn with a Zipf law from a vocabulary of
    syllable words, with the tags, classes and links of a blog's index page."""
    rnd = random.Random(23)
    syll = ["ka", "ri", "to", "men", "sa", "lo", "ve", "an", "der", "ing", "tion", "pre", "con",
            "el", "us", "ar", "ma", "ne", "es", "or", "ul", "it", "ad", "ex"]
    words = sorted({"".join(rnd.choice(syll) for _ in range(rnd.randint(1, 4)))
                    for _ in range(4000)})
    rnd.shuffle(words)
    weights = [1 / (i + 1) for i in range(len(words))]
    nav = "".join(f'<li class="nav-item"><a class="nav-link" href="/section/{w}">{w.title()}</a>'
                  f"</li>" for w in words[:30])
    out = [f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Bench</title>'
           f'<link rel="stylesheet" href="/static/site.css"></head><body><header class="site">'
           f'<nav class="navbar"><ul class="nav">{nav}</ul></nav></header><main class="content">']
    n = 0
    while sum(map(len, out)) < size:
        n += 1
        text = " ".join(rnd.choices(words, weights, k=rnd.randint(40, 120)))
        tag = rnd.choice(words[:50])
        out.append(f'<article class="post" id="post-{n}"><header class="post-header"><h2 '
                   f'class="post-title"><a href="/{2026 - n % 9}/{n % 12 + 1:02d}/{tag}-{n}/">'
                   f'{tag.title()} {rnd.choice(words[:200])}</a></h2><div class="post-meta">'
                   f'<time datetime="2026-{n % 12 + 1:02d}-{n % 28 + 1:02d}">{n % 28 + 1} '
                   f'days ago</time> <a class="tag" href="/tag/{tag}/">#{tag}</a></div></header>'
                   f'<div class="post-body"><p>{text}.</p></div><footer class="post-footer"><a '
                   f'class="read-more" href="/{tag}-{n}/">Read more</a></footer></article>\n')
    body = ("".join(out) + "</main></body></html>\n")[:size].encode()
    with open(path, "wb") as f:
        f.write(body)
    return body


SWEEP = [("gzip", range(1, 10)), ("brotli", range(0, 10)), ("zstd", (1, 2, 3, 5, 7, 9, 12, 15, 19))]
TOKEN = {"gzip": "gzip", "brotli": "br", "zstd": "zstd"}


def levels_table(work, body, secs):
    """Every level's cost, through ringx itself: one server per coding and level, wrk with
    that coding accepted, the server's CPU per request and the size of the body it sent; the
    identity response first, as the floor."""
    table = []
    for coding, levels in [("identity", [0])] + SWEEP:
        for lv in levels:
            srv = Server("ringx-uring", work, lv, coding).start()
            try:
                tok = TOKEN.get(coding, "identity")
                size = fetch_size(srv.port, tok, body)
                lib.run_wrk(srv.port, "/page.html", 10, 1, ["-H", f"Accept-Encoding: {tok}"])
                r = measure(srv, secs, tok)
            finally:
                srv.stop()
            table.append({"coding": coding, "level": lv, "us": r["cpu_us_per_req"],
                          "bytes": size, "input": len(body), "requests": r["requests"]})
            print(f"bench/compress level {coding} {lv}: {r['cpu_us_per_req']:.0f} µs/req, "
                  f"{size} bytes ({len(body) / size:.2f}x)", flush=True)
    return table


class Server:
    def __init__(self, name, work, level, coding="gzip"):
        self.name, self.work, self.level, self.coding = name, work, level, coding
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
            conf = os.path.join(w, f"{self.name}-{self.coding}{self.level}.toml")
            codec = "" if self.coding == "identity" else (
                f'{self.coding} = {{ types = ["text/html"], min_length = 256, level = {self.level} }}')
            open(conf, "w").write(f"""
[runtime]
zones = 1
cpus = [{lib.SERVER_CPU}]
engine = "{engine}"
log_level = "warn"
[http]
keepalive_timeout = "75s"
keepalive_requests = 100000000
{codec}
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


def fetch_size(port, token, body):
    """The body as sent with `token` accepted: checked to decode to the page; its size."""
    out = subprocess.run(["curl", "-s", "-D", "-", "-H", f"Accept-Encoding: {token}", "-o", "-",
                          f"http://127.0.0.1:{port}/page.html"], capture_output=True).stdout
    head, _, data = out.partition(b"\r\n\r\n")
    if token == "identity":
        ok = data == body
    elif token == "gzip":
        ok = b"Content-Encoding: gzip" in head and gzip.decompress(data) == body
    elif token == "br":
        import brotli
        ok = b"Content-Encoding: br" in head and brotli.decompress(data) == body
    else:
        import zstandard
        ok = (b"Content-Encoding: zstd" in head and
              zstandard.ZstdDecompressor().decompressobj().decompress(data) == body)
    if not ok:
        raise RuntimeError(f"not a {token} body of the page from :{port}: {head[:300]!r}")
    return len(data)


def measure(srv, secs, token="gzip"):
    before = srv.cpu()
    r = lib.run_wrk(srv.port, "/page.html", 10, secs, ["-H", f"Accept-Encoding: {token}"])
    if r["errors"]:
        raise RuntimeError(f"wrk errors {r['errors']}: {r['cmd']}")
    r["cpu_us_per_req"] = (srv.cpu() - before) / 1000 / max(r["requests"], 1)
    return r


def report(result):
    """The Compression section of bench/README.md, between its markers, from a result."""
    lines = [f"### Latest run: `{result['date']}` ({result['mode']}, {result['rounds']} rounds of "
             f"{result['duration_s']} s, {result['elapsed_s']} s in all)", "",
             f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, Linux "
             f"{result['machine']['kernel']}. Versions: {result['versions']['ringx']}; "
             f"{result['versions']['nginx']}. Load average before the run: "
             f"{', '.join(f'{x:.1f}' for x in result['load_before'])} (other work shared the "
             f"machine); host noise (a fixed busy loop) spread "
             f"{result['host_speed_before']['spread']}× before and "
             f"{result['host_speed_after']['spread']}× after. The page: {result['page_bytes']} "
             "bytes of HTML (bench/compress.py `page()`).", ""]
    if result["levels"]:
        lines += ["**Every level** (ringx-uring, one coding configured, 10 keep-alive connections; "
                  "server CPU µs per request, the identity response being the floor, and the "
                  "size sent):", "", "| coding | level | CPU µs/request | bytes | ratio |",
                  "|---|---:|---:|---:|---:|"]
        for t in result["levels"]:
            lines.append(f"| {t['coding']} | {t['level']} | {t['us']:.0f} | {t['bytes']} | "
                         f"{t['input'] / t['bytes']:.2f}× |")
        lines.append("")
    lines += ["**gzip on the fly against nginx** (median, min–max over the rounds; **bold**: the "
              "ratio to nginx in the same run; bytes: the compressed body each sent):", "",
              "| level | peer | CPU µs/request | requests/s | bytes |", "|---:|---|---|---|---:|"]
    for wl in result["workloads"]:
        for p in PEERS:
            s = result["summary"][wl].get(p)
            if not s:
                continue
            c, r = s["cpu_us_per_req"], s["rps"]
            size = result["gzip_bytes"].get(f"{p} {wl}", "")
            lines.append(f"| {wl[4:]} | {p} | {c['median']:.0f} ({c['min']:.0f}–{c['max']:.0f}) "
                         f"**{c.get('ratio_to_nginx', 1):.2f}×** | {r['median']:.0f} "
                         f"({r['min']:.0f}–{r['max']:.0f}) **{r.get('ratio_to_nginx', 1):.2f}×** | "
                         f"{size} |")
    cmds = sorted({re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", r["cmd"]) for r in result["rows"]})
    lines += ["", "<details><summary>Client commands of this run</summary>", ""]
    lines += [f"    {c}" for c in cmds] + ["", "</details>"]
    path = os.path.join(lib.BENCH, "README.md")
    text = open(path).read()
    block = "<!-- compress:begin -->\n" + "\n".join(lines) + "\n<!-- compress:end -->"
    if "<!-- compress:begin -->" in text:
        text = re.sub(r"<!-- compress:begin -->.*?<!-- compress:end -->", lambda _: block, text,
                      flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    open(path, "w").write(text)
    print("bench/compress: updated bench/README.md", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--duration", type=int)
    ap.add_argument("--no-levels", action="store_true", help="skip the level sweep")
    ap.add_argument("--no-report", action="store_true", help="do not rewrite bench/README.md")
    ap.add_argument("--report-only", metavar="JSON", help="rewrite the README from a result")
    args = ap.parse_args()
    if args.report_only:
        report(json.load(open(args.report_only)))
        return
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
    table = [] if args.no_levels else levels_table(work, body, 1 if args.quick else 2)
    rows, sizes = [], {}
    workloads = {f"gzip{lv}": f"100 KB HTML, gzip level {lv} on the fly, keep-alive, 10 "
                 "connections: server CPU µs per request" for lv in LEVELS}
    for rnd in range(rounds):
        for lv in LEVELS:
            for peer in PEERS:
                srv = Server(peer, work, lv).start()
                try:
                    sizes[(peer, lv)] = fetch_size(srv.port, "gzip", body)
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
    if not args.no_report and not args.quick:
        report(result)
    for wl in workloads:
        cells = []
        for p in PEERS:
            s = summary[wl].get(p, {}).get("cpu_us_per_req")
            if s:
                cells.append(f"{p} {s['median']:.0f} ({s.get('ratio_to_nginx', 1):.2f}×)")
        print(f"  {wl}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
