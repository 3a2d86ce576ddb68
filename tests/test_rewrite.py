"""Rewriting, against nginx: location order (exact, longest prefix, ^~, regexes in order,
named), rewrite flags and arguments, return with variables, add_header (always or not,
inherited from the server), error_page (a file, a location, =CODE, a URL, for proxy
failures and intercepted upstream errors), try_files, proxy_pass with a URI part,
proxy_set_header and proxy_hide_header; and what `ringx check` says of a regex bomb."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import time

import pytest

from compress_upstream import Upstream
from conftest import free_port, runtime_section
from nginx_peer import NginxPeer


def get(port, path, headers=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    d = tmp_path_factory.mktemp("www")
    (d / "index.html").write_text("root index\n")
    (d / "errors").mkdir()
    (d / "errors" / "404.html").write_text("custom 404 page\n")
    (d / "errors" / "50x.html").write_text("custom 50x page\n")
    (d / "rw").mkdir()
    (d / "rw" / "broken").mkdir()
    (d / "rw" / "broken" / "x").write_text("rw broken x\n")
    (d / "spa").mkdir()
    (d / "spa" / "index.html").write_text("spa shell\n")
    (d / "spa" / "app.js").write_text("spa js\n")
    (d / "spa" / "docs").mkdir()
    (d / "spa" / "docs" / "index.html").write_text("spa docs index\n")
    (d / "tf404").mkdir()
    (d / "tf404" / "here").write_text("tf here\n")
    (d / "tfnamed").mkdir()
    return d


@pytest.fixture(scope="module")
def upstream():
    u = Upstream()
    yield u
    u.close()


# The same site, written for each server. Bodies name the location that answered.
def ringx_site(port: int, www, up: str) -> str:
    return f"""
