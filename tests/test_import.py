"""`ringx import` (issue 40) on real nginx configurations (tests/nginx_configs/, README there
says where each comes from): each imports with a report and passes `ringx check`; nginx and
ringx then serve the same configuration (nginx's own file, ringx's translation) on the same
ports, document root and upstream, one after the other, and answer a list of requests alike.

The committed files stay as they came: each test copies them into a temp dir and rewrites
what belongs to the machine (listen ports, paths, the upstream's address, CPUs, users)."""

from __future__ import annotations

import base64
import http.client
import json
import re
import ssl
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import httpx

from import_site import (CONFIGS, COUNTS, HTTP_UPSTREAMS, ResetTrace, Site, counters_moved,
                         handshake, read_or_empty, run_import, stop, tcp_counters, tls_client)
from origin_server import Origin
from tls_pki import Pki

ALL = ["debian/nginx.conf", "nginx_org/load_balancing.conf", "nginx_org/stream.conf",
       "nginx_org/ssl_preread.conf", "nginx_org/auth_limit.conf", "fstack/nginx.conf",
       "fstack/stream_sni.conf", "gunicorn/nginx.conf", "grafana/grafana.conf",
       "mozilla/intermediate.conf"]


def test_every_configuration_is_served_side_by_side():
    """Each configuration under tests/nginx_configs/ is imported here and has its
    differential test: CASES below, the HTTPS one, or test_import_stream.py's."""
    import test_import_stream

    assert {str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.conf")} == set(ALL)
    side = set(CASES) | {"mozilla/intermediate.conf"} | set(test_import_stream.SIDE_BY_SIDE)
    assert side == set(ALL), set(ALL) - side


@pytest.mark.parametrize("name", ALL)
def test_every_configuration_imports_with_a_report(ringx_bin, name):
    """As committed (paths and hosts of other machines): never a crash, a report with counts."""
    p = run_import(ringx_bin, CONFIGS / name)
    assert "panicked" not in p.stderr, p.stderr
    m = COUNTS.search(p.stderr)
    assert m, p.stderr
    # Every note names its FILE:LINE.
    for line in p.stderr.splitlines():
        if line.startswith("ringx:") or COUNTS.match(line):
            continue
        assert re.match(r"^\S+:\d+: (approximated|refused|irrelevant) \S+: .+", line), line
    assert sum(map(int, m.groups())) > 0


def test_strict_refuses_what_is_not_exact(ringx_bin, tmp_path):
    out = tmp_path / "o.toml"
    p = run_import(ringx_bin, CONFIGS / "debian/nginx.conf", "--strict", "-o", str(out))
    assert p.returncode == 1 and "--strict" in p.stderr and not out.exists(), p.stderr


@pytest.mark.parametrize("text,line,what", [
    ("http {\n server {\n  listen 80;\n", 4, "expecting \"}\""),
    ("http {\n}\n}\n", 3, "unexpected \"}\""),
    ("events {}\n\x7fELF\x00\x01\x02;\n", 2, "binary data"),
    ("include loop.conf;\n", 1, "include loop"),
])
def test_hostile_input_is_an_error_at_its_line(ringx_bin, tmp_path, text, line, what):
    conf = tmp_path / "loop.conf"
    conf.write_bytes(text.encode("latin-1"))
    p = run_import(ringx_bin, conf)
    assert p.returncode == 1 and "panicked" not in p.stderr, p.stderr
    assert f"{conf}:{line}: " in p.stderr and what in p.stderr, p.stderr


def test_a_100_mb_file_is_refused_at_its_include(ringx_bin, tmp_path):
    with open(tmp_path / "big.conf", "wb") as f:
        f.truncate(100 << 20)
    (tmp_path / "nginx.conf").write_text("events {}\ninclude big.conf;\n")
    p = run_import(ringx_bin, tmp_path / "nginx.conf")
    assert p.returncode == 1 and f"{tmp_path}/nginx.conf:2: " in p.stderr, p.stderr
    assert "over the limit" in p.stderr


HEADERS = ("location", "content-type", "content-length", "cache-control", "vary",
           "www-authenticate", "allow", "content-range", "strict-transport-security")


def ask(port: int, method: str, path: str, headers: dict, body: bytes | None,
        ctx: ssl.SSLContext | None = None):
    c = (http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx) if ctx
         else http.client.HTTPConnection("127.0.0.1", port, timeout=10))
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    got = {k.lower(): v for k, v in r.getheaders() if k.lower() in HEADERS}
    return r.status, data, got


