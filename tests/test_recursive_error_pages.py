"""`recursive_error_pages` (nginx's directive of that name), against nginx beside ringx.

The flag of the location whose `error_page` is being applied decides whether the request,
once redirected, may be redirected again by the error pages of the location it lands in; a
location inherits the server's. Each case is asked of nginx and of ringx (the `peer`
parameter), over HTTP/1.1 and HTTP/2, with the upstream's requests counted exactly:

- a chain that stops where a location without the flag applied its page (3 upstream asks);
- a loop (`@a` to `@a`, or `/b` to `/b`) followed 10 times (11 asks), then a plain 500 and
  the error log's "rewrite or internal redirection cycle" line naming the target;
- a missing error-page file: 500 with the flag, else the plain 404 (also for a proxied 502);
- without the flag one redirect only (2 asks), and an explicit `off` beats the server's `on`;
- a refusal (`deny`) at the fallback gets that location's page with the latest status;
- the status through a chain: the latest error's, unless an `=` changes it;
- requests on one keep-alive connection, each redirected on its own; the connection is kept
  after every such page, as nginx keeps it.

`ringx check` refuses a bad value at FILE:LINE:COL and refuses an error_page loop between
proxying locations only when no location in it has the flag on.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_recursive_error_pages.py
"""

from __future__ import annotations

import http.client
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import free_port, runtime_section
from nginx_peer import NginxPeer
from origin_server import Origin

# The pages the tests' locations serve; anything else is a server's plain error page.
PAGES = (b"denied page\n", b"page 503\n", b"c3")


@pytest.fixture(scope="module")
def origins():
    """Two counting upstreams: one answers every request 502, the other 503."""
    o502, o503 = Origin(), Origin()
    o502.route("*", status=502, body=b"origin 502\n")
    o503.route("*", status=503, body=b"origin 503\n")
    yield o502, o503
    o502.close()
    o503.close()


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    www = tmp_path_factory.mktemp("rep-www")
    (www / "errors").mkdir()
    (www / "errors" / "denied.html").write_text("denied page\n")
    (www / "errors" / "page.html").write_text("page 503\n")
    for d in ("m", "moff", "x", "x2", "tg", "p405"):
        (www / d).mkdir()
    (www / "p405" / "page.html").write_text("p405 page\n")
    (www / "tg" / "page.html").write_text("tg page\n")
    return www