[[server]]
listen = ["127.0.0.1:{port}"]
server_name = ["localhost"]
rewrite = ["^/old/(.*)$ /new/$1 permanent", "^/legacy$ /modern last"]
add_header = {{ "X-Srv" = "s" }}
error_page = {{ "404" = "/errors/404.html", "502 504" = "/errors/50x.html" }}
  [[server.location]]
  path = "/"
  root = "{www}"
  [[server.location]]
  path = "= /exact"
  return = {{ status = 200, body = "exact\\n" }}
  [[server.location]]
  path = "/images/"
  return = {{ status = 200, body = "images prefix\\n" }}
  [[server.location]]
  path = "^~ /static/"
  return = {{ status = 200, body = "static stop\\n" }}
  [[server.location]]
  path = "~* \\\\.(png|jpg)$"
  return = {{ status = 200, body = "img regex $1\\n" }}
  [[server.location]]
  path = "~ ^/api/v([0-9]+)/(.*)$"
  return = {{ status = 200, body = "api v$1 $2 args=$args\\n" }}
  [[server.location]]
  path = "/api/v1/long/"
  return = {{ status = 200, body = "long prefix\\n" }}
  [[server.location]]
  path = "/modern"
  return = {{ status = 200, body = "modern $uri args=$args\\n" }}
  [[server.location]]
  path = "/rw/"
  root = "{www}"
  rewrite = [
    "^/rw/last/(.*)$ /target/$1 last",
    "^/rw/break/(.*)$ /rw/broken/$1 break",
    "^/rw/redir/(.*)$ /target/$1 redirect",
    "^/rw/perm/(.*)$ /target/$1? permanent",
    "^/rw/ext/(.*)$ https://example.com/$1",
    "^/rw/args/(.*)$ /target/$1?added=1 last",
    "^/rw/noargs/(.*)$ /target/$1? last",
    "^/rw/chain/(.*)$ /rw/last/$1",
  ]
  [[server.location]]
  path = "/target/"
  return = {{ status = 200, body = "target $uri args=$args\\n" }}
  [[server.location]]
  path = "/spa/"
  root = "{www}"
  try_files = ["$uri", "$uri/", "/spa/index.html"]
  [[server.location]]
  path = "/tf404/"
  root = "{www}"
  try_files = ["$uri", "=404"]
  [[server.location]]
  path = "/tfnamed/"
  root = "{www}"
  try_files = ["$uri", "@fallback"]
  [[server.location]]
  path = "@fallback"
  return = {{ status = 200, body = "fallback $uri\\n" }}
  [[server.location]]
  path = "= /loop"
  rewrite = ["^ /loop last"]
  [[server.location]]
  path = "/vars"
  return = {{ status = 200, body = "host=$host uri=$request_uri scheme=$scheme ra=$remote_addr m=$request_method a=$arg_a ua=$http_user_agent\\n" }}
  [[server.location]]
  path = "= /goto"
  return = {{ status = 302, location = "$scheme://$host/landing$is_args$args" }}
  [[server.location]]
  path = "/hdr/"
  add_header = {{ "X-Loc" = "l", "X-Always" = {{ value = "a", always = true }} }}
  return = {{ status = 200, body = "hdr\\n" }}
  [[server.location]]
  path = "/hdr404/"
  add_header = {{ "X-Loc" = "l", "X-Always" = {{ value = "a", always = true }} }}
  return = {{ status = 404 }}
  [[server.location]]
  path = "/e/"
  error_page = {{ "404" = "=200 /errors/404.html", "403" = "https://example.com/forbidden" }}
  root = "{www}/tfnamed"
  [[server.location]]
  path = "/dead/"
  proxy_pass = "http://127.0.0.1:1"
  [[server.location]]
  path = "/px/"
  proxy_pass = "http://{up}/v2/"
  proxy_set_header = {{ "X-Request-Id" = "$request_id", "User-Agent" = "", "X-Path" = "$uri" }}
  proxy_hide_header = ["X-Powered-By"]
  [[server.location]]
  path = "= /pxexact"
  proxy_pass = "http://{up}/exact-target"
  [[server.location]]
  path = "/pxplain/"
  proxy_pass = "http://{up}"
  [[server.location]]
  path = "/pxrw/"
  rewrite = ["^/pxrw/(.*)$ /changed/$1 break"]
  proxy_pass = "http://{up}/v3/"
  [[server.location]]
  path = "/pxerr/"
  proxy_pass = "http://{up}/"
  proxy_intercept_errors = true
  error_page = {{ "404" = "/errors/404.html", "500" = "=503 /errors/50x.html" }}
  [[server.location]]
  path = "/status/eq/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @upfb" }}
  [[server.location]]
  path = "/status/keep/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "@upfb" }}
  [[server.location]]
  path = "/status/code/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "=203 @upfb" }}
  [[server.location]]
  path = "@upfb"
  proxy_pass = "http://{up}"
  [[server.location]]
  path = "/fbstatic/"
  root = "{www}/tfnamed"
  error_page = {{ "404" = "= /fbup/201?from=static" }}
  [[server.location]]
  path = "/fbret/"
  return = {{ status = 403 }}
  error_page = {{ "403" = "/fbup/200" }}
  [[server.location]]
  path = "/fbup/"
  proxy_pass = "http://{up}/status/"
"""


def nginx_site(port: int, www, up: str) -> str:
    return f"""
