"""error_page and the access phase, against nginx beside ringx:

- a request re-served by an `error_page` location (`@name` or a URI that proxies) passes that
  location's guard, as nginx's internal redirect runs its access phase: `access` (deny),
  `auth_basic`, `auth_request`, `limit_req`; and its proxy cache is used (one upstream fetch
  for two requests). A fallback to a protected location must not bypass the protection.
- a refusal of the access phase (403, 401, 429) goes to the `error_page` for its status;
- a request with a body falls back with its body sent again (kept up to 64 KiB);
- over HTTP/1.1 (compared with nginx) and HTTP/2 streams (curl, ringx's own answers).

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_error_page_guard.py
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import http.server
import shutil
import subprocess
import threading
import uuid

import pytest

from conftest import free_port, runtime_section
from nginx_peer import NginxPeer
from origin_server import Origin, token_decision


def _say(method, target, headers):
    return {"body": b"origin says " + target.encode()}


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    break
                body += self.rfile.read(n)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = b"%s %s got %d: %s" % (self.command.encode(), self.path.encode(), len(body),
                                     hashlib.sha256(body).hexdigest().encode())
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_PUT = do_GET = do_POST


@pytest.fixture(scope="module")
def echo():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def origin():
    o = Origin()
    o.route("*", fn=_say)
    o.route("/auth", fn=token_decision)
    o.route("/rcached/x", body=b"cached body", headers={"Cache-Control": "max-age=60"})
    o.route("/ncached/x", body=b"cached body", headers={"Cache-Control": "max-age=60"})
    yield o
    o.close()


def _htpasswd(path):
    h = subprocess.run(["openssl", "passwd", "-6", "pw"], capture_output=True, text=True,
                       check=True).stdout.strip()
    path.write_text(f"user:{h}\n")


def ringx_site(port, up, users, cache_dir, www, echo):
    return runtime_section(None) + f"""
