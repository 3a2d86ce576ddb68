#!/usr/bin/env python3
"""TLS scan (issue 35): testssl.sh (Debian's package) against ringx and against nginx on the
same certificates, and a comparison of what it finds.

A test CA (tests/tls_pki.py) signs an ECDSA P-256 and an RSA 2048 certificate for bench.test
(365 days, and a CRL distribution point under `.invalid` that nothing serves, so that the
certificate itself raises no finding). ringx serves both from one `[[server]]`
(`tls = [{cert, key}, {cert, key}]`, every TLS setting at its default: rustls on aws-lc-rs).
nginx serves both from one `server` (two `ssl_certificate` lines, `http2` on the listener so
that both offer the same ALPN protocols), in two configurations, each a baseline:

  nginx          nginx's compiled-in TLS defaults: no `ssl_protocols`, `ssl_ciphers` or
                 `ssl_prefer_server_ciphers` line. For Debian's nginx 1.22 that is
                 `TLSv1 TLSv1.1 TLSv1.2` (TLS 1.3 joined the default in 1.23.4) and
                 `HIGH:!aNULL:!MD5`, the client's cipher order, under Debian's OpenSSL 3 at its
                 default security level (which refuses TLS 1.0 and 1.1 handshakes).
  nginx-debian   what Debian's /etc/nginx/nginx.conf adds: `ssl_protocols TLSv1 TLSv1.1
                 TLSv1.2 TLSv1.3`, `ssl_prefer_server_ciphers on`, `gzip on`.

Both serve a 1 KB `index.html` at `/`, the page testssl's BREACH check fetches; ringx and
nginx compress nothing by default (nginx-debian has `gzip on`, for text/html).

testssl runs against each on 127.0.0.1 only, with `--nodns none --ip 127.0.0.1` (no DNS: no
CAA or rDNS lookups), without `--phone-out` (no CRL or OCSP fetches), `--add-ca` with the test
CA (chain of trust), and the checks `-p -s -E -f -P -S -U -4` (`--quick`: `-p -s -f -U`):
protocols, cipher categories, the suites offered per protocol, forward secrecy, server
preferences, server defaults and certificates, every vulnerability check (Heartbleed,
CCS, Ticketbleed, ROBOT, renegotiation, CRIME, BREACH, POODLE, TLS_FALLBACK_SCSV, SWEET32,
FREAK, DROWN, LOGJAM, BEAST, LUCKY13, RC4). Never `--fast`: with it testssl checks RC4 with
the local openssl, which has no RC4, and reports that check as failed. testssl itself probes
the local openssl with `s_client -connect invalid.`, a DNS lookup; so that no packet leaves
the machine, as root the whole run happens in a network namespace of its own (`unshare
--net`, only `lo` up; `--no-netns` runs in the machine's).

Each finding is compared by testssl's id (certificate ids by key type, `<rsa>` / `<ec>`,
rather than by the order the server sent them) on testssl's severity scale, OK and INFO
counting as no finding, then LOW < MEDIUM < HIGH < CRITICAL. A **regression** is a ringx
finding rated worse than the baseline's same finding (or one the baseline does not have,
rated LOW or worse), or a protocol below TLS 1.2 that ringx offers and the baseline does not;
a protocol or vulnerability check that ran against the baseline but failed or is missing
against ringx (testssl's WARN, or no result) is **unchecked**. Both lists are printed for each
baseline; the script exits 1 if either is not empty for the first baseline (`--baselines`,
nginx's compiled-in defaults unless told otherwise).

Usage: bench/testssl.py [--quick] [--baselines nginx,nginx-debian] [--no-netns] [--no-report]
                        [--report-only JSON]
Writes bench/results/testssl-<date>[-quick].json and the TLS scan section of bench/README.md
(between <!-- testssl:begin --> and <!-- testssl:end -->; not for --quick).
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

sys.path.insert(0, os.path.join(lib.ROOT, "tests"))
from tls_pki import Pki  # noqa: E402

HOST = "bench.test"
CRL = "http://crl.invalid/testssl-ca.crl"
BASELINES = ["nginx", "nginx-debian"]
CHECKS = ["-p", "-s", "-E", "-f", "-P", "-S", "-U", "-4"]
QUICK_CHECKS = ["-p", "-s", "-f", "-U"]
NETNS_ENV = "RINGX_TESTSSL_NETNS"

# testssl's severities: OK and INFO are no finding; WARN (a check that could not run) and
# DEBUG are not ratings.
RANK = {"OK": 0, "INFO": 0, "LOW": 1, "MEDIUM": 2, "HIGH": 3, "CRITICAL": 4}
OLD_PROTOCOLS = ["SSLv2", "SSLv3", "TLS1", "TLS1_1"]
PROTOCOLS = [("SSLv2", "SSLv2"), ("SSLv3", "SSLv3"), ("TLS1", "TLS 1.0"), ("TLS1_1", "TLS 1.1"),
             ("TLS1_2", "TLS 1.2"), ("TLS1_3", "TLS 1.3"), ("ALPN_HTTP2", "ALPN h2"),
             ("ALPN", "ALPN, other")]
FS = [("PFS", "forward secrecy"), ("PFS_ECDHE_curves", "ECDHE curves"),
      ("DH_groups", "DH groups"), ("cipher_order", "server cipher order")]
VULNS = [("heartbleed", "Heartbleed"), ("CCS", "CCS injection"), ("ticketbleed", "Ticketbleed"),
         ("ROBOT", "ROBOT"), ("secure_renego", "secure renegotiation"),
         ("secure_client_renego", "client-initiated renegotiation"), ("CRIME_TLS", "CRIME"),
         ("BREACH", "BREACH"), ("POODLE_SSL", "POODLE"), ("fallback_SCSV", "TLS_FALLBACK_SCSV"),
         ("SWEET32", "SWEET32"), ("FREAK", "FREAK"), ("DROWN", "DROWN"), ("LOGJAM", "LOGJAM"),
         ("LOGJAM-common_primes", "LOGJAM, common primes"), ("BEAST", "BEAST"),
         ("LUCKY13", "LUCKY13"), ("RC4", "RC4")]
# Ids left out of the comparison: what changes from run to run (fingerprints, serials, the
# certificate itself, times), not a rating of the server.
NOISE = re.compile(r"^(cert |cert_fingerprint|cert_serialNumber |cert_notBefore|cert_notAfter|"
                   r"scanTime|DROWN_hint|TLS_timestamp)")


def testssl_bin():
    return shutil.which("testssl") or shutil.which("testssl.sh")


def testssl_version(binary):
    r = lib.sh(["dpkg-query", "-W", "-f", "${Version}", "testssl.sh"])
    if r.returncode == 0 and r.stdout.strip():
        return f"testssl.sh {r.stdout.strip()} (Debian package)"
    m = re.search(r"testssl\.sh\s+([\w.+~-]+)", lib.sh([binary, "--version"]).stdout)
    return f"testssl.sh {m.group(1) if m else '?'}"


def enter_netns(no_netns):
    """Re-runs this script in a network namespace of its own (root, `unshare --net`), unless
    already there; inside, brings `lo` up. Returns whether the run is in a private namespace."""
    if os.environ.get(NETNS_ENV) == "1":
        lib.sh(["ip", "link", "set", "lo", "up"], check=True)
        return True
    if no_netns:
        return False
    if os.geteuid() != 0 or not shutil.which("unshare") or \
            lib.sh(["unshare", "--net", "true"]).returncode != 0:
        print("bench/testssl: no network namespace here (needs root and unshare): running in the "
              "machine's; testssl's local openssl probes then look up `invalid.` in DNS",
              flush=True)
        return False
    r = subprocess.run(["unshare", "--net", "--", sys.executable, os.path.abspath(__file__),
                        *sys.argv[1:]], env={**os.environ, NETNS_ENV: "1"})
    sys.exit(r.returncode)


def make_certs(work):
    pki = Pki(os.path.join(work, "pki"), name="testssl bench CA")
    out = {"ca": str(pki.ca_path)}
    for kind in ("ec", "rsa"):
        c, k = pki.leaf(kind, [HOST], kind=kind, days=(-1, 365), crl=CRL)
        out[kind] = (str(c), str(k))
    return out


def site(work):
    www = os.path.join(work, "www")
    os.makedirs(www, exist_ok=True)
    page = ("<!doctype html><html><head><title>ringx testssl</title></head><body>\n" +
            "<p>The page testssl's HTTP checks fetch.</p>\n" * 20 + "</body></html>\n")
    with open(os.path.join(www, "index.html"), "w") as f:
        f.write(page)
    # nginx's worker runs as nobody: it must reach and read the page.
    for d in (work, www):
        os.chmod(d, 0o755)
    os.chmod(os.path.join(www, "index.html"), 0o644)
    return www


class Server:
    def __init__(self, name, work, certs, www):
        self.name, self.work, self.certs, self.www = name, work, certs, www
        self.port = lib.free_port()

    def config(self):
        w, (ec, eck), (rsa, rsak) = self.work, self.certs["ec"], self.certs["rsa"]
        if self.name == "ringx":
            return f"""[runtime]
