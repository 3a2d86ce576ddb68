"""`add_header` on the answers a location's guard and its proxy cache make, against nginx:
`always` lines on the refusals of `deny` (403), `auth_basic` (401), `auth_request` (403),
`limit_req` (429) and `limit_conn` (503), plain ones not; an `error_page` serving the refusal takes the page's
location's headers, not the refusing one's; both kinds on answers from the proxy cache (HIT,
a 304 to the client's validator, a cached 404 with `always` lines only, REVALIDATED, STALE).
nginx's headers filter runs on every response of the location, its own errors and cached
answers included. Each answer is compared over HTTP/1.1 (http.client) and over h2c (curl
--http2-prior-knowledge against ringx and against nginx's h2c listener).

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_headers_added.py
"""

from __future__ import annotations

import http.client
import shutil
import subprocess
import threading
import time

import pytest

from conftest import free_port, runtime_section
from nginx_peer import NginxPeer
from origin_server import Origin

ADDED = ("X-Plain", "X-Always", "X-Page", "X-Cache-Status")
USERS = "a:$apr1$saltsalt$LrttParrLPdxvgutaSXWJ0\n"
PROTOS = ["h1", "h2"]


def has_h2_curl() -> bool:
    curl = shutil.which("curl")
    if not curl:
        return False
    out = subprocess.run([curl, "-V"], capture_output=True, text=True, timeout=10).stdout
    return "HTTP2" in out


def h1(port, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path, headers={"Host": "localhost", **(headers or {})})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, {k: r.getheader(k) for k in ADDED}