[[limit_req_zone]]
name = "one"
key = "$http_x_k"
rate = "1r/m"
[[proxy_cache_path]]
name = "c"
path = "{cache_dir}"
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/deny/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @denied" }}
  [[server.location]]
  path = "/denykeep/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "@denied" }}
  [[server.location]]
  path = "@denied"
  proxy_pass = "http://{up}"
  access = ["deny all"]
  [[server.location]]
  path = "/allow/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @allowed" }}
  [[server.location]]
  path = "@allowed"
  proxy_pass = "http://{up}"
  access = ["allow 127.0.0.0/8", "deny all"]
  [[server.location]]
  path = "/basic/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @basic" }}
  [[server.location]]
  path = "@basic"
  proxy_pass = "http://{up}"
  auth_basic = {{ realm = "fb", user_file = "{users}" }}
  [[server.location]]
  path = "/areq/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @areq" }}
  [[server.location]]
  path = "@areq"
  proxy_pass = "http://{up}"
  auth_request = {{ proxy_pass = "http://{up}", uri = "/auth" }}
  [[server.location]]
  path = "/miss/"
  return = {{ status = 404 }}
  error_page = {{ "404" = "= /prot/x" }}
  [[server.location]]
  path = "/prot/"
  proxy_pass = "http://{up}"
  access = ["deny all"]
  [[server.location]]
  path = "/lim/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @lim" }}
  [[server.location]]
  path = "@lim"
  proxy_pass = "http://{up}"
  limit_req = {{ zone = "one", burst = 0, nodelay = true, status = 429 }}
  [[server.location]]
  path = "/rcached/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "@cached" }}
  [[server.location]]
  path = "@cached"
  proxy_pass = "http://{up}"
  proxy_cache = {{ zone = "c" }}
  [[server.location]]
  path = "/errors/"
  root = "{www}"
  [[server.location]]
  path = "/rdeny/"
  proxy_pass = "http://{up}"
  access = ["deny all"]
  error_page = {{ "403" = "/errors/403.html" }}
  [[server.location]]
  path = "/rdeny200/"
  proxy_pass = "http://{up}"
  access = ["deny all"]
  error_page = {{ "403" = "=200 /errors/403.html" }}
  [[server.location]]
  path = "/rbasic/"
  proxy_pass = "http://{up}"
  auth_basic = {{ realm = "fb", user_file = "{users}" }}
  error_page = {{ "401" = "/errors/401.html" }}
  [[server.location]]
  path = "/rlim/"
  proxy_pass = "http://{up}"
  limit_req = {{ zone = "one", burst = 0, nodelay = true, status = 429 }}
  error_page = {{ "429" = "/errors/429.html" }}
  [[server.location]]
  path = "/rareq/"
  proxy_pass = "http://{up}"
  auth_request = {{ proxy_pass = "http://{up}", uri = "/auth" }}
  error_page = {{ "401 403" = "= @login" }}
  [[server.location]]
  path = "/rkeep/"
  proxy_pass = "http://{up}"
  access = ["deny all"]
  error_page = {{ "403" = "@login" }}
  [[server.location]]
  path = "@login"
  proxy_pass = "http://{up}"
  [[server.location]]
  path = "/post/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @echo" }}
  [[server.location]]
  path = "@echo"
  proxy_pass = "http://{echo}"
  [[server.location]]
  path = "/sdeny/"
  return = {{ status = 404 }}
  error_page = {{ "404" = "/gdeny/page.html" }}
  [[server.location]]
  path = "/sdeny200/"
  return = {{ status = 404 }}
  error_page = {{ "404" = "=200 /gdeny/page.html" }}
  [[server.location]]
  path = "/gdeny/"
  root = "{www}"
  access = ["deny all"]
  [[server.location]]
  path = "/sallow/"
  return = {{ status = 404 }}
  error_page = {{ "404" = "/gallow/page.html" }}
  [[server.location]]
  path = "/gallow/"
  root = "{www}"
  access = ["allow 127.0.0.0/8", "deny all"]
  [[server.location]]
  path = "/sbasic/"
  return = {{ status = 404 }}
  error_page = {{ "404" = "/gbasic/page.html" }}
  [[server.location]]
  path = "/gbasic/"
  root = "{www}"
  auth_basic = {{ realm = "pg", user_file = "{users}" }}
  [[server.location]]
  path = "/slim/"
  return = {{ status = 404 }}
  error_page = {{ "404" = "/glim/page.html" }}
  [[server.location]]
  path = "/glim/"
  root = "{www}"
  limit_req = {{ zone = "one", burst = 0, nodelay = true, status = 429 }}
  [[server.location]]
  path = "/sup/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "/gdeny/page.html" }}
  [[server.location]]
  path = "/sref/"
  proxy_pass = "http://{up}"
  access = ["deny all"]
  error_page = {{ "403" = "/gbasic/page.html" }}
  [[server.location]]
  path = "/sareq/"
  return = {{ status = 404 }}
  error_page = {{ "404" = "/gareq/page.html" }}
  [[server.location]]
  path = "/gareq/"
  root = "{www}"
  auth_request = {{ proxy_pass = "http://{up}", uri = "/auth" }}
  [[server.location]]
  path = "/sret/"
  return = {{ status = 404 }}
  error_page = {{ "404" = "/gret" }}
  [[server.location]]
  path = "= /gret"
  access = ["deny all"]
  return = {{ status = 200, body = "ret body" }}
"""


def nginx_site(port, up, users, cache_dir, www, echo):
    return f"""