server {{
  listen 127.0.0.1:{port};
  server_name localhost;
  rewrite ^/old/(.*)$ /new/$1 permanent;
  rewrite ^/legacy$ /modern last;
  add_header X-Srv "s";
  error_page 404 /errors/404.html;
  error_page 502 504 /errors/50x.html;
  location / {{ root {www}; }}
  location = /exact {{ return 200 "exact\\n"; }}
  location /images/ {{ return 200 "images prefix\\n"; }}
  location ^~ /static/ {{ return 200 "static stop\\n"; }}
  location ~* \\.(png|jpg)$ {{ return 200 "img regex $1\\n"; }}
  location ~ ^/api/v([0-9]+)/(.*)$ {{ return 200 "api v$1 $2 args=$args\\n"; }}
  location /api/v1/long/ {{ return 200 "long prefix\\n"; }}
  location /modern {{ return 200 "modern $uri args=$args\\n"; }}
  location /rw/ {{
    root {www};
    rewrite ^/rw/last/(.*)$ /target/$1 last;
    rewrite ^/rw/break/(.*)$ /rw/broken/$1 break;
    rewrite ^/rw/redir/(.*)$ /target/$1 redirect;
    rewrite ^/rw/perm/(.*)$ /target/$1? permanent;
    rewrite ^/rw/ext/(.*)$ https://example.com/$1;
    rewrite ^/rw/args/(.*)$ /target/$1?added=1 last;
    rewrite ^/rw/noargs/(.*)$ /target/$1? last;
    rewrite ^/rw/chain/(.*)$ /rw/last/$1;
  }}
  location /target/ {{ return 200 "target $uri args=$args\\n"; }}
  location /spa/ {{ root {www}; try_files $uri $uri/ /spa/index.html; }}
  location /tf404/ {{ root {www}; try_files $uri =404; }}
  location /tfnamed/ {{ root {www}; try_files $uri @fallback; }}
  location @fallback {{ return 200 "fallback $uri\\n"; }}
  location = /loop {{ rewrite ^ /loop last; }}
  location /vars {{ return 200 "host=$host uri=$request_uri scheme=$scheme ra=$remote_addr m=$request_method a=$arg_a ua=$http_user_agent\\n"; }}
  location = /goto {{ return 302 $scheme://$host/landing$is_args$args; }}
  location /hdr/ {{ add_header X-Loc "l"; add_header X-Always "a" always; return 200 "hdr\\n"; }}
  location /hdr404/ {{ add_header X-Loc "l"; add_header X-Always "a" always; return 404; }}
  location /e/ {{
    error_page 404 =200 /errors/404.html;
    error_page 403 https://example.com/forbidden;
    root {www}/tfnamed;
  }}
  location /dead/ {{ proxy_pass http://127.0.0.1:1; }}
  location /px/ {{
    proxy_pass http://{up}/v2/;
    proxy_set_header X-Request-Id $request_id;
    proxy_set_header User-Agent "";
    proxy_set_header X-Path $uri;
    proxy_hide_header X-Powered-By;
  }}
  location = /pxexact {{ proxy_pass http://{up}/exact-target; }}
  location /pxplain/ {{ proxy_pass http://{up}; }}
  location /pxrw/ {{ rewrite ^/pxrw/(.*)$ /changed/$1 break; proxy_pass http://{up}/v3/; }}
  location /pxerr/ {{
    proxy_pass http://{up}/;
    proxy_intercept_errors on;
    error_page 404 /errors/404.html;
    error_page 500 =503 /errors/50x.html;
  }}
  location /status/eq/ {{ proxy_pass http://127.0.0.1:1; error_page 502 = @upfb; }}
  location /status/keep/ {{ proxy_pass http://127.0.0.1:1; error_page 502 @upfb; }}
  location /status/code/ {{ proxy_pass http://127.0.0.1:1; error_page 502 =203 @upfb; }}
  location @upfb {{ proxy_pass http://{up}; }}
  location /fbstatic/ {{ root {www}/tfnamed; error_page 404 = /fbup/201?from=static; }}
  location /fbret/ {{ return 403; error_page 403 /fbup/200; }}
  location /fbup/ {{ proxy_pass http://{up}/status/; }}
}}
"""


@pytest.fixture(scope="module")
def pair(ringx_module, engine, www, upstream, tmp_path_factory):
    rport, nport = free_port(), free_port()
    r = ringx_module.make(runtime_section(engine) + ringx_site(rport, www, upstream.addr),
                          engine=engine, name=f"rewrite-{engine}")
    n = NginxPeer(tmp_path_factory.mktemp("nginx"), nginx_site(nport, www, upstream.addr), nport)
    yield r, rport, nport
    n.stop()


def answer(port, path, headers=None, method="GET"):
    """What must match nginx: the status, the body of a 2xx or a custom page, Location, and
    the headers the site adds."""
    r, body = get(port, path, headers, method)
    loc = r.getheader("Location")
    if loc:
        loc = loc.replace(str(port), "PORT")
    ours = r.status < 300 or b"custom" in body or b"target" in body
    return {
        "status": r.status,
        "body": body.decode().replace(str(port), "PORT") if ours else None,
        "location": loc,
        "added": {k: r.getheader(k) for k in ("X-Srv", "X-Loc", "X-Always")},
    }


PATHS = [
    "/", "/exact", "/exact/more", "/images/a.gif", "/images/a.PNG", "/static/a.png",
    "/api/v2/users?x=1", "/api/vx/users", "/api/v1/long/p", "/other.jpg", "/@fallback",
    "/old/a/b?q=1", "/legacy?z=2", "/modern?y=1",
    "/rw/last/a?k=v", "/rw/break/x", "/rw/redir/a?k=v", "/rw/perm/a?k=v", "/rw/ext/a?k=v",
    "/rw/args/a?k=v", "/rw/noargs/a?k=v", "/rw/chain/c", "/rw/none",
    "/spa/app.js", "/spa/docs/", "/spa/deep/link?x=1", "/spa/docs",
    "/tf404/here", "/tf404/missing", "/tfnamed/missing", "/loop", "/missing-file",
    "/vars?a=7&b=8", "/goto?p=1", "/goto", "/hdr/", "/hdr404/",
    "/e/missing", "/dead/x", "/pxerr/status/404", "/pxerr/status/500", "/pxerr/status/418",
    "/status/eq/201", "/status/keep/201", "/status/code/201", "/fbstatic/missing",
    "/fbret/x",
]


def test_answers_match_nginx(pair):
    _, rport, nport = pair
    diffs = []
    for p in PATHS:
        h = {"Host": "LocalHost", "User-Agent": "t/1"}
        ours, theirs = answer(rport, p, h), answer(nport, p, h)
        if ours != theirs:
            diffs.append(f"{p}:\n  ringx {ours}\n  nginx {theirs}")
    assert not diffs, "\n".join(diffs)


FALLBACKS = [
    ("GET", "/status/eq/201"), ("GET", "/status/keep/201"), ("GET", "/status/code/201"),
    ("DELETE", "/status/eq/201"), ("HEAD", "/status/keep/201"), ("GET", "/fbstatic/missing"),
    ("HEAD", "/fbstatic/missing"), ("GET", "/fbret/x"), ("DELETE", "/fbret/x"),
]


def test_error_page_to_a_proxying_location_matches_nginx(pair):
    """error_page sending a failed request (an upstream down, a static 404, a `return 403`) to
    a location that proxies: the status (`=`: the fallback's; none: the error's; `=CODE`),
    the body the fallback's upstream sent (it names the URI it got), the method kept for a
    named location (DELETE: the upstream's 501) and GET for a URI."""
    _, rport, nport = pair
    for method, p in FALLBACKS:
        got = {}
        for name, port in (("ringx", rport), ("nginx", nport)):
            r, body = get(port, p, {"Host": "localhost"}, method)
            got[name] = (r.status, body, r.getheader("X-Upstream-Error"))
        assert got["ringx"] == got["nginx"], (method, p, got)
    want = {
        ("GET", "/status/eq/201"): (201, b"upstream says /status/eq/201"),
        ("GET", "/status/keep/201"): (502, b"upstream says /status/keep/201"),
        ("GET", "/status/code/201"): (203, b"upstream says /status/code/201"),
        ("GET", "/fbstatic/missing"): (201, b"upstream says /status/201"),
        ("GET", "/fbret/x"): (403, b"upstream says /status/200"),
        ("DELETE", "/fbret/x"): (403, b"upstream says /status/200"),
    }
    for (method, p), (status, body) in want.items():
        r, b = get(rport, p, {"Host": "localhost"}, method)
        assert (r.status, b) == (status, body), (method, p, r.status, b)
    r, _ = get(rport, "/status/eq/201", {"Host": "localhost"}, "DELETE")
    assert r.status == 501


def test_proxy_uris_and_headers_match_nginx(pair, upstream):
    _, rport, nport = pair
    cases = ["/px/a/b?q=1", "/px/a%20b/%2Fc?x=%41", "/px/", "/pxexact?z=1", "/pxplain/p?q",
             "/pxrw/x/y?k=1", "/px/../px/dots"]
    for p in cases:
        seen = {}
        for name, port in (("ringx", rport), ("nginx", nport)):
            r, body = get(port, p, {"User-Agent": "client-ua"})
            assert r.status == 200, (name, p, body)
            assert r.getheader("X-Powered-By") is None or not p.startswith("/px/"), name
            seen[name] = json.loads(body)
        assert seen["ringx"]["path"] == seen["nginx"]["path"], p
        if p.startswith("/px/"):
            for name, s in seen.items():
                h = {k.lower(): v for k, v in s["headers"].items()}
                assert "user-agent" not in h, (name, h)
                assert re.fullmatch(r"[0-9a-f]{32}", h["x-request-id"]), (name, h)
            assert (seen["ringx"]["headers"].get("X-Path") ==
                    seen["nginx"]["headers"].get("X-Path")), p


def test_request_id_is_one_per_request(ringx, upstream, tmp_path):
    port = free_port()
    log = tmp_path / "access.json"
    ringx.make(runtime_section(None) + f"""
[http]
access_log = "{log}"
access_log_format = "json"

[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "http://{upstream.addr}"
  proxy_set_header = {{ "X-Request-Id" = "$request_id" }}
  add_header = {{ "X-Request-Id" = "$request_id" }}
""")
    ids = set()
    for _ in range(20):
        r, body = get(port, "/id")
        sent = json.loads(body)["headers"]["X-Request-Id"]
        assert r.getheader("X-Request-Id") == sent, "the same id upstream and to the client"
        ids.add(sent)
    assert len(ids) == 20
    # The JSON access log names each request by the id its upstream and client saw.
    deadline = time.monotonic() + 5
    while not (log.exists() and len(log.read_text().splitlines()) >= 20):
        assert time.monotonic() < deadline, "20 lines in the access log"
        time.sleep(0.05)
    lines = log.read_text().splitlines()
    assert {json.loads(ln)["request_id"] for ln in lines} == ids


def test_add_header_on_proxied_and_error_responses(ringx, upstream):
    port = free_port()
    ringx.make(runtime_section(None) + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
add_header = {{ "X-Frame-Options" = "DENY", "X-Always" = {{ value = "yes", always = true }} }}
  [[server.location]]
  path = "/"
  proxy_pass = "http://{upstream.addr}"
  [[server.location]]
  path = "/dead/"
  proxy_pass = "http://127.0.0.1:1"
""")
    r, _ = get(port, "/ok")
    assert (r.getheader("X-Frame-Options"), r.getheader("X-Always")) == ("DENY", "yes")
    r, _ = get(port, "/status/404")
    assert (r.status, r.getheader("X-Frame-Options"), r.getheader("X-Always")) == (404, None, "yes")
    r, _ = get(port, "/dead/x")
    assert r.status == 502 and r.getheader("X-Always") == "yes"
    assert r.getheader("X-Frame-Options") is None


def test_a_regex_bomb_is_refused_by_check(ringx_bin, tmp_path):
    cfg = tmp_path / "bomb.toml"
    cfg.write_text('[[server]]\nlisten = ["127.0.0.1:1"]\n[[server.location]]\n'
                   'path = "~ (a{1000}){1000}"\nreturn = { status = 204 }\n')
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert out.returncode != 0
    assert f"{cfg}:4:8: " in out.stderr and "too large once compiled" in out.stderr, out.stderr
    cfg.write_text('[[server]]\nlisten = ["127.0.0.1:1"]\n[[server.location]]\npath = "/"\n'
                   'return = { status = 200 }\nrewrite = ["^/(a /b"]\n')
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert out.returncode != 0 and f"{cfg}:6:12: " in out.stderr, out.stderr
    assert "invalid regex" in out.stderr


def test_unusable_error_page_and_try_files_targets_are_placed(ringx_bin, tmp_path):
    """An error_page leading to a gRPC location or to no location, and a try_files
    fallback naming no location, are refused by `ringx check` at FILE:LINE:COL."""
    cfg = tmp_path / "pages.toml"
    head = '[[server]]\nlisten = ["127.0.0.1:1"]\n'
    cases = [
        (head + 'error_page = { "502" = "/app/down" }\n[[server.location]]\npath = "/app/"\n'
         'proxy_pass = "grpc://127.0.0.1:9"\n', ":3:24: ", "leads to a grpc:// location"),
        (head + '[[server.location]]\npath = "/x/"\nreturn = { status = 200 }\n'
         'error_page = { "404 500" = "/err.html" }\n', ":6:28: ", "no location of the server"),
        (head + '[[server.location]]\npath = "/"\nroot = "/tmp"\n'
         'try_files = ["$uri", "@app"]\n', ":6:13: ", "\"@app\" names no location"),
    ]
    for text, at, what in cases:
        cfg.write_text(text)
        out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
        assert out.returncode != 0 and f"{cfg}{at}" in out.stderr, (text, out.stderr)
        assert what in out.stderr, out.stderr


def test_crlf_in_a_variable_cannot_inject_a_header(ringx):
    """A percent-encoded CR LF decodes into the path; what a variable puts in a header is
    made safe, so no header is injected."""
    port = free_port()
    ringx.make(runtime_section(None) + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "~ ^/r/(?s)(.*)$"
  return = {{ status = 302, location = "/to/$1" }}
  add_header = {{ "X-Uri" = "$uri" }}
""")
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /r/a%0d%0aSet-Cookie:%20evil=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head = data.split(b"\r\n\r\n")[0]
    assert b"\r\nSet-Cookie" not in head, head
    assert head.startswith(b"HTTP/1.1 302") or head.startswith(b"HTTP/1.1 400"), head


# nginx's `auto_redirect` (issue 36): a prefix location ending in '/' that proxies also takes
# its path without the slash, with 301 to the path with it, before any location's steps and
# before the regexes. Without it `GET /admin` went past a protected `location /admin/` to
# `location /` (200 from the upstream) where nginx 1.22 answers 301, then 403.
SLASH_LOCS = [
    ("/", "proxy"), ("/admin/", "deny"), ("/ov/", "proxy"), ("= /ov", "exact ov"),
    ("^~ /stop/", "proxy"), ("/ret/", "ret"), ("/rpc/", "grpc"),
]
# The second server rewrites (a regex location: routed by the full route, rewrite/flow.rs).
SLASH_RW_LOCS = SLASH_LOCS + [("~ ^/re$", "regex"), ("/re/", "proxy")]
SLASH_PATHS = ["/admin", "/admin?x=1&y=%20", "/admin/", "/admin/x", "/ADMIN", "/adm", "/ov",
               "/stop", "/ret", "/rpc", "/re", "/re?k=v"]


def _slash_ringx(port: int, up: str, locs) -> str:
    out = f'\n[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
    for path, what in locs:
        out += f'  [[server.location]]\n  path = "{path}"\n'
        if what in ("proxy", "deny"):
            out += f'  proxy_pass = "http://{up}"\n'
        elif what == "grpc":
            out += f'  proxy_pass = "grpc://{up}"\n'
        else:
            out += f'  return = {{ status = 200, body = "{what}\\n" }}\n'
        if what == "deny":
            out += '  access = ["deny all"]\n'
    return out


def _slash_nginx(ports: tuple[int, int], up: str, locs) -> str:
    out = f"server {{ listen 127.0.0.1:{ports[0]}; listen 127.0.0.1:{ports[1]} http2;\n"
    for path, what in locs:
        if what in ("proxy", "deny"):
            act = f"proxy_pass http://{up};" + (" deny all;" if what == "deny" else "")
        elif what == "grpc":
            act = f"grpc_pass grpc://{up};"
        else:
            act = f'return 200 "{what}\\n";'
        out += f"  location {path} {{ {act} }}\n"
    return out + "}\n"


def _h2_get(port: int, path: str) -> tuple[int, str | None, bytes]:
    """An h2c GET (curl, prior knowledge): status, Location, body."""
    r = subprocess.run(["curl", "-s", "-i", "--http2-prior-knowledge", "--max-time", "10",
                        "-H", "Host: LocalHost", f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, timeout=20, check=True)
    head, _, body = r.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0].startswith("HTTP/2 "), lines
    loc = [ln.split(":", 1)[1].strip() for ln in lines[1:] if ln.lower().startswith("location:")]
    return int(lines[0].split()[1]), (loc[0] if loc else None), body


def _slash_answer(port: int, h2: bool, path: str) -> dict:
    """What must match nginx: status, Location (its port written PORT), and who answered
    a 200 (the upstream, with the path it got, or a `return`); then, after a 301 to a path
    under /admin/, the status of that URI (403)."""
    if h2:
        status, loc, body = _h2_get(port, path)
    else:
        r, body = get(port, path, {"Host": "LocalHost"})
        status, loc = r.status, r.getheader("Location")
    who = None
    if status == 200:
        try:
            who = "upstream " + json.loads(body)["path"]
        except ValueError:
            who = body.decode()
    out = {"status": status, "location": loc, "who": who}
    if loc:
        assert loc.startswith(f"http://localhost:{port}/"), loc
        out["location"] = loc.replace(str(port), "PORT")
        target = loc.split(str(port), 1)[1]
        if target.startswith("/admin/"):
            out["then"] = (_h2_get(port, target)[0] if h2
                           else get(port, target, {"Host": "LocalHost"})[0].status)
    return out


def test_slashless_proxied_location_redirects_as_nginx(ringx, upstream, tmp_path):
    rp, rrw = free_port(), free_port()
    ringx.make(runtime_section(None) + _slash_ringx(rp, upstream.addr, SLASH_LOCS)
               + _slash_ringx(rrw, upstream.addr, SLASH_RW_LOCS))
    n1, n1h, n2, n2h = free_port(), free_port(), free_port(), free_port()
    conf = (_slash_nginx((n1, n1h), upstream.addr, SLASH_LOCS)
            + _slash_nginx((n2, n2h), upstream.addr, SLASH_RW_LOCS))
    n = NginxPeer(tmp_path / "nginx", conf, n1)
    try:
        # nginx listens on the h2c port too before it answers.
        for p in (n1h, n2, n2h):
            socket.create_connection(("127.0.0.1", p), timeout=5).close()
        # The case, spelled out: 301 to /admin/ with the query, then 403, both ways.
        for h2 in (False, True):
            a = _slash_answer(rp, h2, "/admin?x=1&y=%20")
            assert a == {"status": 301, "who": None, "then": 403,
                         "location": "http://localhost:PORT/admin/?x=1&y=%20"}, (h2, a)
        diffs = []
        for (rport, nport, nh2) in ((rp, n1, n1h), (rrw, n2, n2h)):
            for p in SLASH_PATHS:
                for h2 in (False, True):
                    ours = _slash_answer(rport, h2, p)
                    theirs = _slash_answer(nh2 if h2 else nport, h2, p)
                    if ours != theirs:
                        diffs.append(f"{p} h2={h2} on {rport}:\n  ringx {ours}\n  nginx {theirs}")
        assert not diffs, "\n".join(diffs)
    finally:
        n.stop()
