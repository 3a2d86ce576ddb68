"""Every location kind over HTTP/3 as over HTTP/1.1 and HTTP/2 (issue 38): gRPC locations,
requests that wait with a body (`auth_request`, a `limit_req` delay), an `error_page` that
re-serves the request at a proxying location, a cache fill in progress, and the background
refresh of a stale cache entry; each with aioquic's HTTP/3 client (tests/h3_client.py),
and quic-go's (bench/h3load) for the error pages and the cache's lock, against the real
binary and real upstreams (grpcio's server, Python's HTTP servers).

Run: RINGX_BIN=target/debug/ringx python3 -m pytest -q -rs tests/test_h3_locations.py
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port, runtime_section
from origin_server import Origin
from tls_pki import Pki
from upstream_server import UpstreamServer

try:
    import h3_client
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("aioquic is not installed (pip install aioquic, or scripts/install-deps.sh)",
                allow_module_level=True)

HERE = Path(__file__).resolve().parent
GRPC = [("content-type", "application/grpc"), ("te", "trailers")]


def msg(payload: bytes) -> bytes:
    """A gRPC message: uncompressed, its length, the payload."""
    return b"\0" + len(payload).to_bytes(4, "big") + payload


def messages(body: bytes) -> list[bytes]:
    """The payloads of the gRPC messages in `body`, which must hold whole messages only."""
    out, i = [], 0
    while i < len(body):
        assert body[i] == 0, "a compressed message"
        n = int.from_bytes(body[i + 1:i + 5], "big")
        out.append(bytes(body[i + 5:i + 5 + n]))
        assert len(out[-1]) == n, "a message cut short"
        i += 5 + n
    return out


def start_grpc_upstream(port: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, str(HERE / "grpc_upstream.py"), str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdout.readline().strip() == b"ready"
    return p


@pytest.fixture(scope="module")
def grpc_site(ringx_module, engine, tmp_path_factory):
    pytest.importorskip("grpc", reason="grpcio is not installed (tests/requirements.txt)")
    d = tmp_path_factory.mktemp("h3grpc")
    pki = Pki(d / "pki")
    cert, key = pki.leaf("a", ["localhost"])
    up_port, dead_port, p = free_port(), free_port(), free_port()
    up = start_grpc_upstream(up_port)
    cfg = runtime_section(engine, zones=1) + f"""
[http]
client_max_body_size = "4m"
[[server]]
listen = ["127.0.0.1:{p}"]
server_name = ["localhost"]
tls = {{ cert = "{cert}", key = "{key}" }}
quic = true
  [[server.location]]
  path = "/t.T/"
  proxy_pass = "grpc://127.0.0.1:{up_port}"
  [[server.location]]
  path = "/dead.D/"
  proxy_pass = "grpc://127.0.0.1:{dead_port}"