limit_req_zone $http_x_k zone=one:1m rate=1r/m;
proxy_cache_path {cache_dir} keys_zone=c:1m;
server {{
  listen 127.0.0.1:{port};
  location /deny/ {{ proxy_pass http://127.0.0.1:1; error_page 502 = @denied; }}
  location /denykeep/ {{ proxy_pass http://127.0.0.1:1; error_page 502 @denied; }}
  location @denied {{ proxy_pass http://{up}; deny all; }}
  location /allow/ {{ proxy_pass http://127.0.0.1:1; error_page 502 = @allowed; }}
  location @allowed {{ proxy_pass http://{up}; allow 127.0.0.0/8; deny all; }}
  location /basic/ {{ proxy_pass http://127.0.0.1:1; error_page 502 = @basic; }}
  location @basic {{ proxy_pass http://{up}; auth_basic "fb"; auth_basic_user_file {users}; }}
  location /areq/ {{ proxy_pass http://127.0.0.1:1; error_page 502 = @areq; }}
  location @areq {{ proxy_pass http://{up}; auth_request /_auth; }}
  location = /_auth {{ internal; proxy_pass http://{up}/auth; proxy_pass_request_body off;
                      proxy_set_header Content-Length ""; }}
  location /miss/ {{ return 404; error_page 404 = /prot/x; }}
  location /prot/ {{ proxy_pass http://{up}; deny all; }}
  location /lim/ {{ proxy_pass http://127.0.0.1:1; error_page 502 = @lim; }}
  location @lim {{ proxy_pass http://{up}; limit_req zone=one nodelay;
                   limit_req_status 429; }}
  location /ncached/ {{ proxy_pass http://127.0.0.1:1; error_page 502 @cached; }}
  location @cached {{ proxy_pass http://{up}; proxy_cache c; }}
  location /errors/ {{ root {www}; }}
  location /rdeny/ {{ proxy_pass http://{up}; deny all; error_page 403 /errors/403.html; }}
  location /rdeny200/ {{ proxy_pass http://{up}; deny all; error_page 403 =200 /errors/403.html; }}
  location /rbasic/ {{ proxy_pass http://{up}; auth_basic "fb"; auth_basic_user_file {users};
                      error_page 401 /errors/401.html; }}
  location /rlim/ {{ proxy_pass http://{up}; limit_req zone=one nodelay; limit_req_status 429;
                    error_page 429 /errors/429.html; }}
  location /rareq/ {{ proxy_pass http://{up}; auth_request /_auth; error_page 401 403 = @login; }}
  location /rkeep/ {{ proxy_pass http://{up}; deny all; error_page 403 @login; }}
  location @login {{ proxy_pass http://{up}; }}
  location /post/ {{ proxy_pass http://127.0.0.1:1; error_page 502 = @echo; }}
  location @echo {{ proxy_pass http://{echo}; }}
  location /sdeny/ {{ return 404; error_page 404 /gdeny/page.html; }}
  location /sdeny200/ {{ return 404; error_page 404 =200 /gdeny/page.html; }}
  location /gdeny/ {{ root {www}; deny all; }}
  location /sallow/ {{ return 404; error_page 404 /gallow/page.html; }}
  location /gallow/ {{ root {www}; allow 127.0.0.0/8; deny all; }}
  location /sbasic/ {{ return 404; error_page 404 /gbasic/page.html; }}
  location /gbasic/ {{ root {www}; auth_basic "pg"; auth_basic_user_file {users}; }}
  location /slim/ {{ return 404; error_page 404 /glim/page.html; }}
  location /glim/ {{ root {www}; limit_req zone=one nodelay; limit_req_status 429; }}
  location /sup/ {{ proxy_pass http://127.0.0.1:1; error_page 502 /gdeny/page.html; }}
  location /sref/ {{ proxy_pass http://{up}; deny all; error_page 403 /gbasic/page.html; }}
  location /sareq/ {{ return 404; error_page 404 /gareq/page.html; }}
  location /gareq/ {{ root {www}; auth_request /_auth; }}
  location /sret/ {{ return 404; error_page 404 /gret; }}
  location = /gret {{ deny all; return 200 "ret body"; }}
}}
"""


@pytest.fixture(scope="module")
def pair(ringx_module, origin, echo, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("epguard")
    users = tmp / "users"
    _htpasswd(users)
    www = tmp / "www"
    (www / "errors").mkdir(parents=True)
    for code in (401, 403, 429):
        (www / "errors" / f"{code}.html").write_text(f"custom {code} page\n")
    for d in ("gdeny", "gallow", "gbasic", "glim", "gareq"):
        (www / d).mkdir()
        (www / d / "page.html").write_text("guarded page\n")
    rport, nport = free_port(), free_port()
    ringx_module.make(ringx_site(rport, origin.addr, users, tmp / "rcache", www, echo), name="epguard")
    n = NginxPeer(tmp / "nginx", nginx_site(nport, origin.addr, users, tmp / "ncache", www, echo), nport)
    yield rport, nport
    n.stop()


def get(port, path, headers=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body, r


BASIC_OK = {"Authorization": "Basic " + base64.b64encode(b"user:pw").decode()}
BASIC_BAD = {"Authorization": "Basic " + base64.b64encode(b"user:wrong").decode()}

CASES = [
    ("/deny/x", {}),
    ("/denykeep/x", {}),
    ("/allow/x", {}),
    ("/basic/x", {}),
    ("/basic/x", BASIC_BAD),
    ("/basic/x", BASIC_OK),
    ("/areq/x", {"X-Token": "good"}),
    ("/areq/x", {"X-Token": "banned"}),
    ("/areq/x", {"X-Token": "other"}),
    ("/miss/x", {}),
]


def test_a_fallback_location_runs_its_guard_like_nginx(pair):
    rport, nport = pair
    diffs = []
    for path, h in CASES:
        got = {}
        for name, port in (("ringx", rport), ("nginx", nport)):
            st, body, r = get(port, path, h)
            # The challenge's scheme and realm (ringx adds RFC 7617's charset parameter).
            challenge = (r.getheader("WWW-Authenticate") or "").split(",")[0]
            got[name] = (st, body if st < 300 else b"origin says" in body, challenge)
        if got["ringx"] != got["nginx"]:
            diffs.append(f"{path} {h}: ringx {got['ringx']} nginx {got['nginx']}")
    assert not diffs, "\n".join(diffs)
    # The protection holds: nothing from the protected upstream without the credentials.
    st, body, r = get(rport, "/deny/x")
    assert st == 403 and b"origin says" not in body
    st, body, r = get(rport, "/basic/x")
    assert st == 401 and b"origin says" not in body
    assert r.getheader("WWW-Authenticate").startswith('Basic realm="fb"')
    assert get(rport, "/basic/x", BASIC_OK)[:2] == (200, b"origin says /basic/x")


def test_a_fallback_location_applies_its_limit_req_like_nginx(pair):
    rport, nport = pair
    for port in (rport, nport):
        h = {"X-K": uuid.uuid4().hex}
        assert get(port, "/lim/x", h)[:2] == (200, b"origin says /lim/x"), port
        st, body, _ = get(port, "/lim/x", h)
        assert st == 429 and b"origin says" not in body, (port, st, body)


def test_a_fallback_location_uses_its_cache(pair, origin):
    rport, nport = pair
    for port, path in ((rport, "/rcached/x"), (nport, "/ncached/x")):
        before = origin.count(path)
        # Without `=` the client is told the original error's status, with the page the
        # fallback location serves (from its cache the second time).
        for _ in range(3):
            assert get(port, path)[:2] == (502, b"cached body"), port
        assert origin.count(path) - before == 1, (port, origin.count(path) - before)


def h2(port, path, headers=()):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (scripts/install-deps.sh)")
    args = ["curl", "-sS", "--max-time", "20", "--http2-prior-knowledge",
            "-w", "%{http_version} %{http_code}", "-o", "/dev/null"]
    for k, v in headers:
        args += ["-H", f"{k}: {v}"]
    r = subprocess.run(args + [f"http://127.0.0.1:{port}{path}"], capture_output=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


def test_http2_streams_run_the_fallback_guard(pair, origin):
    rport, _ = pair
    assert h2(rport, "/deny/x") == "2 403"
    assert h2(rport, "/denykeep/x") == "2 403"
    assert h2(rport, "/allow/x") == "2 200"
    assert h2(rport, "/miss/x") == "2 403"
    assert h2(rport, "/basic/x") == "2 401"
    assert h2(rport, "/basic/x", BASIC_OK.items()) == "2 200"
    assert h2(rport, "/areq/x", [("X-Token", "good")]) == "2 200"
    assert h2(rport, "/areq/x", [("X-Token", "banned")]) == "2 403"
    k = [("X-K", uuid.uuid4().hex)]
    assert h2(rport, "/lim/x", k) == "2 200"
    assert h2(rport, "/lim/x", k) == "2 429"
    before = origin.count("/rcached/y")
    origin.route("/rcached/y", body=b"cached body", headers={"Cache-Control": "max-age=60"})
    for _ in range(3):
        assert h2(rport, "/rcached/y") == "2 502"
    assert origin.count("/rcached/y") - before == 1


REFUSALS = [
    ("GET", "/rdeny/x", {}),
    ("HEAD", "/rdeny/x", {}),
    ("GET", "/rdeny200/x", {}),
    ("GET", "/rbasic/x", {}),
    ("GET", "/rbasic/x", BASIC_OK),
    ("GET", "/rareq/x", {"X-Token": "banned"}),
    ("GET", "/rareq/x", {"X-Token": "other"}),
    ("GET", "/rareq/x", {"X-Token": "good"}),
    ("GET", "/rkeep/x", {}),
    ("DELETE", "/rkeep/x", {}),
]


def refusal(port, method, path, h):
    st, body, r = get(port, path, h, method)
    challenge = (r.getheader("WWW-Authenticate") or "").split(",")[0]
    return (st, body, r.getheader("Content-Type"), challenge)


def test_refusals_use_the_error_page_like_nginx(pair):
    """A 403 of `deny`, a 401 of `auth_basic` (the challenge kept, as nginx keeps it), the
    401/403 of `auth_request` sent to a proxying location with `=`, a 403 sent to one without
    `=` (the client told 403, the method kept for a named location)."""
    rport, nport = pair
    diffs = []
    for method, path, h in REFUSALS:
        ours, theirs = refusal(rport, method, path, h), refusal(nport, method, path, h)
        if ours != theirs:
            diffs.append(f"{method} {path} {h}:\n  ringx {ours}\n  nginx {theirs}")
    assert not diffs, "\n".join(diffs)
    st, body, r = get(rport, "/rbasic/x")
    assert (st, body) == (401, b"custom 401 page\n")
    assert r.getheader("WWW-Authenticate").startswith('Basic realm="fb"')
    assert get(rport, "/rareq/x", {"X-Token": "banned"})[:2] == (200, b"origin says /rareq/x")


def test_a_limit_req_refusal_uses_the_error_page_like_nginx(pair):
    rport, nport = pair
    for port in (rport, nport):
        h = {"X-K": uuid.uuid4().hex}
        assert get(port, "/rlim/x", h)[:2] == (200, b"origin says /rlim/x"), port
        assert get(port, "/rlim/x", h)[:2] == (429, b"custom 429 page\n"), port


def test_a_refused_request_with_a_body_gets_the_page_and_a_close(pair):
    rport, _ = pair
    c = http.client.HTTPConnection("127.0.0.1", rport, timeout=10)
    c.request("POST", "/rdeny/x", body=b"x" * 100)
    r = c.getresponse()
    assert (r.status, r.read()) == (403, b"custom 403 page\n")
    assert r.getheader("Connection") == "close"
    c.close()


def h2_body(port, path, headers=()):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (scripts/install-deps.sh)")
    args = ["curl", "-sS", "--max-time", "20", "--http2-prior-knowledge",
            "-w", " %{http_version} %{http_code}"]
    for k, v in headers:
        args += ["-H", f"{k}: {v}"]
    r = subprocess.run(args + [f"http://127.0.0.1:{port}{path}"], capture_output=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


def test_http2_refusals_use_the_error_page(pair):
    rport, _ = pair
    assert h2_body(rport, "/rdeny/x") == "custom 403 page\n 2 403"
    assert h2_body(rport, "/rdeny200/x") == "custom 403 page\n 2 200"
    assert h2_body(rport, "/rbasic/x") == "custom 401 page\n 2 401"
    assert h2_body(rport, "/rareq/x", [("X-Token", "banned")]) == "origin says /rareq/x 2 200"
    assert h2_body(rport, "/rkeep/x") == "origin says /rkeep/x 2 403"
    k = [("X-K", uuid.uuid4().hex)]
    assert h2_body(rport, "/rlim/x", k) == "origin says /rlim/x 2 200"
    assert h2_body(rport, "/rlim/x", k) == "custom 429 page\n 2 429"


def post(port, path, body, chunked=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    if chunked:
        c.putrequest("POST", path)
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        for i in range(0, len(body), 1000):
            piece = body[i:i + 1000]
            c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        c.send(b"0\r\n\r\n")
    else:
        c.request("POST", path, body=body)
    r = c.getresponse()
    out = (r.status, r.read())
    c.close()
    return out


def test_a_body_is_sent_again_to_the_fallback_like_nginx(pair):
    rport, nport = pair
    for body, chunked in ((b"payload", False), (b"y" * 5000, True), (b"z" * 60000, False)):
        want = (200, b"POST /post/x got %d: %s" % (len(body),
                                                   hashlib.sha256(body).hexdigest().encode()))
        assert post(nport, "/post/x", body, chunked) == want, "nginx"
        assert post(rport, "/post/x", body, chunked) == want, (len(body), chunked)


def test_http2_a_body_is_sent_again_to_the_fallback(pair, tmp_path):
    rport, _ = pair
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (scripts/install-deps.sh)")
    body = b"q" * 30000
    f = tmp_path / "body"
    f.write_bytes(body)
    r = subprocess.run(["curl", "-sS", "--max-time", "20", "--http2-prior-knowledge",
                        "--data-binary", f"@{f}", "-w", " %{http_version} %{http_code}",
                        f"http://127.0.0.1:{rport}/post/x"], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    want = b"POST /post/x got 30000: %s 2 200" % hashlib.sha256(body).hexdigest().encode()
    assert r.stdout == want, r.stdout


GUARDED_PAGES = [
    ("GET", "/sdeny/x", {}),
    ("HEAD", "/sdeny/x", {}),
    ("GET", "/sdeny200/x", {}),
    ("GET", "/sallow/x", {}),
    ("GET", "/sbasic/x", {}),
    ("GET", "/sbasic/x", BASIC_BAD),
    ("GET", "/sbasic/x", BASIC_OK),
    ("HEAD", "/sbasic/x", BASIC_OK),
    ("GET", "/sup/x", {}),
    ("GET", "/sref/x", {}),
    ("GET", "/sref/x", BASIC_OK),
    ("GET", "/sret/x", {}),
    ("GET", "/sareq/x", {"X-Token": "good"}),
    ("GET", "/sareq/x", {"X-Token": "banned"}),
    ("GET", "/sareq/x", {"X-Token": "other"}),
]


def guarded_page(port, method, path, h):
    st, body, r = get(port, path, h, method)
    challenge = (r.getheader("WWW-Authenticate") or "").split(",")[0]
    # nginx's plain pages and ringx's differ in their HTML; what is served is the question.
    shown = body if body in (b"guarded page\n", b"ret body", b"") else b"plain"
    return (st, shown, challenge)


def test_a_static_error_page_runs_its_location_guard_like_nginx(pair):
    """A file `error_page` whose location has `deny`/`allow`, `auth_basic` or `limit_req`:
    the access phase of that location runs on the internal redirect (a refusal gives the
    plain page for the refusal's status: no recursive error pages); a `return` there answers
    before the access phase, as in nginx."""
    rport, nport = pair
    diffs = []
    for method, path, h in GUARDED_PAGES:
        ours, theirs = (guarded_page(rport, method, path, h),
                        guarded_page(nport, method, path, h))
        if ours != theirs:
            diffs.append(f"{method} {path} {h}:\n  ringx {ours}\n  nginx {theirs}")
    assert not diffs, "\n".join(diffs)
    # The protection holds: the page behind the guard is not shown without credentials.
    assert get(rport, "/sdeny/x")[:2] != (404, b"guarded page\n")
    st, body, r = get(rport, "/sbasic/x")
    assert st == 401 and body != b"guarded page\n"
    assert r.getheader("WWW-Authenticate").startswith('Basic realm="pg"')
    assert get(rport, "/sbasic/x", BASIC_OK)[:2] == (404, b"guarded page\n")


def test_a_static_error_page_applies_its_limit_req_like_nginx(pair):
    rport, nport = pair
    for port in (rport, nport):
        h = {"X-K": uuid.uuid4().hex}
        assert get(port, "/slim/x", h)[:2] == (404, b"guarded page\n"), port
        st, body, _ = get(port, "/slim/x", h)
        assert st == 429 and body != b"guarded page\n", (port, st, body)


def test_http2_a_static_error_page_runs_its_location_guard(pair):
    rport, _ = pair
    assert h2(rport, "/sdeny/x") == "2 403"
    assert h2(rport, "/sdeny200/x") == "2 403"
    assert h2_body(rport, "/sallow/x") == "guarded page\n 2 404"
    assert h2(rport, "/sbasic/x") == "2 401"
    assert h2_body(rport, "/sbasic/x", BASIC_OK.items()) == "guarded page\n 2 404"
    assert h2(rport, "/sup/x") == "2 403"
    assert h2(rport, "/sref/x") == "2 401"
    assert h2_body(rport, "/sret/x") == "ret body 2 404"
    assert h2_body(rport, "/sareq/x", [("X-Token", "good")]) == "guarded page\n 2 404"
    assert h2(rport, "/sareq/x", [("X-Token", "banned")]) == "2 403"
    k = [("X-K", uuid.uuid4().hex)]
    assert h2_body(rport, "/slim/x", k) == "guarded page\n 2 404"
    assert h2(rport, "/slim/x", k) == "2 429"