def h2(port, path, headers=None):
    args = ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", "/dev/null",
            "--max-time", "10", "-H", "Host: localhost"]
    for k, v in (headers or {}).items():
        args += ["-H", f"{k}: {v}"]
    r = subprocess.run(args + [f"http://127.0.0.1:{port}{path}"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("HTTP/2 "), r.stdout
    fields = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        fields.setdefault(k.strip().lower(), v.strip())
    return int(lines[0].split()[1]), {k: fields.get(k.lower()) for k in ADDED}


def ask(proto, ports, path, headers=None):
    """(status, the added fields) of `path` from the server on `ports` (HTTP/1.1, h2c)."""
    return h1(ports[0], path, headers) if proto == "h1" else h2(ports[1], path, headers)


HEADERS_R = '{ "X-Plain" = "p", "X-Always" = { value = "a", always = true } }'
HEADERS_N = 'add_header X-Plain "p"; add_header X-Always "a" always;'
CACHE_R = 'proxy_cache = { zone = "c", use_stale = ["error", "timeout", "http_500"] }'
CACHE_N = ("proxy_cache c; proxy_cache_revalidate on; proxy_cache_use_stale error timeout "
           "http_500; add_header X-Cache-Status $upstream_cache_status always;")


def ringx_site(port, h2port, origin, d):
    def loc(path, extra, headers=HEADERS_R):
        return (f'  [[server.location]]\n  path = "{path}"\n  proxy_pass = "http://{origin.addr}"\n'
                f"  add_header = {headers}\n  {extra}\n")

    return (runtime_section(None, 1) + f"""
[[limit_req_zone]]
name = "rq"
key = "$remote_addr"
rate = "1r/m"
[[limit_conn_zone]]
name = "cn"
key = "$remote_addr"
[[proxy_cache_path]]
name = "c"
path = "{d}/cache"
[[server]]
listen = ["127.0.0.1:{port}", "127.0.0.1:{h2port}"]
server_name = ["localhost"]
""" + loc("/deny/", 'access = ["deny all"]')
        + loc("/auth/", f'auth_basic = {{ realm = "r", user_file = "{d}/users" }}')
        + loc("/rate/", 'limit_req = { zone = "rq", nodelay = true, status = 429 }')
        + loc("/conn/", 'limit_conn = { zone = "cn", max = 1 }')
        + loc("/areq/", f'auth_request = {{ proxy_pass = "http://{origin.addr}", uri = "/no" }}')
        + loc("/denyep/", 'access = ["deny all"]\n  error_page = { "403" = "/denied.html" }')
        + f'  [[server.location]]\n  path = "= /denied.html"\n  root = "{d}/www"\n'
          '  add_header = { "X-Page" = { value = "page", always = true } }\n'
        + loc("/c/", CACHE_R))


def nginx_site(port, h2port, origin, d):
    def loc(path, extra, headers=HEADERS_N):
        return f"  location {path} {{ proxy_pass http://{origin.addr}; {headers} {extra} }}\n"

    return (f"""
limit_req_zone $binary_remote_addr zone=rq:1m rate=1r/m;
limit_conn_zone $binary_remote_addr zone=cn:1m;
proxy_cache_path {d}/ncache keys_zone=c:1m;
server {{
  listen 127.0.0.1:{port};
  listen 127.0.0.1:{h2port} http2;
  server_name localhost;
""" + loc("/deny/", "deny all;")
        + loc("/auth/", f'auth_basic "r"; auth_basic_user_file {d}/users;')
        + loc("/rate/", "limit_req zone=rq nodelay; limit_req_status 429;")
        + loc("/conn/", "limit_conn cn 1;")
        + loc("/areq/", "auth_request /no;")
        + f"  location = /no {{ internal; proxy_pass http://{origin.addr}; }}\n"
        + loc("/denyep/", "deny all; error_page 403 /denied.html;")
        + f'  location = /denied.html {{ root {d}/www; add_header X-Page "page" always; }}\n'
        + loc("/c/", CACHE_N) + "}\n")


@pytest.fixture(scope="module")
def origin():
    o = Origin()
    o.route("*", body=b"origin\n")
    o.route("/no", status=403, body=b"no\n")  # the auth_request service's answer
    yield o
    o.close()


@pytest.fixture(scope="module")
def pair(ringx_module, origin, tmp_path_factory):
    """ringx and nginx serving the same site: ((ringx HTTP/1.1 port, h2c port), (nginx's))."""
    if not has_h2_curl():
        pytest.skip("curl with HTTP/2 is not installed (the h2c client of these tests)")
    d = tmp_path_factory.mktemp("site")
    (d / "users").write_text(USERS)
    (d / "www").mkdir()
    (d / "www" / "denied.html").write_text("denied page\n")
    rp, nports = (free_port(), free_port()), (free_port(), free_port())
    ringx_module.make(ringx_site(*rp, origin, d), name="added")
    n = NginxPeer(d / "nginx", nginx_site(*nports, origin, d), nports[0])
    yield rp, nports
    n.stop()


def both(pair, proto, path, headers=None):
    rp, nports = pair
    return ask(proto, rp, path, headers), ask(proto, nports, path, headers)


@pytest.mark.parametrize("proto", PROTOS)
@pytest.mark.parametrize("path,status", [("/deny/x", 403), ("/auth/x", 401),
                                         ("/areq/x", 403), ("/denyep/x", 403)])
def test_a_refusal_gets_the_always_lines_as_in_nginx(pair, proto, path, status):
    ours, theirs = both(pair, proto, path)
    assert theirs[0] == status, theirs
    assert ours == theirs


@pytest.mark.parametrize("proto", PROTOS)
def test_limit_req_refusal_gets_the_always_lines_as_in_nginx(pair, proto):
    """1r/m: the first request of each server passes (the zone is shared by both protocols),
    a later one is refused."""
    rp, nports = pair
    got = []
    for ports in (rp, nports):
        answers = [ask(proto, ports, "/rate/x") for _ in range(3)]
        refused = [a for a in answers if a[0] != 200]
        assert refused, answers
        got.append(refused[0])
    assert got[1][0] == 429, got
    assert got[0] == got[1]


@pytest.mark.parametrize("proto", PROTOS)
def test_limit_conn_refusal_gets_the_always_lines_as_in_nginx(pair, origin, proto):
    """A request held at the origin takes the one slot; the next is refused with 503."""
    rp, nports = pair
    got = []
    for i, ports in enumerate((rp, nports)):
        hold = f"/conn/hold-{proto}-{i}"
        release = threading.Event()
        origin.route(hold, fn=lambda *_: (release.wait(20), {})[1])
        t = threading.Thread(target=h1, args=(ports[0], hold))
        t.start()
        try:
            deadline = time.monotonic() + 10
            while origin.count(hold) == 0:
                assert time.monotonic() < deadline, "the held request never reached the origin"
                time.sleep(0.01)
            got.append(ask(proto, ports, "/conn/x"))
        finally:
            release.set()
            t.join(20)
    assert got[1][0] == 503, got
    assert got[0] == got[1]


def until(fn, want, timeout=10):
    """Asks `fn` until its answer's X-Cache-Status is `want` (the entry expires meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        a = fn()
        if a[1]["X-Cache-Status"] == want or time.monotonic() > deadline:
            return a
        time.sleep(0.05)


@pytest.mark.parametrize("proto", PROTOS)
def test_cache_answers_get_the_added_lines_as_in_nginx(pair, origin, proto):
    rp, nports = pair
    p = f"/c/{proto}"
    etag = '"v1"'

    def revalidate(method, target, headers):
        if headers.get("If-None-Match") == etag:
            return {"status": 304, "body": b""}
        return {}

    origin.route(f"{p}/hit", body=b"hit\n", headers={"Cache-Control": "max-age=60", "ETag": etag})
    origin.route(f"{p}/nf", status=404, body=b"nf\n", headers={"Cache-Control": "max-age=60"})
    origin.route(f"{p}/reval", body=b"r\n", headers={"Cache-Control": "max-age=1", "ETag": etag},
                 fn=revalidate)
    origin.route(f"{p}/stale", body=b"s\n", headers={"Cache-Control": "max-age=1"})
    diffs = []

    def compare(what, ours, theirs, status, cache):
        assert theirs[0] == status and theirs[1]["X-Cache-Status"] == cache, (what, theirs)
        if ours != theirs:
            diffs.append(f"{what}:\n  ringx {ours}\n  nginx {theirs}")

    for what, path, hdrs, status, cache in [
        ("miss", "hit", None, 200, "MISS"), ("hit", "hit", None, 200, "HIT"),
        ("304", "hit", {"If-None-Match": etag}, 304, "HIT"),
        ("404 miss", "nf", None, 404, "MISS"), ("404 hit", "nf", None, 404, "HIT"),
        ("reval miss", "reval", None, 200, "MISS"), ("stale miss", "stale", None, 200, "MISS"),
    ]:
        ours, theirs = both(pair, proto, f"{p}/{path}", hdrs)
        compare(what, ours, theirs, status, cache)
    origin.route(f"{p}/stale", status=500, body=b"broken\n")
    for what, path, status, cache in [("revalidated", "reval", 200, "REVALIDATED"),
                                      ("stale", "stale", 200, "STALE")]:
        ours = until(lambda: ask(proto, rp, f"{p}/{path}"), cache)
        theirs = until(lambda: ask(proto, nports, f"{p}/{path}"), cache)
        compare(what, ours, theirs, status, cache)
    assert not diffs, "\n".join(diffs)