def echo_origin() -> Origin:
    """An upstream that answers what it received: method, target, body length and the
    fields a proxy sets."""
    o = Origin()

    def fn(method, target, headers):
        seen = {k.lower(): v for k, v in headers.items()
                if k.lower() in ("host", "x-real-ip", "x-forwarded-for", "x-forwarded-proto",
                                 "content-length", "x-custom", "authorization", "range")}
        return {"status": 200, "headers": {"Content-Type": "application/json"},
                "body": json.dumps({"method": method, "target": target, "seen": seen},
                                   sort_keys=True).encode()}

    o.route("*", fn=fn)
    return o


REQUESTS = [
    ("GET", "/", {}, None),
    ("HEAD", "/", {}, None),
    ("GET", "/index.html", {}, None),
    ("GET", "/style.css", {"Accept-Encoding": "identity"}, None),
    ("GET", "/index.html", {"Range": "bytes=0-9"}, None),
    ("GET", "/missing.html", {}, None),
    ("GET", "/dir/", {}, None),
    ("GET", "/api/x?a=1&b=2", {"X-Custom": "c"}, None),
    ("POST", "/submit", {"Content-Type": "text/plain"}, b"hello body"),
    ("POST", "/index.html", {"Content-Type": "text/plain"}, b"hello body"),
    ("GET", "/api/live/ws", {}, None),
    ("GET", "/500.html", {}, None),
]

# What ringx answers differently by design, per configuration: a response field it sets
# or leaves out (with why), and fields of what the upstream received. Anything else fails.
KNOWN_FIELDS = {
    # `gzip on` without gzip_vary: ringx sends Vary: Accept-Encoding on every compressible
    # response (the import reports gzip_vary's absence as nginx's choice it does not follow).
    "debian/nginx.conf": {"vary"},
    # nginx types a `return` body by the request's extension (/index.html: text/html);
    # ringx sends one content_type (the import notes the return as approximated).
    "fstack/nginx.conf": {"content-type"},
    # Debian's `gzip on` again (the snippet is served inside Debian's nginx.conf).
    "mozilla/intermediate.conf": {"vary"},
}
# `return 301 URL`: nginx sends its HTML page for the code, ringx an empty body (the import
# reports the return as approximated): status and Location are compared, not the page.
REDIRECT_PAGES = {"mozilla/intermediate.conf"}
# Answers that differ in status, per configuration: (method, path) -> reason.
KNOWN_STATUS = {
    "mozilla/intermediate.conf": {
        # A POST to a static location: ringx refuses the method (405 with Allow) before it
        # looks for the file; nginx looks first, so a missing file is 404 (an existing one 405,
        # as ringx: POST /index.html below).
        ("POST", "/submit"): "ringx checks the method first",
    },
}
KNOWN_UPSTREAM = {
    # $proxy_add_x_forwarded_for becomes forwarded_headers = true, which also sends
    # X-Real-IP (reported as approximated at the proxy_set_header's line).
    "gunicorn/nginx.conf": {"x-real-ip"},
}
# Where ringx's own answers (not the import) differ from nginx's, for every configuration:
# (what, nginx's text, ringx's). ringx's 401 page has RFC 9110's reason phrase; nginx's the
# pre-RFC 2616 "Authorization Required". ringx's challenge names the charset it decodes
# credentials with (RFC 7617 section 2.1); nginx's does not, and decodes them as bytes.
# Its 405 page has RFC 9110's phrase and the Allow field RFC 9110 section 15.5.6 requires;
# nginx's has "405 Not Allowed" and no Allow.
KNOWN_TEXT = [
    ("body", b"401 Authorization Required", b"401 Unauthorized"),
    ("body", b"405 Not Allowed", b"405 Method Not Allowed"),
    ("www-authenticate", ', charset="UTF-8"', ""),
]
SIGNATURE = re.compile(rb"<hr><center>(nginx|ringx)(/[0-9.]+)?</center>")