"""
    r = ringx_module.make(cfg, engine=engine, name=f"h3-grpc-{engine}")
    yield dict(port=p, ca=pki.ca_path, ringx=r)
    up.kill()
    up.wait()


def call(site, path, body, headers=()):
    (r,) = h3_client.get(site["port"], [path], method="POST", headers=GRPC + list(headers),
                         body=body, cafile=site["ca"])
    return r


def test_grpc_unary_call_byte_exact_with_trailers(grpc_site):
    r = call(grpc_site, "/t.T/Unary", msg(b"hello over h3"))
    assert r.status == 200, (r.status, bytes(r.body))
    assert r.header("content-type") == "application/grpc"
    assert r.header("x-head") == "h"
    assert messages(r.body) == [b"3h revo olleh"]
    # The status comes in the trailing HEADERS frame, with the call's trailing metadata.
    assert r.trailer("grpc-status") == "0", r.trailers
    assert r.trailer("x-trail") == "t", r.trailers


def test_grpc_server_stream_byte_exact_past_the_windows(grpc_site):
    n, size = 40, 50_000  # 2 MB: past the upstream's stream window and QUIC's
    r = call(grpc_site, "/t.T/ServerStream", msg(f"{n} {size}".encode()))
    assert r.status == 200 and r.trailer("grpc-status") == "0", (r.status, r.trailers)
    got = messages(r.body)
    assert got == [bytes([i % 251]) * size for i in range(n)]


def test_grpc_client_stream_large_body_byte_exact(grpc_site):
    """A 3 MB request body in 48 messages: more than the upstream's window takes at once,
    so the stream is held and read again as the upstream takes it."""
    parts = [os.urandom(64 * 1024) for _ in range(48)]
    r = call(grpc_site, "/t.T/ClientStream", b"".join(msg(m) for m in parts))
    assert r.status == 200 and r.trailer("grpc-status") == "0", (r.status, r.trailers)
    digest = hashlib.sha256(b"".join(parts)).hexdigest().encode()
    assert messages(r.body) == [digest + b" 48"]


def test_grpc_upstream_error_status_carried(grpc_site):
    r = call(grpc_site, "/t.T/Fail", msg(b"x"))
    assert r.status == 200
    # No message: a Trailers-Only response, or trailers after an empty body.
    assert not r.body
    fields = dict(r.headers + r.trailers)
    assert fields[b"grpc-status"] == b"5", fields
    assert fields[b"grpc-message"] == b"nope", fields


def test_grpc_upstream_down_is_unavailable(grpc_site):
    r = call(grpc_site, "/dead.D/X", msg(b"x"))
    assert r.status == 200 and not r.body
    assert r.header("grpc-status") == "14", r.headers  # UNAVAILABLE, Trailers-Only


def test_grpc_timeout_is_a_deadline(grpc_site):
    r = call(grpc_site, "/t.T/Hang", msg(b"2"), headers=[("grpc-timeout", "300m")])
    assert r.status == 200
    assert messages(r.body) == [b"x", b"x"]
    assert r.trailer("grpc-status") == "4", r.trailers  # DEADLINE_EXCEEDED


def test_grpc_request_over_client_max_body_size_is_resource_exhausted(grpc_site):
    big = msg(b"\1" * (5 * 1024 * 1024))
    r = call(grpc_site, "/t.T/ClientStream", big)
    fields = dict(r.headers + r.trailers)
    assert fields.get(b"grpc-status") == b"8", fields  # RESOURCE_EXHAUSTED


@pytest.fixture(scope="module")
def site(ringx_module, engine, tmp_path_factory):
    """HTTP/1.1 upstreams behind every other kind of location, over HTTP/3."""
    d = tmp_path_factory.mktemp("h3loc")
    pki = Pki(d / "pki")
    cert, key = pki.leaf("a", ["localhost"])
    www = d / "www"
    (www / "files").mkdir(parents=True)
    (www / "files" / "here.txt").write_text("here\n")
    # `auth` answers the auth_request subrequests, and is the cached locations' origin.
    up, auth = UpstreamServer("up"), Origin()

    def decide(method, target, headers):
        return {"status": 204 if headers.get("X-Token") == "good" else 401}
    auth.route("/auth", fn=decide)
    p = free_port()
    cfg = runtime_section(engine, zones=1) + f"""
[http]
client_max_body_size = "16m"
[[proxy_cache_path]]
name = "c"
path = "{d}/cache"
[[limit_req_zone]]
name = "slow"
key = "$remote_addr"
rate = "5r/s"
[[server]]
listen = ["127.0.0.1:{p}"]
server_name = ["localhost"]
tls = {{ cert = "{cert}", key = "{key}" }}
quic = true
  [[server.location]]
  path = "/auth/"
  proxy_pass = "http://{up.addr}/"
  auth_request = {{ proxy_pass = "http://{auth.addr}", uri = "/auth" }}
  [[server.location]]
  path = "/slow/"
  proxy_pass = "http://{up.addr}/"
  limit_req = {{ zone = "slow", burst = 20 }}
  [[server.location]]
  path = "/down/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "= @up" }}
  [[server.location]]
  path = "@up"
  proxy_pass = "http://{up.addr}"
  [[server.location]]
  path = "/both/"
  proxy_pass = "http://127.0.0.1:1"
  error_page = {{ "502" = "@down" }}
  [[server.location]]
  path = "@down"
  proxy_pass = "http://127.0.0.1:2"
  [[server.location]]
  path = "/files/"
  root = "{www}"
  error_page = {{ "404" = "= /fb/status/206" }}
  [[server.location]]
  path = "/icpt/"
  proxy_pass = "http://{up.addr}/status/"
  proxy_intercept_errors = true
  error_page = {{ "500" = "= /fb/status/207" }}
  [[server.location]]
  path = "/deny/"
  access = ["deny all"]
  return = {{ status = 200, body = "never\\n" }}
  error_page = {{ "403" = "= /fb/status/203" }}
  [[server.location]]
  path = "/fb/"
  proxy_pass = "http://{up.addr}/"
  [[server.location]]
  path = "/c/"
  proxy_pass = "http://{auth.addr}"
  proxy_cache = {{ zone = "c" }}