def nginx_site(port, h2port, port2, u, u3, www):
    i = "proxy_intercept_errors on;"
    return f"""
server {{
  listen 127.0.0.1:{port};
  listen 127.0.0.1:{h2port} http2;
  location /chain/ {{ proxy_pass http://{u}; {i} error_page 502 = @c1; recursive_error_pages on; }}
  location @c1 {{ proxy_pass http://{u}; {i} error_page 502 = @c2; }}
  location @c2 {{ proxy_pass http://{u}; {i} error_page 502 = @c3; }}
  location @c3 {{ return 200 "c3"; }}
  location /named/ {{ proxy_pass http://{u}; {i} error_page 502 = @a; recursive_error_pages on; }}
  location /named2/ {{ proxy_pass http://{u}; {i} error_page 502 = @a; }}
  location @a {{ proxy_pass http://{u}; {i} error_page 502 = @a; recursive_error_pages on; }}
  location /b {{ proxy_pass http://{u}; {i} error_page 502 /b; recursive_error_pages on; }}
  location /once/ {{ proxy_pass http://{u}; {i} error_page 502 = @o; }}
  location @o {{ proxy_pass http://{u}; {i} error_page 502 = @c3; }}
  location /m/ {{ root {www}; error_page 404 /m/nothere.html; recursive_error_pages on; }}
  location /moff/ {{ root {www}; error_page 404 /moff/nothere.html; }}
  location /x/ {{ root {www}; }}
  location /px/ {{ proxy_pass http://{u}; {i} error_page 502 /x/nothere.html; }}
  location /errors/ {{ root {www}; }}
  location /p/ {{ proxy_pass http://{u}; {i} error_page 502 = @g; recursive_error_pages on; }}
  location /poff/ {{ proxy_pass http://{u}; {i} error_page 502 = @g; }}
  location @g {{ proxy_pass http://{u}; deny all; error_page 403 /errors/denied.html; }}
  location /s/ {{ proxy_pass http://{u}; {i} error_page 502 @b; recursive_error_pages on; }}
  location @b {{ proxy_pass http://{u3}; {i} error_page 503 /errors/page.html; }}
  location /s2/ {{ proxy_pass http://{u}; {i} error_page 502 @b2; recursive_error_pages on; }}
  location @b2 {{ proxy_pass http://{u3}; {i} error_page 503 = @c3; }}
  location /s3/ {{ proxy_pass http://{u}; {i} error_page 502 @b3; recursive_error_pages on; }}
  location @b3 {{ proxy_pass http://{u3}; {i} error_page 503 @c3; }}
  location /s4/ {{ proxy_pass http://{u}; {i} error_page 502 = @c3; recursive_error_pages on; }}
  location /uh/ {{ proxy_pass http://{u}; {i} error_page 502 /uh2; recursive_error_pages on; }}
  location /uh2 {{ proxy_pass http://{u}; {i} error_page 502 = @e; recursive_error_pages on; }}
  location @e {{ proxy_pass http://{u3}; proxy_set_header X-RU $request_uri; }}
  location /mq/ {{ proxy_pass http://{u}; {i} error_page 502 /x2/nothere.html; recursive_error_pages on; }}
  location /x2/ {{ root {www}; error_page 404 = @e; }}
  location /rwn/ {{ rewrite ^/rwn/(.*)$ /rwm/$1 last; }}
  location /rwm/ {{ rewrite ^/rwm/(.*)$ /named/$1 last; }}
  location /rwb/ {{ rewrite ^ /b last; }}
  location /tf/ {{ root {www}; try_files $uri /b; }}
  location /rwg/ {{ rewrite ^/rwg/(.*)$ /gd/$1 last; }}
  location /gd/ {{ proxy_pass http://{u}; deny all; error_page 403 = @a; recursive_error_pages on; }}
  location /rwk/ {{ rewrite ^/rwk/(.*)$ /k/$1?q=1 break; proxy_pass http://{u}; {i} error_page 502 = @e; }}
  location /rws/ {{ rewrite ^/rws/(.*)$ /x/$1 break; root {www}; error_page 404 = @e; }}
  location /rwd/ {{ rewrite ^/rwd/(.*)$ /dd/$1 last; }}
  location /dd/ {{ root {www}; deny all; error_page 403 = @e; }}
  location /rwp/ {{ rewrite ^/rwp/(.*)$ /pp/$1 last; }}
  location /pp/ {{ proxy_pass http://{u}; deny all; error_page 403 = @e; }}
  location /uq/ {{ proxy_pass http://{u}; {i} error_page 502 /dd/y; recursive_error_pages on; }}
  location /rq/ {{ rewrite ^/rq/(.*)$ /rq2/$1 last; }}
  location /rq2/ {{ proxy_pass http://{u}; {i} error_page 502 = @q1; recursive_error_pages on; }}
  location @q1 {{ proxy_pass http://{u}; {i} error_page 502 = @e; }}
  location /tg/ {{ root {www}; try_files $uri.html $uri =404; deny all; error_page 403 = @e; }}
  location /r/ {{ rewrite ^/r/(.*)$ /$1 last; }}
  location /tn {{ root {www}; try_files /nonexist @e; }}
  location /lp/ {{ rewrite ^ /lp/ last; error_page 500 /errors/page.html; }}
  location /p405/ {{ root {www}; error_page 405 = @e; }}
}}
server {{
  listen 127.0.0.1:{port2};
  recursive_error_pages on;
  location /inh/ {{ proxy_pass http://{u}; {i} error_page 502 = @r; }}
  location /inhoff/ {{ proxy_pass http://{u}; {i} error_page 502 = @r; recursive_error_pages off; }}
  location @r {{ proxy_pass http://{u}; {i} error_page 502 = @r; }}
}}
"""