def normalise(name: str, method: str, answer):
    """An answer as compared: the error pages' server signature (nginx/1.22.1, ringx/0.1.0)
    made alike, the known fields and upstream fields left out; Content-Length is checked
    against the body it frames instead of compared when the bodies differed only there."""
    status, body, fields = answer
    fields = {k: v for k, v in fields.items() if k not in KNOWN_FIELDS.get(name, ())}
    if status == 405:
        fields.pop("allow", None)
    if name in REDIRECT_PAGES and 300 <= status < 400 and "location" in fields:
        body = b""
        for k in ("content-type", "content-length"):
            fields.pop(k, None)
    if method != "HEAD" and "content-length" in fields:
        assert int(fields["content-length"]) == len(body), (fields, body[:80])
    norm = SIGNATURE.sub(b"<hr><center>SERVER</center>", body)
    for what, nginx_text, ringx_text in KNOWN_TEXT:
        if what == "body":
            norm = norm.replace(nginx_text, ringx_text)
        elif what in fields:
            fields[what] = fields[what].replace(nginx_text, ringx_text)
    if fields.get("content-type") == "application/json" and body:
        j = json.loads(body)
        for k in KNOWN_UPSTREAM.get(name, ()):
            j["seen"].pop(k, None)
        norm = json.dumps(j, sort_keys=True).encode()
    # A HEAD's error page is not there to compare: its length differs as the GET's body does.
    if norm != body or KNOWN_UPSTREAM.get(name) or (method == "HEAD" and status >= 400):
        fields.pop("content-length", None)
    return status, norm, fields


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


# The password file nginx.org's auth_basic example names: conf/htpasswd, which nginx reads
# relative to the directory of its configuration file (conf/conf/htpasswd here). An apr1
# (Apache MD5) hash, which both servers verify.
HTPASSWD = "alice:$apr1$ringx$d.NJJqaXHb1maD5kIludN0\n"
AUTH_REQUESTS = [
    ("GET", "/", basic("alice", "secret"), None),
    ("GET", "/index.html", basic("alice", "wrong"), None),
    ("GET", "/style.css", basic("bob", "secret"), None),
    ("HEAD", "/dir/", basic("alice", "secret"), None),
]

CASES = {
    "debian/nginx.conf": {"host": "localhost"},
    "nginx_org/load_balancing.conf": {"host": "localhost"},
    "fstack/nginx.conf": {"host": "localhost"},
    "gunicorn/nginx.conf": {"host": "example.com"},
    "grafana/grafana.conf": {"host": "localhost"},
    "nginx_org/auth_limit.conf": {"host": "localhost", "extra": AUTH_REQUESTS,
                                  "burst": "/search/"},
}


def burst(port: int, host: str, path: str, n: int = 10) -> list[int]:
    """`n` requests sent at once, each on its own connection: the statuses, sorted."""
    gate = threading.Barrier(n)

    def one(_):
        gate.wait()
        return ask(port, "GET", path, {"Host": host}, None)[0]

    with ThreadPoolExecutor(n) as pool:
        return sorted(pool.map(one, range(n)))