"""
    r = ringx_module.make(cfg, engine=engine, name=f"h3-locations-{engine}")
    yield dict(port=p, ca=pki.ca_path, ringx=r, up=up, auth=auth)
    up.close()
    auth.close()


def post(site, paths, body, headers=(), body_after=0.0, trailers=()):
    return h3_client.get(site["port"], paths, method="POST", headers=list(headers), body=body,
                         cafile=site["ca"], timeout=30, body_after=body_after,
                         trailers=trailers)


def uploaded(r, body):
    """Whether the upstream's /upload saw exactly `body`."""
    assert r.status == 200, (r.status, bytes(r.body)[:200])
    seen = json.loads(bytes(r.body))
    return (seen["len"], seen["sha256"]) == (len(body), hashlib.sha256(body).hexdigest())


@pytest.mark.parametrize("size", [100 * 1024, 3 * 1024 * 1024])
def test_body_kept_while_auth_request_decides(site, size):
    """The request's body arrives while its `auth_request` subrequest is out: kept (up to
    the stream's window, then the stream is not read) and sent on once it is allowed."""
    body = os.urandom(size)
    before = site["auth"].count("/auth")
    (r,) = post(site, ["/auth/upload"], body, headers=[("x-token", "good")])
    assert uploaded(r, body)
    assert site["auth"].count("/auth") == before + 1
    (r,) = post(site, ["/auth/upload"], body, headers=[("x-token", "bad")])
    assert r.status == 401


def test_body_kept_through_a_limit_req_delay(site):
    """Four requests with bodies at once on one connection, at 5 r/s: three wait their
    delay with their bodies kept (one larger than the stream's window), and every body
    reaches the upstream whole."""
    bodies = [os.urandom(100 * 1024), os.urandom(100 * 1024 + 1), os.urandom(3 << 20),
              os.urandom(100 * 1024 + 3)]
    t0 = time.monotonic()
    rs = post(site, ["/slow/upload"] * 4, bodies)
    took = time.monotonic() - t0
    assert all(uploaded(r, b) for r, b in zip(rs, bodies))
    # The last went on three intervals (600 ms at 5 r/s) after the first.
    assert took >= 0.5, took


def test_error_page_re_serves_at_a_proxying_location(site):
    """As over HTTP/1.1 and HTTP/2 (test_error_page_fallback.py): an upstream that is down,
    a static 404, an intercepted upstream error and a guard's refusal each re-served at the
    proxying location their `error_page` names; a fallback that fails itself gets the plain
    page; all on one connection at once."""
    paths = ["/down/status/201", "/files/missing", "/icpt/500", "/deny/x", "/both/x",
             "/files/here.txt", "/icpt/404"]
    rs = h3_client.get(site["port"], paths, cafile=site["ca"])
    got = [(r.status, bytes(r.body)) for r in rs]
    assert got[:4] == [(201, b"status 201 from up"), (206, b"status 206 from up"),
                       (207, b"status 207 from up"), (203, b"status 203 from up")], got
    assert got[4][0] == 502 and b"from up" not in got[4][1], got[4]
    assert got[5] == (200, b"here\n")
    # An upstream status with no error_page passes as it is.
    assert got[6] == (404, b"status 404 from up")


def test_error_page_re_serves_a_request_with_its_body(site):
    """A POST with a length whose upstream is down is re-served at the `error_page` location
    with its body (kept by the exchange: up to 64 KiB); a larger one gets the original
    error, as over HTTP/2 (multiplex/failed.rs: a body without a length is not kept)."""
    for size, kept in ((60 * 1024, True), (64 * 1024 + 1, False)):
        body = os.urandom(size)
        (r,) = post(site, ["/down/upload"], body, headers=[("content-length", str(size))])
        if kept:
            assert uploaded(r, body)
        else:
            assert r.status == 502 and b"sha256" not in r.body, (r.status, bytes(r.body))


def test_error_page_waits_for_the_rest_of_the_body(site):
    """The upstream fails before the body came (it goes half a second after the head): the
    rest is read and kept first, then the request is re-served with all of it, as over
    HTTP/2 (Proxied::reads_rest_first)."""
    body = os.urandom(50_000)
    (r,) = post(site, ["/down/upload"], body, headers=[("content-length", str(len(body)))],
                body_after=0.5)
    assert uploaded(r, body)


def test_error_page_waits_for_a_body_that_ends_with_trailers(site):
    """As above, the body ending with a trailer section instead of its last DATA frame: the
    trailers end the body, and the request is re-served with all of it."""
    body = os.urandom(50_000)
    (r,) = post(site, ["/down/upload"], body, headers=[("content-length", str(len(body)))],
                body_after=0.5, trailers=[("x-checksum", "abc")])
    assert uploaded(r, body)