def _loc(path, *lines):
    return "  [[server.location]]\n" + "".join(f"  {ln}\n" for ln in (f'path = "{path}"',) + lines)


def ringx_site(port, port2, u, u3, www, log):
    def proxied(path, up, pages, *more):
        return _loc(path, f'proxy_pass = "http://{up}"', "proxy_intercept_errors = true",
                    f"error_page = {{ {pages} }}", *more)

    on = "recursive_error_pages = true"
    return (runtime_section(None, extra=f'error_log = "{log}"\nlog_level = "error"\n')
            + f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
            + proxied("/chain/", u, '"502" = "= @c1"', on)
            + proxied("@c1", u, '"502" = "= @c2"')
            + proxied("@c2", u, '"502" = "= @c3"')
            + _loc("@c3", 'return = { status = 200, body = "c3" }')
            + proxied("/named/", u, '"502" = "= @a"', on)
            + proxied("/named2/", u, '"502" = "= @a"')
            + proxied("@a", u, '"502" = "= @a"', on)
            + proxied("/b", u, '"502" = "/b"', on)
            + proxied("/once/", u, '"502" = "= @o"')
            + proxied("@o", u, '"502" = "= @c3"')
            + _loc("/m/", f'root = "{www}"', 'error_page = { "404" = "/m/nothere.html" }', on)
            + _loc("/moff/", f'root = "{www}"', 'error_page = { "404" = "/moff/nothere.html" }')
            + _loc("/x/", f'root = "{www}"')
            + proxied("/px/", u, '"502" = "/x/nothere.html"')
            + _loc("/errors/", f'root = "{www}"')
            + proxied("/p/", u, '"502" = "= @g"', on)
            + proxied("/poff/", u, '"502" = "= @g"')
            + _loc("@g", f'proxy_pass = "http://{u}"', 'access = ["deny all"]',
                   'error_page = { "403" = "/errors/denied.html" }')
            + proxied("/s/", u, '"502" = "@b"', on)
            + proxied("@b", u3, '"503" = "/errors/page.html"')
            + proxied("/s2/", u, '"502" = "@b2"', on)
            + proxied("@b2", u3, '"503" = "= @c3"')
            + proxied("/s3/", u, '"502" = "@b3"', on)
            + proxied("@b3", u3, '"503" = "@c3"')
            + proxied("/s4/", u, '"502" = "= @c3"', on)
            + proxied("/uh/", u, '"502" = "/uh2"', on)
            + proxied("/uh2", u, '"502" = "= @e"', on)
            + _loc("@e", f'proxy_pass = "http://{u3}"', 'proxy_set_header = { "X-RU" = "$request_uri" }')
            + proxied("/mq/", u, '"502" = "/x2/nothere.html"', on)
            + _loc("/x2/", f'root = "{www}"', 'error_page = { "404" = "= @e" }')
            + _loc("/rwn/", 'rewrite = ["^/rwn/(.*)$ /rwm/$1 last"]')
            + _loc("/rwm/", 'rewrite = ["^/rwm/(.*)$ /named/$1 last"]')
            + _loc("/rwb/", 'rewrite = ["^ /b last"]')
            + _loc("/tf/", f'root = "{www}"', 'try_files = ["$uri", "/b"]')
            + _loc("/rwg/", 'rewrite = ["^/rwg/(.*)$ /gd/$1 last"]')
            + _loc("/gd/", f'proxy_pass = "http://{u}"', 'access = ["deny all"]',
                   'error_page = { "403" = "= @a" }', on)
            + proxied("/rwk/", u, '"502" = "= @e"', 'rewrite = ["^/rwk/(.*)$ /k/$1?q=1 break"]')
            + _loc("/rws/", 'rewrite = ["^/rws/(.*)$ /x/$1 break"]', f'root = "{www}"',
                   'error_page = { "404" = "= @e" }')
            + _loc("/rwd/", 'rewrite = ["^/rwd/(.*)$ /dd/$1 last"]')
            + _loc("/dd/", f'root = "{www}"', 'access = ["deny all"]',
                   'error_page = { "403" = "= @e" }')
            + _loc("/rwp/", 'rewrite = ["^/rwp/(.*)$ /pp/$1 last"]')
            + _loc("/pp/", f'proxy_pass = "http://{u}"', 'access = ["deny all"]',
                   'error_page = { "403" = "= @e" }')
            + proxied("/uq/", u, '"502" = "/dd/y"', on)
            + _loc("/rq/", 'rewrite = ["^/rq/(.*)$ /rq2/$1 last"]')
            + proxied("/rq2/", u, '"502" = "= @q1"', on)
            + proxied("@q1", u, '"502" = "= @e"')
            + _loc("/tg/", f'root = "{www}"', 'try_files = ["$uri.html", "$uri", "=404"]',
                   'access = ["deny all"]', 'error_page = { "403" = "= @e" }')
            + _loc("/r/", 'rewrite = ["^/r/(.*)$ /$1 last"]')
            + _loc("/tn", f'root = "{www}"', 'try_files = ["/nonexist", "@e"]')
            + _loc("/lp/", 'rewrite = ["^ /lp/ last"]', 'error_page = { "500" = "/errors/page.html" }')
            + _loc("/p405/", f'root = "{www}"', 'error_page = { "405" = "= @e" }')
            + f'[[server]]\nlisten = ["127.0.0.1:{port2}"]\n{on}\n'
            + proxied("/inh/", u, '"502" = "= @r"')
            + proxied("/inhoff/", u, '"502" = "= @r"', "recursive_error_pages = false")
            + proxied("@r", u, '"502" = "= @r"'))