zones = 1
log_level = "warn"
[[server]]
listen = ["127.0.0.1:{self.port}"]
server_name = ["{HOST}"]
tls = [{{ cert = "{ec}", key = "{eck}" }}, {{ cert = "{rsa}", key = "{rsak}" }}]
  [[server.location]]
  path = "/"
  root = "{self.www}"
  index = ["index.html"]
"""
        debian = ("ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3; ssl_prefer_server_ciphers on; "
                  "gzip on;") if self.name == "nginx-debian" else ""
        return f"""worker_processes 1; daemon off; pid {w}/{self.name}.pid; error_log {w}/{self.name}-error.log warn;
events {{ worker_connections 256; }}
http {{ access_log off; types {{ text/html html; }} default_type application/octet-stream;
  client_body_temp_path {w}/b; proxy_temp_path {w}/p; fastcgi_temp_path {w}/f;
  uwsgi_temp_path {w}/u; scgi_temp_path {w}/s;
  {debian}
  server {{ listen 127.0.0.1:{self.port} ssl http2; server_name {HOST};
    ssl_certificate {ec}; ssl_certificate_key {eck};
    ssl_certificate {rsa}; ssl_certificate_key {rsak};
    root {self.www}; }} }}
"""

    def start(self):
        text = self.config()
        if self.name == "ringx":
            conf = os.path.join(self.work, "ringx.toml")
            cmd = [lib.RINGX, "serve", "-c", conf]
        else:
            conf = os.path.join(self.work, f"{self.name}.conf")
            cmd = [lib.nginx_bin(), "-c", conf, "-e", f"{self.work}/{self.name}-error.log"]
        with open(conf, "w") as f:
            f.write(text)
        self.log = open(os.path.join(self.work, f"{self.name}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        lib.wait_port(self.port, self.proc)
        return text

    def stop(self):
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name == "ringx" else signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_testssl(binary, port, ca, checks, out_json, timeout=900):
    """testssl against 127.0.0.1:`port` (SNI bench.test), flat JSON into `out_json`; returns
    the command line and its text output."""
    cmd = [binary, "--quiet", "--warnings", "off", "--color", "0", "--nodns", "none",
           "--ip", "127.0.0.1", "--openssl", shutil.which("openssl") or "/usr/bin/openssl",
           "--connect-timeout", "10", "--openssl-timeout", "10", "--add-ca", ca,
           "--jsonfile", out_json, *checks, f"{HOST}:{port}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if not os.path.exists(out_json):
        raise RuntimeError(f"testssl wrote no JSON (exit {r.returncode}): {' '.join(cmd)}\n"
                           f"{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
    return cmd, r.stdout


def findings(raw):
    """testssl's flat JSON list as {id: {severity, finding}}: certificate ids named by key type
    (`cert_keySize <ec>`), repeated ids merged (worst severity, findings joined), run-to-run
    noise left out."""
    kind = {}
    for f in raw:
        m = re.match(r"cert_keySize <cert#(\d+)>$", f["id"])
        if m:
            kind[m.group(1)] = f["finding"].split()[0].lower()
    out = {}
    for f in raw:
        fid = re.sub(r"<cert#(\d+)>", lambda m: f"<{kind.get(m.group(1), 'cert' + m.group(1))}>",
                     f["id"])
        if NOISE.match(fid) or f["severity"] == "DEBUG":
            continue
        sev, text = f["severity"], " ".join(f.get("finding", "").split())
        if fid in out:
            old = out[fid]
            if RANK.get(sev, -1) > RANK.get(old["severity"], -1):
                old["severity"] = sev
            if text and text not in old["finding"]:
                old["finding"] += " | " + text
        else:
            out[fid] = {"severity": sev, "finding": text}
    return out


def offered(f, fid):
    v = f.get(fid)
    return bool(v) and v["finding"].startswith("offered")


def ciphers(f):
    """Cipher suites offered per protocol (from -E's `cipher-<proto>_x<hex>` ids, else the
    forward-secrecy list)."""
    per = {}
    for fid, v in f.items():
        m = re.match(r"cipher-(\w+?)_x([0-9a-f]+)$", fid)
        if m:
            parts = v["finding"].split()
            name = parts[-1] if len(parts) > 2 else fid
            per.setdefault(m.group(1), []).append(name)
    return {p: sorted(c) for p, c in sorted(per.items())}


def compare(rx, bases):
    """Rows of the comparison of ringx's findings `rx` with each baseline's in `bases`
    ({name: findings}), and per baseline the regressions and unchecked checks."""
    rows, regressions, unchecked = [], {}, {}

    def sev(f, fid):
        v = f.get(fid)
        return RANK.get(v["severity"], 0) if v else 0

    for name, ng in bases.items():
        reg, unc = [], []
        for fid in sorted(set(rx) | set(ng)):
            a, b = rx.get(fid), ng.get(fid)
            if a and a["severity"] in RANK and sev(rx, fid) > sev(ng, fid):
                reg.append({"id": fid, "ringx": a, "nginx": b})
        for fid in OLD_PROTOCOLS:
            if offered(rx, fid) and not offered(ng, fid):
                reg.append({"id": fid, "ringx": rx[fid], "nginx": ng.get(fid),
                            "why": "an old protocol ringx offers and nginx does not"})
        for fid, _ in VULNS + PROTOCOLS[:6]:
            a, b = rx.get(fid), ng.get(fid)
            if b and b["severity"] != "WARN" and (a is None or a["severity"] == "WARN"):
                unc.append({"id": fid, "ringx": a, "nginx": b})
        regressions[name], unchecked[name] = reg, unc

    def row(group, fid, label):
        a = rx.get(fid)
        return {"group": group, "id": fid, "label": label, "ringx": a,
                "nginx": {n: f.get(fid) for n, f in bases.items()},
                "verdict": {n: verdict(a, f.get(fid)) for n, f in bases.items()}}

    for group, items in (("protocols", PROTOCOLS), ("forward secrecy", FS),
                         ("vulnerabilities", VULNS)):
        for fid, label in items:
            if rx.get(fid) or any(f.get(fid) for f in bases.values()):
                rows.append(row(group, fid, label))
    rc, nc = ciphers(rx), {n: ciphers(f) for n, f in bases.items()}
    for proto in sorted(set(rc).union(*nc.values())):
        a = rc.get(proto, [])
        r = {"group": "cipher suites", "id": f"cipher-{proto}", "label": proto, "ringx": a,
             "nginx": {}, "only_ringx": {}, "only_nginx": {}, "verdict": {}}
        for n in bases:
            b = nc[n].get(proto, [])
            r["nginx"][n] = b
            r["only_ringx"][n] = sorted(set(a) - set(b))
            r["only_nginx"][n] = sorted(set(b) - set(a))
            r["verdict"][n] = "same" if set(a) == set(b) else "differs"
        rows.append(r)
    shown = {r["id"] for r in rows}
    everyone = set(rx).union(*[set(f) for f in bases.values()])
    for fid in sorted(everyone):
        if fid in shown or fid.startswith("cipher-"):
            continue
        sevs = [(rx.get(fid) or {}).get("severity")] + \
            [(f.get(fid) or {}).get("severity") for f in bases.values()]
        if max([sev(rx, fid)] + [sev(f, fid) for f in bases.values()]) > 0 or "WARN" in sevs:
            rows.append(row("other findings rated LOW or worse (or WARN)", fid, fid))
    return rows, regressions, unchecked


def verdict(a, b):
    ra = RANK.get(a["severity"], 0) if a else 0
    rb = RANK.get(b["severity"], 0) if b else 0
    if a and a["severity"] == "WARN" and not (b and b["severity"] == "WARN"):
        return "unchecked"
    if b and b["severity"] == "WARN" and not (a and a["severity"] == "WARN"):
        return "unchecked on nginx"
    return "worse" if ra > rb else "better" if ra < rb else "same"


def cell(v, width=60):
    if not v:
        return "—"
    text = v["finding"] if len(v["finding"]) <= width else v["finding"][:width - 1] + "…"
    return f"{text.replace('|', '/')} ({v['severity']})"


def suites(names, only_here, only_ringx):
    """A count of suites, and what those ringx lacks are (by kind), for the table."""
    kinds = []
    for k, test in (("CBC", lambda n: "_CBC_" in n), ("CCM", lambda n: "_CCM" in n),
                    ("ARIA", lambda n: "ARIA" in n), ("Camellia", lambda n: "CAMELLIA" in n),
                    ("RSA key exchange", lambda n: n.startswith("TLS_RSA_"))):
        if any(test(n) for n in only_here):
            kinds.append(k)
    out = f"{len(names)}"
    if only_here:
        out += f"; {len(only_here)} ringx does not offer" + (f" ({', '.join(kinds)})" if kinds else "")
    if only_ringx:
        out += f"; lacks {len(only_ringx)} ringx offers"
    return out


def report(result):
    """The TLS scan section of bench/README.md, between its markers."""
    m, v = result["machine"], result["versions"]
    bases = result["baselines"]
    heads = {"nginx": "nginx, compiled-in defaults", "nginx-debian": "nginx, Debian's nginx.conf"}
    lines = [f"### Latest run: `{result['date']}` ({result['mode']}, {result['elapsed_s']} s in all)", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, kernel {m['kernel']}. Versions: "
             f"{v['ringx']}; {v['nginx']}; {v['openssl']}; {v['testssl']}. Load average before "
             f"{result['load_avg_before'][0]:.2f}, after {result['load_avg_after'][0]:.2f}. Network "
             f"namespace of its own: {'yes' if result['netns'] else 'no'}. testssl took "
             + ", ".join(f"{s} s on {p}" for p, s in result["seconds"].items()) +
             f". Raw data: `bench/results/{result['name']}.json` (every finding of each, and the "
             "configurations).", "",
             "Severity in brackets (testssl's: OK, INFO, LOW, MEDIUM, HIGH, CRITICAL; WARN: the "
             "check could not run); each verdict is ringx's against that nginx's (OK and INFO "
             "count alike). Cipher suites: how many each offers (the lists below the table).", "",
             "| group | check | ringx | " + " | ".join(f"{heads.get(b, b)} | ringx vs it" for b in bases) + " |",
             "|---|---|---|" + "---|---|" * len(bases)]
    for r in result["rows"]:
        if r["group"] == "cipher suites":
            cells = [str(len(r["ringx"]))]
            for b in bases:
                cells += [suites(r["nginx"][b], r["only_nginx"][b], r["only_ringx"][b]),
                          r["verdict"][b]]
        else:
            cells = [cell(r["ringx"])]
            for b in bases:
                cells += [cell(r["nginx"][b]), r["verdict"][b]]
        lines.append(f"| {r['group']} | {r['label']} | " + " | ".join(cells) + " |")
    lines.append("")
    for b in bases:
        reg, unc = result["regressions"][b], result["unchecked"][b]
        gate = " (the exit status's baseline)" if b == result["gate"] else ""
        lines.append(f"- Against {heads.get(b, b)}{gate}: **regressions** (ringx worse): " +
                     (", ".join(f"`{x['id']}` ({x['ringx']['severity']} against "
                                f"{x['nginx']['severity'] if x['nginx'] else 'none'})" for x in reg)
                      if reg else "none") +
                     "; **unchecked** on ringx: " + (", ".join(f"`{x['id']}`" for x in unc) if unc else "none") + ".")
    lines += ["", "<details><summary>Cipher suites offered (IANA names)</summary>", ""]
    for r in [r for r in result["rows"] if r["group"] == "cipher suites"]:
        lines.append(f"- {r['label']}, ringx: {' '.join(r['ringx']) or 'none'}")
        for b in bases:
            lines.append(f"- {r['label']}, {heads.get(b, b)}: {' '.join(r['nginx'][b]) or 'none'}")
    lines += ["", "</details>", "",
              f"Command (per server; `PORT` its port, `WORK` the run's directory): `{result['command']}`; "
              f"the run: `bench/testssl.py{' --quick' if result['mode'] == 'quick' else ''}`."]
    readme = os.path.join(lib.BENCH, "README.md")
    txt = open(readme).read()
    begin, end = "<!-- testssl:begin -->", "<!-- testssl:end -->"
    block = begin + "\n" + "\n".join(lines) + "\n" + end
    if begin in txt:
        txt = txt[:txt.index(begin)] + block + txt[txt.index(end) + len(end):]
    else:
        txt = txt.rstrip() + "\n\n## TLS scan (issue #35, `bench/testssl.py`, `make bench-testssl`)\n\n" + \
            block + "\n"
    open(readme, "w").write(txt)
    print("bench/testssl: updated bench/README.md", flush=True)


def summary(result):
    bases = result["baselines"]
    print(f"  {'group':<28} {'check':<30} {'ringx':<9}" + "".join(f"{b:<24}" for b in bases))
    for r in result["rows"]:
        if r["group"] == "cipher suites":
            a = str(len(r["ringx"]))
            bs = [f"{len(r['nginx'][b])} {r['verdict'][b]}" for b in bases]
        else:
            a = r["ringx"]["severity"] if r["ringx"] else "—"
            bs = [f"{r['nginx'][b]['severity'] if r['nginx'][b] else '—'} {r['verdict'][b]}" for b in bases]
        print(f"  {r['group'][:28]:<28} {r['label'][:30]:<30} {a:<9}" + "".join(f"{x:<24}" for x in bs))
    for b in bases:
        for name in ("regressions", "unchecked"):
            items = result[name][b]
            print(f"bench/testssl: {name} against {b}: " + ("none" if not items else ""))
            for x in items:
                print(f"  {x['id']}: ringx {cell(x['ringx'], 200)}; {b} {cell(x['nginx'], 200)}"
                      + (f" ({x['why']})" if x.get("why") else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only -p -s -f -U")
    ap.add_argument("--baselines", default="nginx,nginx-debian",
                    help="the nginx configurations to scan: nginx (compiled-in TLS defaults), "
                         "nginx-debian (Debian's nginx.conf); the first decides the exit status")
    ap.add_argument("--no-netns", action="store_true", help="run in the machine's network namespace")
    ap.add_argument("--no-report", action="store_true", help="do not rewrite bench/README.md")
    ap.add_argument("--report-only", metavar="JSON", help="rewrite the README from a result")
    args = ap.parse_args()
    if args.report_only:
        result = json.load(open(args.report_only))
        report(result)
        summary(result)
        return
    bases = args.baselines.split(",")
    if not bases or any(b not in BASELINES for b in bases):
        ap.error(f"--baselines: known ones are {', '.join(BASELINES)}")
    binary = testssl_bin()
    if not binary:
        sys.exit("bench/testssl: testssl.sh is not installed (apt-get install testssl.sh; "
                 "scripts/install-deps.sh installs it)")
    netns = enter_netns(args.no_netns)
    t0, load0 = time.time(), os.getloadavg()
    work = tempfile.mkdtemp(prefix="ringx-bench-testssl-")
    certs = make_certs(work)
    www = site(work)
    checks = QUICK_CHECKS if args.quick else CHECKS
    per, configs, cmd = {}, {}, None
    for peer in ["ringx", *bases]:
        srv = Server(peer, work, certs, www)
        configs[peer] = srv.start()
        try:
            t = time.time()
            out = os.path.join(work, f"{peer}.json")
            c, text = run_testssl(binary, srv.port, certs["ca"], checks, out)
            cmd = " ".join(lib.shown(x) for x in c).replace(work, "WORK") \
                .replace(f":{srv.port}", ":PORT").replace(f"/{peer}.json", "/SERVER.json")
            raw = json.load(open(out))
            per[peer] = {"seconds": round(time.time() - t, 1), "raw": raw, "text": text}
            print(f"bench/testssl: {peer}: {len(raw)} findings in {per[peer]['seconds']} s", flush=True)
        finally:
            srv.stop()
    f = {p: findings(per[p]["raw"]) for p in per}
    rows, regressions, unchecked = compare(f["ringx"], {b: f[b] for b in bases})
    date = datetime.date.today().isoformat()
    name = f"testssl-{date}" + ("-quick" if args.quick else "")
    result = {"date": date, "name": name, "mode": "quick" if args.quick else "full",
              "baselines": bases, "gate": bases[0], "elapsed_s": round(time.time() - t0),
              "machine": lib.machine(), "load_avg_before": load0, "load_avg_after": os.getloadavg(),
              "versions": {"ringx": lib.sh([lib.RINGX, "--version"]).stdout.strip(),
                           "nginx": lib.sh([lib.nginx_bin(), "-v"]).stderr.strip(),
                           "openssl": lib.sh(["openssl", "version"]).stdout.strip(),
                           "testssl": testssl_version(binary)},
              "netns": netns, "checks": checks, "command": cmd,
              "configs": {p: c.replace(work, "WORK") for p, c in configs.items()},
              "seconds": {p: per[p]["seconds"] for p in per},
              "rows": rows, "regressions": regressions, "unchecked": unchecked,
              "findings": f,
              "raw": {p: [x for x in per[p]["raw"] if not x["id"].startswith("cert ")] for p in per}}
    os.makedirs(lib.RESULTS, exist_ok=True)
    path = os.path.join(lib.RESULTS, f"{name}.json")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"bench/testssl: wrote bench/results/{name}.json", flush=True)
    if not args.no_report and not args.quick:
        report(result)
    shutil.rmtree(work, ignore_errors=True)
    summary(result)
    sys.exit(1 if regressions[bases[0]] or unchecked[bases[0]] else 0)


if __name__ == "__main__":
    main()