def test_a_cache_fill_in_progress_is_waited_for(site):
    """Ten requests at once on one connection for an entry nobody has filled, from a slow
    origin: one fills it, the others wait for the fill (the cache lock, as over HTTP/1.1
    and HTTP/2) and are answered from it; the origin is asked once."""
    origin = site["auth"]
    origin.route("/c/hot", body=b"H" * 5000, headers={"Cache-Control": "max-age=60"},
                 delay=0.5)
    rs = h3_client.get(site["port"], ["/c/hot"] * 10, cafile=site["ca"])
    assert all((r.status, bytes(r.body)) == (200, b"H" * 5000) for r in rs), \
        [(r.status, bytes(r.body)[:100]) for r in rs]
    statuses = sorted(r.header("x-cache-status") for r in rs)
    assert statuses == ["HIT"] * 9 + ["MISS"], statuses
    assert origin.count("/c/hot") == 1


def test_a_stale_entry_is_refreshed_in_the_background(site):
    """`stale-while-revalidate`: an HTTP/3 request that gets the stale copy starts its
    refresh (as over HTTP/1.1 and HTTP/2); requests meanwhile get the stale copy
    (UPDATING), then the new one is a HIT, with the origin asked once more."""
    origin = site["auth"]
    origin.route("/c/s", body=b"v1",
                 headers={"Cache-Control": "max-age=1, stale-while-revalidate=60"})

    def get():
        (r,) = h3_client.get(site["port"], ["/c/s"], cafile=site["ca"])
        assert r.status == 200, r.status
        return r.header("x-cache-status"), bytes(r.body)

    assert get() == ("MISS", b"v1")
    # v2 stays fresh for a minute: however slow the machine, the HIT below is v2's.
    # Slow, so the refresh outlives the connection whose request started it: the zone
    # finishes it (role/multiplex/refresh.rs).
    origin.route("/c/s", body=b"v2", headers={"Cache-Control": "max-age=60"}, delay=1.0)
    time.sleep(1.2)  # v1's max-age=1 passes (a time the test is about, not a wait)
    assert get() == ("STALE", b"v1")
    deadline = time.monotonic() + 20
    seen = []
    while (got := get()) != ("HIT", b"v2"):
        seen.append(got[0])
        assert got == ("UPDATING", b"v1"), (got, seen)
        assert time.monotonic() < deadline, f"the refresh was not stored: {seen}"
        time.sleep(0.02)
    assert origin.count("/c/s") == 2


def test_quic_go_client_gets_error_pages_and_a_fill_in_progress(site, quic_go, tmp_path):
    """quic-go's HTTP/3 client, certificate checked, at once on one connection: the error
    pages that re-serve at a proxying location, and eight requests for a cache entry whose
    fill is in progress (one fill, eight bodies byte-exact)."""
    origin = site["auth"]
    body = os.urandom(70_000)
    origin.route("/c/go", body=body, headers={"Cache-Control": "max-age=60"}, delay=0.5)
    url = f"https://localhost:{site['port']}"
    paths = ["/down/status/201", "/files/missing", "/icpt/500", "/deny/x"] + ["/c/go"] * 8
    p = subprocess.run([str(quic_go), "-get", "-ca", str(site["ca"]), "-out", str(tmp_path),
                        *[url + x for x in paths]], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    got = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert [g["status"] for g in got] == [201, 206, 207, 203] + [200] * 8, got
    for i, code in enumerate((201, 206, 207, 203)):
        assert (tmp_path / str(i)).read_bytes() == f"status {code} from up".encode()
    assert all((tmp_path / str(i)).read_bytes() == body for i in range(4, 12))
    assert origin.count("/c/go") == 1


def test_quic_go_client_meets_the_guards(site, quic_go, tmp_path):
    """quic-go's HTTP/3 client through the guards: `auth_request` lets a good token through
    to a proxied upload of 1 MiB (byte-exact upstream) and answers 401 to a bad one;
    `limit_req` delays but serves a burst."""
    from test_h3 import quic_go_get
    body = os.urandom(1 << 20)
    (tmp_path / "body").write_bytes(body)

    def run(paths, *opts):
        return quic_go_get(quic_go, site, tmp_path, paths, *opts)

    out, got = run(["/auth/upload"], "-post", str(tmp_path / "body"), "-H", "X-Token: good")
    assert [g["status"] for g in got] == [200], got
    seen = json.loads((out / "0").read_bytes())
    assert (seen["len"], seen["sha256"]) == (len(body), hashlib.sha256(body).hexdigest())
    _, got = run(["/auth/name"], "-H", "X-Token: bad")
    assert [g["status"] for g in got] == [401], got
    out, got = run(["/slow/name"] * 8)
    assert [g["status"] for g in got] == [200] * 8, got
    assert all((out / str(i)).read_bytes() == b"up" for i in range(8))