def diff_lines(name: str, requests, nginx, ringx) -> list[str]:
    out = []
    for (m, p, h, b), a, z in zip(requests, nginx, ringx):
        if (m, p) in KNOWN_STATUS.get(name, {}):
            # Still known: both refuse it, differently.
            assert a[0] != z[0] and a[0] >= 400 and z[0] >= 400, (m, p, a[0], z[0])
            continue
        if normalise(name, m, a) != normalise(name, m, z):
            out.append(f"{m} {p}: nginx {a[0]} {a[2]} {a[1][:120]!r}\n"
                       f"{' ' * (len(m) + len(p) + 2)}ringx {z[0]} {z[2]} {z[1][:120]!r}")
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_nginx_and_ringx_answer_alike(ringx_bin, tmp_path, name):
    origin = echo_origin()
    try:
        site = Site(tmp_path, name, {h: origin.addr for h in HTTP_UPSTREAMS})
        case = CASES[name]
        if "extra" in case:
            (tmp_path / "conf" / "conf").mkdir()
            (tmp_path / "conf" / "conf" / "htpasswd").write_text(HTPASSWD)
        requests = REQUESTS + case.get("extra", [])
        answers, bursts, moved, first = {}, {}, {}, {}
        with ResetTrace(origin.port) as trace:
            for who in ("nginx", "ringx"):
                before, first[who] = tcp_counters(), origin.accepted()
                proc = site.serve(who, ringx_bin)
                try:
                    port = next(iter(site.ports.values()))
                    answers[who] = [ask(port, m, p, {"Host": case["host"], **h}, b)
                                    for m, p, h, b in requests]
                    if "burst" in case:
                        bursts[who] = burst(port, case["host"], case["burst"])
                finally:
                    stop(proc)
                    moved[who] = counters_moved(before, tcp_counters())
        diffs = diff_lines(name, requests, answers["nginx"], answers["ringx"])
        # ringx's log says why an answer differs (an upstream fault behind a 502, say).
        assert not diffs, "\n".join(diffs) + "\nringx's log:\n" + read_or_empty(
            tmp_path / "ringx.stderr")[-4000:] + "\nthe error_log (nginx's, then ringx's):\n" + (
            read_or_empty(tmp_path / "logs" / "error.log")[-4000:]) + (
            "\nwhat the upstream received, in order (nginx's, then ringx's):\n"
            + "\n".join(f"{m} {t}" for m, t, _ in origin.requests())) + (
            "\nthe connections it accepted, by the client's port: nginx's\n"
            + origin.connections(first["nginx"], first["ringx"]) + "\nringx's\n"
            + origin.connections(first["ringx"])) + (
            "\nthe kernel's TCP counters (the whole namespace's) that moved while each served:\n"
            + "\n".join(f"{who}: {m}" for who, m in moved.items())) + (
            f"\nthe kernel's resets and state changes on the upstream's port {origin.port}:\n"
            + ("\n".join(trace.lines[-250:]) or "(no trace: tracefs not writable here)"))
        assert bursts.get("nginx") == bursts.get("ringx"), bursts
        if "burst" in case:
            # A burst over the limit: some served (the first and the burst's queue), the
            # rest refused, so the comparison above is not between two all-200 lists.
            assert 200 in bursts["nginx"] and 503 in bursts["nginx"], bursts
    finally:
        origin.close()


def ask_h2(client: httpx.Client, port: int, method: str, path: str, headers: dict,
           body: bytes | None):
    r = client.request(method, f"https://127.0.0.1:{port}{path}", headers=headers, content=body)
    assert r.http_version == "HTTP/2", r.http_version
    return r.status_code, r.content, {k: v for k, v in r.headers.items() if k in HEADERS}


# (what the client offers, what it is called): Mozilla's intermediate profile at a coarse
# level. DHE-RSA suites are in its ssl_ciphers (with ssl_dhparam) and nginx accepts them;
# ringx has no DHE key exchange (the import reports ssl_ciphers as approximated).
TLS_OFFERS = [("TLSv1_1", None), ("TLSv1_2", "ECDHE-RSA-AES128-GCM-SHA256"),
              ("TLSv1_2", "ECDHE-RSA-CHACHA20-POLY1305"), ("TLSv1_2", "AES128-SHA"),
              ("TLSv1_2", "DHE-RSA-AES128-GCM-SHA256"), ("TLSv1_3", None)]