@dataclass
class Peer:
    name: str
    port: int      # HTTP/1.1
    h2port: int    # HTTP/2 with prior knowledge (nginx: a second listener; ringx: the same)
    port2: int     # the server with `recursive_error_pages` on at the server level
    log: Path      # the error log
    level: str     # how a line at level error is marked there


def _wait_listening(port, proc, logs):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ringx exited with {proc.returncode}:\n{logs()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"ringx did not start listening on 127.0.0.1:{port}:\n{logs()}")


@pytest.fixture(scope="module", params=["nginx", "ringx"])
def peer(request, origins, www, tmp_path_factory):
    o502, o503 = origins
    tmp = tmp_path_factory.mktemp(f"rep-{request.param}")
    port, port2 = free_port(), free_port()
    if request.param == "nginx":
        h2port = free_port()
        n = NginxPeer(tmp, nginx_site(port, h2port, port2, o502.addr, o503.addr, www), port)
        yield Peer("nginx", port, h2port, port2, tmp / "logs" / "error.log", "[error]")
        n.stop()
        return
    log = tmp / "error.log"
    factory = request.getfixturevalue("ringx_module")
    r = factory.make(ringx_site(port, port2, o502.addr, o503.addr, www, log), start=False,
                     name="recursive")
    # With `error_log` set the "listening on" line goes to the file, at level info: the
    # level here is error, so the port says when it is up.
    r.start(wait=False)
    for p in (port, port2):
        _wait_listening(p, r.proc, lambda: r.log() + (log.read_text() if log.exists() else ""))
    yield Peer("ringx", port, port, port2, log, "ERROR")


def shown(body):
    """What a response showed: one of the tests' pages, or a plain page (and whether the
    upstream's own error body leaked into it)."""
    return body if body in PAGES else ("plain", b"origin" in body)


PLAIN = ("plain", False)