KNOWN_TLS = {("TLSv1_2", "DHE-RSA-AES128-GCM-SHA256")}


def test_mozilla_https_http2_and_tls_versions_alike(ringx_bin, tmp_path):
    """Mozilla's intermediate TLS server (in Debian's nginx.conf): the port-80 redirect, the
    requests over HTTPS with HTTP/1.1 and with HTTP/2 (`listen 443 ssl http2`), and which
    TLS versions and cipher suites each server accepts."""
    name = "mozilla/intermediate.conf"
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("site", ["localhost"], kind="rsa")
    dh = tmp_path / "pki" / "dhparam.pem"
    subprocess.run(["openssl", "dhparam", "-dsaparam", "-out", str(dh), "2048"], check=True,
                   capture_output=True)
    site = Site(tmp_path, name, {"/path/to/signed_cert_plus_intermediates": str(cert),
                                 "/path/to/private_key": str(key), "/path/to/dhparam": str(dh),
                                 "/path/to/root_CA_cert_plus_intermediates": str(pki.ca_path)})
    http_port, https_port = site.ports["80"], site.ports["443"]
    ctx = tls_client(pki.ca_path)
    h = {"Host": "localhost"}
    redirects = [("GET", "/x/y?z=1", {}, None), ("HEAD", "/", {}, None)]
    got = {}
    for who in ("nginx", "ringx"):
        proc = site.serve(who, ringx_bin)
        try:
            r = got[who] = {}
            r["http"] = [ask(http_port, m, p, {**h, **x}, b) for m, p, x, b in redirects]
            try:
                r["https"] = [ask(https_port, m, p, {**h, **x}, b, ctx) for m, p, x, b in REQUESTS]
            except OSError as e:
                logs = [site.tmp / f"{who}.stderr", site.tmp / "logs" / "error.log"]
                raise AssertionError(f"{who} over HTTPS: {e!r}\n"
                                     + "".join(q.read_text()[-3000:] for q in logs
                                               if q.exists())) from e
            # httpx sets its ALPN list on the context it is given: one of its own.
            with httpx.Client(http2=True, verify=tls_client(pki.ca_path), timeout=10) as c:
                # Bodies as sent (httpx would ask for gzip and hand back the body inflated).
                del c.headers["accept-encoding"]
                r["h2"] = [ask_h2(c, https_port, m, p, {**h, **x}, b) for m, p, x, b in REQUESTS]
            r["tls"] = {o: handshake(https_port, tls_client(pki.ca_path, ssl.TLSVersion[o[0]], o[1]),
                                     "localhost", None) for o in TLS_OFFERS}
        finally:
            stop(proc)
    n, z = got["nginx"], got["ringx"]
    assert n["http"][0][0] == 301 and n["https"][0][0] == 200, n
    assert n["https"][0][2]["strict-transport-security"] == "max-age=63072000", n
    diffs = (diff_lines(name, redirects, n["http"], z["http"])
             + diff_lines(name, REQUESTS, n["https"], z["https"])
             + diff_lines(name, REQUESTS, n["h2"], z["h2"]))
    assert not diffs, "\n".join(diffs)
    coarse = {o: t if t == "refused" else t[:2] for o, t in n["tls"].items()}
    assert coarse[("TLSv1_1", None)] == "refused", coarse
    assert coarse[("TLSv1_2", "AES128-SHA")] == "refused", coarse
    assert coarse[("TLSv1_3", None)][0] == "TLSv1.3", coarse
    tls_diffs = {o: (n["tls"][o], z["tls"][o]) for o in n["tls"]
                 if o not in KNOWN_TLS and n["tls"][o] != z["tls"][o]}
    assert not tls_diffs, tls_diffs
    for o in KNOWN_TLS:
        assert n["tls"][o] != "refused" and z["tls"][o] == "refused", (o, n["tls"][o], z["tls"][o])