def ask(port, path, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def counted(origin, path, fn):
    before = origin.count(path)
    out = fn()
    return out, origin.count(path) - before


def cycle_lines(log, words):
    if not log.exists():
        return []
    return [ln for ln in log.read_text(errors="replace").splitlines() if words in ln]


def expect_cycle_line(peer, before, words):
    """Exactly one new error-level line with `words` (nginx's, up to the quoted target)."""
    deadline = time.monotonic() + 5
    while len(cycle_lines(peer.log, words)) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    lines = cycle_lines(peer.log, words)
    assert len(lines) == before + 1, (peer.name, words, lines,
                                      peer.log.read_text(errors="replace")[-3000:])
    assert peer.level in lines[-1], (peer.name, lines[-1])


NAMED_CYCLE = 'rewrite or internal redirection cycle while redirect to named location "@a"'
URI_CYCLE = 'rewrite or internal redirection cycle while internally redirecting to "/b"'
FILE_CYCLE = ('rewrite or internal redirection cycle while internally redirecting to '
              '"/m/nothere.html"')

# (path, upstream asks at 502, upstream asks at 503, status, what the page shows)
CASES = [
    # `/chain/` (on) -> @c1 (off) -> @c2: @c1's page applies, @c2's (to @c3) does not.
    ("/chain/x", 3, 0, 502, PLAIN),
    # Without the flag one redirect: `@o`'s page (to @c3) does not apply.
    ("/once/x", 2, 0, 502, PLAIN),
    # The flag of the location whose page applies decides: `/named2/` has none, `@a` has it.
    ("/named2/x", 2, 0, 502, PLAIN),
    # A missing page file: the plain 404, whatever the status was.
    ("/moff/zz", 0, 0, 404, PLAIN),
    ("/px/y", 1, 0, 404, PLAIN),
    # A refusal at the fallback: with the flag, that location's page, the refusal's status.
    ("/p/x", 1, 0, 403, b"denied page\n"),
    ("/poff/x", 1, 0, 403, PLAIN),
    # The status through a chain: the latest error's, unless `=` leaves it to the page.
    ("/s/x", 1, 1, 503, b"page 503\n"),
    ("/s2/x", 1, 1, 200, b"c3"),
    ("/s3/x", 1, 1, 503, b"c3"),
    ("/s4/x", 1, 0, 200, b"c3"),
]


@pytest.mark.parametrize("path,n502,n503,status,page", CASES)
def test_how_far_a_failed_request_is_redirected(peer, origins, path, n502, n503, status, page):
    o502, o503 = origins
    b502, b503 = o502.count(path), o503.count(path)
    st, body = ask(peer.port, path)
    got = (st, shown(body), o502.count(path) - b502, o503.count(path) - b503)
    assert got == (status, page, n502, n503), (peer.name, path, body[:200])


@pytest.mark.parametrize("path,words", [("/named/x", NAMED_CYCLE), ("/b", URI_CYCLE)])
def test_a_loop_is_followed_ten_times_then_500(peer, origins, path, words):
    o502, _ = origins
    before = len(cycle_lines(peer.log, words))
    (st, body), n = counted(o502, path, lambda: ask(peer.port, path))
    assert (st, shown(body), n) == (500, PLAIN, 11), (peer.name, path, body[:200])
    expect_cycle_line(peer, before, words)


def test_a_missing_page_file_with_the_flag_is_a_500(peer):
    before = len(cycle_lines(peer.log, FILE_CYCLE))
    st, body = ask(peer.port, "/m/zz")
    assert (st, shown(body)) == (500, PLAIN), (peer.name, body[:200])
    expect_cycle_line(peer, before, FILE_CYCLE)


@pytest.mark.parametrize("path,via", [
    # `/uh/` -> `/uh2` (a URI) fails -> `@e`: the named location gets the URI `/uh2`.
    ("/uh/x", "/uh2"),
    # `/mq/` -> `/x2/nothere.html` (missing: a 404 there) -> `@e`, with that URI; the
    # request is kept (its head) for this although `/mq/`'s own page is a file.
    ("/mq/x", "/x2/nothere.html"),
])
def test_a_named_location_gets_the_uri_the_request_was_redirected_to(peer, origins, path, via):
    o502, o503 = origins
    b503 = o503.count(via)
    st, body = ask(peer.port, path)
    assert (st, body, o503.count(via) - b503) == (503, b"origin 503\n", 1), (peer.name, body)
    code, body = h2(peer.h2port, path)
    assert (code, body, o503.count(via) - b503) == (503, b"origin 503\n", 2), (peer.name, body)


def test_a_location_inherits_the_servers_flag_and_may_turn_it_off(peer, origins):
    o502, _ = origins
    (st, body), n = counted(o502, "/inh/x", lambda: ask(peer.port2, "/inh/x"))
    assert (st, shown(body), n) == (500, PLAIN, 11), peer.name
    (st, body), n = counted(o502, "/inhoff/x", lambda: ask(peer.port2, "/inhoff/x"))
    assert (st, shown(body), n) == (502, PLAIN, 2), peer.name


SEQUENCE = (
    # (method, path, upstream asks at 502, at 503, status, page; a HEAD has no body)
    ("HEAD", "/chain/x", 3, 0, 502, b""),
    ("GET", "/p/x", 1, 0, 403, b"denied page\n"),
    ("GET", "/s/x", 1, 1, 503, b"page 503\n"),
    ("GET", "/chain/x", 3, 0, 502, PLAIN),
    ("HEAD", "/s3/x", 1, 1, 503, b""),
)


def run_sequence(peer, origins, steps):
    """The steps on one keep-alive connection; for each, whether the server closed it."""
    o502, o503 = origins
    c = http.client.HTTPConnection("127.0.0.1", peer.port, timeout=20)
    closed = []
    for method, path, n502, n503, status, page in steps:
        b502, b503 = o502.count(path), o503.count(path)
        c.request(method, path)
        r = c.getresponse()
        body = r.read()
        got = (r.status, body if method == "HEAD" else shown(body),
               o502.count(path) - b502, o503.count(path) - b503)
        assert got == (status, page, n502, n503), (peer.name, method, path)
        closed.append((method, path, r.will_close))
    c.close()
    return closed


def test_requests_on_one_connection_are_redirected_each_on_its_own(peer, origins):
    """HEAD keeps its method at a named location (and gets no body); a refusal's page keeps
    the connection open."""
    closed = run_sequence(peer, origins, SEQUENCE)
    assert ("GET", "/p/x", False) in closed, (peer.name, closed)


def test_the_connection_is_kept_after_a_page_for_an_intercepted_error(peer, origins):
    """nginx keeps the connection after a page (its own or a file, through a chain) that
    replaced an upstream's error response."""
    closed = run_sequence(peer, origins, SEQUENCE)
    assert [c for c in closed if c[2]] == [], (peer.name, closed)


def h2(port, path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (scripts/install-deps.sh)")
    r = subprocess.run(["curl", "-sS", "--max-time", "20", "--http2-prior-knowledge",
                        "-w", "\n%{http_version} %{http_code}",
                        f"http://127.0.0.1:{port}{path}"], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    body, _, tail = r.stdout.rpartition(b"\n")
    version, code = tail.decode().split()
    assert version == "2", (path, tail)
    return int(code), body


@pytest.mark.parametrize("path,n502,status,page", [
    ("/chain/x", 3, 502, PLAIN),
    ("/named/x", 11, 500, PLAIN),
    ("/b", 11, 500, PLAIN),
    ("/m/zz", 0, 500, PLAIN),
    ("/moff/zz", 0, 404, PLAIN),
    ("/once/x", 2, 502, PLAIN),
    ("/p/x", 1, 403, b"denied page\n"),
])
def test_http2_streams_are_redirected_the_same(peer, origins, path, n502, status, page):
    o502, _ = origins
    (st, body), n = counted(o502, path, lambda: h2(peer.h2port, path))
    assert (st, shown(body), n) == (status, page, n502), (peer.name, path, body[:200])


@pytest.mark.parametrize("proto", ["http/1.1", "h2"])
@pytest.mark.parametrize("path,seen,n502,words", [
    # Two rewrites (`/rwn/` -> `/rwm/` -> `/named/`) leave 8 redirects: 9 asks, not 11.
    ("/rwn/x", "/named/x", 9, NAMED_CYCLE),
    # One rewrite, or a `try_files` fallback, leaves 9.
    ("/rwb/x", "/b", 10, URI_CYCLE),
    ("/tf/x", "/b", 10, URI_CYCLE),
    # A rewrite, then a refusal of the access phase sent on to `@a`: 1 + 8 asks there.
    ("/rwg/x", "/gd/x", 9, NAMED_CYCLE),
])
def test_rewrites_count_toward_the_ten_redirects(peer, origins, proto, path, seen, n502, words):
    """nginx counts the URI changes of rewrites and try_files with the redirects of error
    pages toward one limit of 10."""
    o502, _ = origins
    before = len(cycle_lines(peer.log, words))
    if proto == "h2":
        (st, body), n = counted(o502, seen, lambda: h2(peer.h2port, path))
    else:
        (st, body), n = counted(o502, seen, lambda: ask(peer.port, path))
    assert (st, shown(body), n) == (500, PLAIN, n502), (peer.name, path, body[:200])
    expect_cycle_line(peer, before, words)


@pytest.mark.parametrize("proto", ["http/1.1", "h2"])
@pytest.mark.parametrize("path,seen", [
    # An upstream's failure after `rewrite ... break` (the new query too).
    ("/rwk/x", "/k/x?q=1"),
    # The path is decoded to be rewritten, and escaped again to be sent.
    ("/rwk/a%20b", "/k/a%20b?q=1"),
    # A static 404 after `rewrite ... break`.
    ("/rws/zz", "/x/zz"),
    # A refusal of the access phase at a location a rewrite led to (serving files, proxying).
    ("/rwd/x", "/dd/x"),
    ("/rwp/x", "/pp/x"),
    # An error page's URI, then a refusal there.
    ("/uq/x", "/dd/y"),
    # A rewrite, then two named locations: the second gets the rewritten URI.
    ("/rq/x?a=1", "/rq2/x?a=1"),
    # An error page's URI, then a named location.
    ("/uh/x", "/uh2"),
])
def test_a_named_location_gets_the_uri_a_rewrite_made(peer, origins, proto, path, seen):
    """nginx's named location keeps the request's URI as it is, rewritten; `$request_uri`
    stays the one the client sent, through every redirect."""
    _, o503 = origins
    before = len(o503.requests())
    if proto == "h2":
        st, _ = h2(peer.h2port, path)
    else:
        st, _ = ask(peer.port, path)
    got = [(t, h.get("x-ru")) for _, t, h in o503.requests()[before:]]
    assert (st, got) == (503, [(seen, path)]), (peer.name, path)


@pytest.mark.parametrize("path,status,upstream", [
    # A file `try_files` found is not a URI change: the refusal's named location gets the
    # URI as the access phase saw it (nginx runs try_files after the access phase).
    ("/tg/page", 503, "/tg/page"),
    # Ten rewrites, then a `try_files` fallback to a named location: the 11th change, a
    # cycle (a plain 500, and nothing asked of the upstream).
    ("/r/r/r/r/r/r/r/r/r/r/tn", 500, None),
    # Nine: the named location answers.
    ("/r/r/r/r/r/r/r/r/r/tn", 503, "/tn"),
])
def test_try_files_and_the_named_redirect(peer, origins, www, path, status, upstream):
    _, o503 = origins
    before = len(o503.requests())
    st, body = ask(peer.port, path)
    got = [t for _, t, _ in o503.requests()[before:]]
    assert (st, got) == (status, [upstream] if upstream else []), (peer.name, path, body[:200])


def test_a_rewrite_cycle_spends_the_count_so_no_error_page_applies(peer):
    """nginx: the 11th rewrite is a cycle, logged once; with the count spent, the location's
    error page for 500 is not applied (a plain 500, no second cycle line for the page)."""
    words = "rewrite or internal redirection cycle while processing"
    page = 'rewrite or internal redirection cycle while internally redirecting to "/errors/'
    before, before_page = len(cycle_lines(peer.log, words)), len(cycle_lines(peer.log, page))
    st, body = ask(peer.port, "/lp/x")
    assert (st, shown(body)) == (500, PLAIN), (peer.name, body[:200])
    expect_cycle_line(peer, before, words)
    assert len(cycle_lines(peer.log, page)) == before_page, peer.name


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_a_405_with_an_empty_body_goes_to_the_named_location(peer, origins, method):
    """`Content-Length: 0` is no body: the static location's 405 goes to `@e`, which gets the
    request with its method (ringx closed the connection without an answer)."""
    _, o503 = origins
    before = len(o503.requests())
    c = http.client.HTTPConnection("127.0.0.1", peer.port, timeout=20)
    c.request(method, "/p405/page.html", body=b"", headers={"Content-Length": "0"})
    r = c.getresponse()
    r.read()
    got = [(m, t) for m, t, _ in o503.requests()[before:]]
    assert (r.status, got) == (503, [(method, "/p405/page.html")]), peer.name
    # The connection goes on.
    c.request("GET", "/p405/page.html")
    r = c.getresponse()
    assert (r.status, r.read()) == (200, b"p405 page\n"), peer.name
    c.close()


# -- ringx check ----------------------------------------------------------------------------

def check(ringx_bin, cfg, text):
    cfg.write_text(text)
    return subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)


@pytest.mark.parametrize("text,at", [
    ('[[server]]\nlisten = ["127.0.0.1:1"]\nrecursive_error_pages = "yes"\n', ":3:25: "),
    ('[[server]]\nlisten = ["127.0.0.1:1"]\n[[server.location]]\npath = "/"\n'
     'return = { status = 204 }\nrecursive_error_pages = 1\n', ":6:25: "),
])
def test_check_refuses_a_value_that_is_not_a_boolean(ringx_bin, tmp_path, text, at):
    cfg = tmp_path / "bad.toml"
    out = check(ringx_bin, cfg, text)
    assert out.returncode != 0 and f"{cfg}{at}" in out.stderr, out.stderr


def _pair(a_extra="", b_extra=""):
    """`@a` and `@b` sending a 502 to each other."""
    return ('[[server.location]]\npath = "@a"\nproxy_pass = "http://127.0.0.1:9"\n'
            f'error_page = {{ "502" = "@b" }}\n{a_extra}'
            '[[server.location]]\npath = "@b"\nproxy_pass = "http://127.0.0.1:8"\n'
            f'error_page = {{ "502" = "= @a" }}\n{b_extra}')


def _retry(extra=""):
    """nginx's `@retry` pattern: a dead upstream asked again, up to 10 times."""
    return ('[[server.location]]\npath = "/"\nproxy_pass = "http://127.0.0.1:9"\n'
            'error_page = { "502" = "= @retry" }\n'
            '[[server.location]]\npath = "@retry"\nproxy_pass = "http://127.0.0.1:9"\n'
            f'error_page = {{ "502" = "= @retry" }}\n{extra}')


ON = "recursive_error_pages = true\n"
OFF = "recursive_error_pages = false\n"


@pytest.mark.parametrize("server,pages", [
    ("", _pair()),
    ("", _pair(OFF, OFF)),
    ("", _retry()),
    (ON, _retry(OFF)),
    ('', '[[server.location]]\npath = "/app/"\nproxy_pass = "http://127.0.0.1:9"\n'
         'error_page = { "502" = "/app/down" }\n'),
])
def test_check_refuses_a_loop_where_no_location_has_the_flag(ringx_bin, tmp_path, server, pages):
    cfg = tmp_path / "loop.toml"
    out = check(ringx_bin, cfg, f'[[server]]\nlisten = ["127.0.0.1:1"]\n{server}{pages}')
    assert out.returncode != 0 and "in a loop" in out.stderr, out.stderr
    assert re.search(re.escape(str(cfg)) + r":\d+:\d+: error_page ", out.stderr), out.stderr


@pytest.mark.parametrize("server,pages", [
    ("", _pair(ON)),
    ("", _pair("", ON)),
    ("", _retry(ON)),
    (ON, _retry()),
    ('', '[[server.location]]\npath = "/app/"\nproxy_pass = "http://127.0.0.1:9"\n'
         'error_page = { "502" = "/app/down" }\n' + ON),
])
def test_check_accepts_a_loop_where_a_location_has_the_flag(ringx_bin, tmp_path, server, pages):
    cfg = tmp_path / "retry.toml"
    out = check(ringx_bin, cfg, f'[[server]]\nlisten = ["127.0.0.1:1"]\n{server}{pages}')
    assert out.returncode == 0, out.stderr
