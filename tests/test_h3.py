"""HTTP/3 over QUIC (issue 38): `quic = true` on a TLS server, and real HTTP/3 clients no one
here wrote (Python's aioquic, Debian's ngtcp2 client `gtlsclient`, quic-go's through
bench/h3load) against the real binary:
the locations a zone answers itself, byte-exact bodies, many concurrent streams on one
connection, the certificate chosen by SNI, Retry, migration, reload and upgrade, and the
guards that make a request wait. The other location kinds over HTTP/3 (gRPC, error pages
that re-serve, the cache's lock and refresh) are in test_h3_locations.py.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_h3.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import pytest

from conftest import free_port, metric_samples, runtime_section
from conftest import metric_total as total
from tls_pki import Pki
from upstream_server import UpstreamServer, pattern

try:
    import h3_client
except ImportError:
    # CI installs it (scripts/install-deps.sh): there a missing client is a failure.
    if os.environ.get("CI"):
        raise
    pytest.skip("aioquic is not installed (pip install aioquic, or scripts/install-deps.sh)",
                allow_module_level=True)

BIG = 1024 * 1024


@pytest.fixture(scope="module")
def site(ringx_module, engine, tmp_path_factory):
    d = tmp_path_factory.mktemp("h3")
    pki = Pki(d / "pki")
    a = pki.leaf("a", ["a.test", "localhost"])
    b = pki.leaf("b", ["b.test"])
    www = d / "www"
    www.mkdir()
    data = os.urandom(BIG)
    (www / "big.bin").write_bytes(data)
    (www / "index.html").write_text("<p>hello over h3</p>\n" * 200)
    p = free_port()
    up = UpstreamServer("up")
    log = d / "access.log"
    cfg = runtime_section(engine, zones=2) + f"""
[http]
gzip = {{ types = ["text/html"], min_length = 256 }}
access_log = "{log}"
[[server]]
listen = ["127.0.0.1:{p}"]
server_name = ["a.test", "localhost"]
tls = {{ cert = "{a[0]}", key = "{a[1]}" }}
quic = true
  [[server.location]]
  path = "/"
  root = "{www}"
  [[server.location]]
  path = "/r"
  return = {{ status = 200, body = "returned\\n" }}
  [[server.location]]
  path = "/moved"
  return = {{ status = 301, location = "https://a.test/there" }}
  [[server.location]]
  path = "/up/"
  proxy_pass = "http://{up.addr}/"
  [[server.location]]
  path = "/down/"
  proxy_pass = "http://127.0.0.1:9"
  [[server.location]]
  path = "/rw/"
  rewrite = [
    "^/rw/last/(.*)$ /tgt/$1?a=1 last",
    "^/rw/break/(.*)$ /rw/broken/$1 break",
    "^/rw/redir/(.*)$ /tgt/$1 redirect",
    "^/rw/perm/(.*)$ /tgt/$1? permanent",
    "^/rw/up/(.*)$ /up/echo?rw=$1 last",
  ]
  return = {{ status = 200, body = "rw $uri args=$args\\n" }}
  [[server.location]]
  path = "/tgt/"
  return = {{ status = 200, body = "target $uri args=$args\\n" }}
[[server]]
listen = ["127.0.0.1:{p}"]
server_name = ["b.test"]
tls = {{ cert = "{b[0]}", key = "{b[1]}" }}
quic = true
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "site b\\n" }}
"""
    r = ringx_module.make(cfg, engine=engine, name=f"h3-{engine}")
    yield dict(port=p, ca=pki.ca_path, data=data, ringx=r, up=up, log=log)
    up.close()


def test_return_and_files_byte_exact(site):
    rs = h3_client.get(site["port"], ["/r", "/big.bin", "/nope", "/moved"], cafile=site["ca"])
    assert [r.status for r in rs] == [200, 200, 404, 301]
    assert bytes(rs[0].body) == b"returned\n"
    assert hashlib.sha256(rs[1].body).digest() == hashlib.sha256(site["data"]).digest()
    assert rs[1].header("content-length") == str(BIG)
    assert rs[3].header("location") == "https://a.test/there"


def test_range_head_and_conditional(site):
    port = site["port"]
    (r,) = h3_client.get(port, ["/big.bin"], headers=[("range", "bytes=100-199")])
    assert r.status == 206 and bytes(r.body) == site["data"][100:200]
    (r,) = h3_client.get(port, ["/big.bin"], method="HEAD")
    assert r.status == 200 and r.header("content-length") == str(BIG) and not r.body
    etag = r.header("etag")
    (r,) = h3_client.get(port, ["/big.bin"], headers=[("if-none-match", etag)])
    assert r.status == 304 and not r.body


def test_rewrites_as_over_https(site):
    """`rewrite` with each flag over HTTP/3 answers as the same requests over HTTPS/1.1:
    `last` finds the new location (with the arguments it adds), `break` stays where it is,
    `redirect` and `permanent` send the client on, and a rewrite to a proxying location
    reaches the upstream with the rewritten target."""
    import http.client
    import ssl
    paths = ["/rw/last/x?b=2", "/rw/break/y", "/rw/redir/z", "/rw/perm/w?q=1", "/rw/up/v"]
    rs = h3_client.get(site["port"], paths, cafile=site["ca"])
    h3 = [(r.status, bytes(r.body), r.header("location")) for r in rs]
    ctx = ssl.create_default_context(cafile=str(site["ca"]))
    h1 = []
    for path in paths:
        c = http.client.HTTPSConnection("localhost", site["port"], context=ctx, timeout=10)
        c.request("GET", path)
        r = c.getresponse()
        h1.append((r.status, r.read(), r.getheader("location")))
        c.close()
    # The upstream's echo of the request differs in what each client sent (its Host).
    target = lambda r: (r[0], json.loads(r[1])["target"], r[2])  # noqa: E731
    assert h3[:4] == h1[:4] and target(h3[4]) == target(h1[4])
    assert h3[:2] == [(200, b"target /tgt/x args=a=1&b=2\n", None),
                      (200, b"rw /rw/broken/y args=\n", None)]
    assert [(st, loc.split("localhost", 1)[-1]) for st, _, loc in h3[2:4]] \
        == [(302, f":{site['port']}/tgt/z"), (301, f":{site['port']}/tgt/w")]
    assert h3[4][0] == 200 and json.loads(h3[4][1])["target"] == "/echo?rw=v", h3[4]


def test_the_access_log_names_http3(site):
    """The access log's request line says HTTP/3.0 for a request over QUIC."""
    import time
    (r,) = h3_client.get(site["port"], ["/r?logged-h3"], cafile=site["ca"])
    assert r.status == 200
    line = '"GET /r?logged-h3 HTTP/3.0" 200'
    deadline = time.monotonic() + 10
    text = ""
    while line not in text and time.monotonic() < deadline:
        time.sleep(0.05)
        text = site["log"].read_text() if site["log"].exists() else ""
    assert line in text, text[-500:]


def test_compressed_answer(site):
    (r,) = h3_client.get(site["port"], ["/index.html"], headers=[("accept-encoding", "gzip")])
    assert r.status == 200 and r.header("content-encoding") == "gzip"
    import gzip
    assert gzip.decompress(bytes(r.body)) == b"<p>hello over h3</p>\n" * 200


def test_many_concurrent_streams_on_one_connection(site):
    paths = [f"/r?{i}" for i in range(90)] + ["/big.bin"] * 5
    rs = h3_client.get(site["port"], paths)
    assert all(r.status == 200 for r in rs)
    assert all(bytes(r.body) == b"returned\n" for r in rs[:90])
    assert all(len(r.body) == BIG for r in rs[90:])


def test_certificate_chosen_by_sni(site):
    (r,) = h3_client.get(site["port"], ["/"], host="b.test", cafile=site["ca"])
    assert r.status == 200 and bytes(r.body) == b"site b\n"
    (r,) = h3_client.get(site["port"], ["/r"], host="a.test", cafile=site["ca"])
    assert bytes(r.body) == b"returned\n"


def test_proxied_responses_byte_exact(site):
    n = 1024 * 1024 + 7
    rs = h3_client.get(site["port"], [f"/up/big?n={n}", "/up/chunked?n=5&size=1000", "/up/x",
                                      "/r"])
    assert [r.status for r in rs] == [200, 200, 200, 200]
    assert bytes(rs[0].body) == pattern(n)
    assert len(rs[1].body) == 5000
    assert bytes(rs[2].body) == b"ok"
    assert rs[0].header("connection") is None  # HTTP/1.1's own fields stay behind


def test_proxied_upload_both_ways(site):
    body = os.urandom(1024 * 1024)
    (r,) = h3_client.get(site["port"], ["/up/upload"], method="POST", body=body,
                         headers=[("content-length", str(len(body)))])
    assert r.status == 200
    import json
    got = json.loads(bytes(r.body))
    assert got == {"len": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    # No length given: the upstream gets it chunked.
    (r,) = h3_client.get(site["port"], ["/up/upload"], method="POST", body=body[:5000])
    assert json.loads(bytes(r.body))["len"] == 5000


def test_proxied_failures_are_answered(site):
    # An upstream that refuses connections: 502, and the connection goes on.
    rs = h3_client.get(site["port"], ["/down/x", "/r", "/up/status/503"])
    assert [r.status for r in rs] == [502, 200, 503]


def test_ngtcp2_client_downloads(site, tmp_path):
    if shutil.which("gtlsclient") is None:
        if os.environ.get("CI"):
            pytest.fail("gtlsclient is missing: scripts/install-deps.sh installs ngtcp2-client")
        pytest.skip("ngtcp2's client is not installed (apt install ngtcp2-client)")
    out = tmp_path / "dl"
    out.mkdir()
    url = f"https://localhost:{site['port']}"
    # Debian's ngtcp2 0.12 client does not verify the server's certificate (it has no
    # option for a CA): the aioquic tests do.
    p = subprocess.run(["gtlsclient", "-q", "--exit-on-all-streams-close", "--download",
                        str(out), "localhost", str(site["port"]), f"{url}/big.bin",
                        f"{url}/r"],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert (out / "big.bin").read_bytes() == site["data"]
    assert (out / "r").read_bytes() == b"returned\n"


def ngtcp2(site, tmp_path, urls, *opts):
    """Debian's ngtcp2 client against `site`: its downloads by file name under a new
    directory, and what it printed."""
    if shutil.which("gtlsclient") is None:
        if os.environ.get("CI"):
            pytest.fail("gtlsclient is missing: scripts/install-deps.sh installs ngtcp2-client")
        pytest.skip("ngtcp2's client is not installed (apt install ngtcp2-client)")
    out = tmp_path / f"dl{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    url = f"https://localhost:{site['port']}"
    p = subprocess.run(["gtlsclient", "-q", "--exit-on-all-streams-close", "--download",
                        str(out), *opts, "localhost", str(site["port"]),
                        *[url + u for u in urls]],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    return out, p.stderr.decode() + p.stdout.decode()


def test_ngtcp2_client_uploads_proxies_and_opens_many_streams(site, tmp_path):
    """ngtcp2's client: 1 MiB POSTed through a proxying location (the upstream sees it
    byte-exact); a proxied chunked body, a redirect and a rewrite; and 40 concurrent
    streams for one file on one connection."""
    body = os.urandom(BIG)
    (tmp_path / "body").write_bytes(body)
    out, _ = ngtcp2(site, tmp_path, ["/up/upload"], "-m", "POST", "-d", str(tmp_path / "body"))
    seen = json.loads((out / "upload").read_bytes())
    assert (seen["len"], seen["sha256"]) == (BIG, hashlib.sha256(body).hexdigest())
    out, _ = ngtcp2(site, tmp_path, ["/up/chunked?n=7&size=1000", "/moved", "/rw/last/n"])
    assert (out / "chunked?n=7&size=1000").read_bytes() == pattern(1000) * 7
    assert (out / "n").read_bytes() == b"target /tgt/n args=a=1\n"
    import time
    line = '"GET /index.html?many HTTP/3.0" 200'
    logged = lambda: site["log"].read_text().count(line)  # noqa: E731
    before = logged()
    out, _ = ngtcp2(site, tmp_path, ["/index.html?many"], "-n", "40")
    assert (out / "index.html?many").read_bytes() == (b"<p>hello over h3</p>\n" * 200)
    deadline = time.monotonic() + 10
    while logged() < before + 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert logged() == before + 40


def test_quic_go_client_gets_every_kind(site, quic_go, tmp_path):
    """quic-go's HTTP/3 client, certificate checked: a 1 MiB file, a `return`, a redirect, a
    proxied response and a missing file, at once on one connection, bodies byte-exact."""
    url = f"https://localhost:{site['port']}"
    paths = ["/big.bin", "/r", "/moved", "/up/chunked?n=7&size=1000", "/nope"]
    p = subprocess.run([str(quic_go), "-get", "-ca", str(site["ca"]), "-out", str(tmp_path),
                        *[url + x for x in paths]], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    import json
    got = [json.loads(ln) for ln in p.stdout.splitlines()]
    assert [g["status"] for g in got] == [200, 200, 301, 200, 404], got
    assert (tmp_path / "0").read_bytes() == site["data"]
    assert (tmp_path / "1").read_bytes() == b"returned\n"
    assert (tmp_path / "3").read_bytes() == pattern(1000) * 7


def test_quic_go_client_gets_ranges_conditionals_and_compression(site, quic_go, tmp_path):
    """quic-go's HTTP/3 client with header fields of its own: a Range of the 1 MiB file
    (206, byte-exact), If-None-Match with the file's ETag (304, no body), and
    Accept-Encoding: gzip (a gzip body that decompresses to the page)."""
    import gzip

    def run(paths, *opts):
        return quic_go_get(quic_go, site, tmp_path, paths, *opts)

    out, (g,) = run(["/big.bin"], "-H", "Range: bytes=1000-2999")
    assert (g["status"], g["headers"]["content-range"]) == (206, f"bytes 1000-2999/{BIG}")
    assert (out / "0").read_bytes() == site["data"][1000:3000]
    _, (g,) = run(["/big.bin"])
    etag = g["headers"]["etag"]
    _, (g,) = run(["/big.bin"], "-H", f"If-None-Match: {etag}")
    assert (g["status"], g["bytes"]) == (304, 0), g
    out, (g,) = run(["/index.html"], "-H", "Accept-Encoding: gzip")
    assert (g["status"], g["headers"].get("content-encoding")) == (200, "gzip"), g
    assert gzip.decompress((out / "0").read_bytes()) == b"<p>hello over h3</p>\n" * 200


def quic_metrics(admin):
    return metric_samples(admin, "ringx_quic_", "ringx_http3_")


def quic_server(tmp_path, location, top="", runtime="", names=("localhost",)):
    """One zone, one QUIC server on 127.0.0.1 for `localhost` whose location "/" has the lines
    `location`, after the sections `top` (and `[runtime]` lines `runtime`); its certificate
    names `names`. Returns its port, the CA of its certificate, and the configuration."""
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("a", list(names))
    p = free_port()
    cfg = runtime_section(None, zones=1, extra=runtime) + top + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
tls = {{ cert = "{cert}", key = "{key}" }}
quic = true
  [[server.location]]
  path = "/"
""" + location
    return p, pki.ca_path, cfg


def downloads_in_flight(p, ca, up, n):
    """`n` HTTP/3 downloads of 1 MB from the slow upstream `up` (2 s each), one connection
    each, started and seen by the upstream: their threads, and the dict their responses go
    into by index."""
    import threading
    import time
    got = {}

    def fetch(i):
        got[i] = h3_client.get(p, ["/chunked?n=20&size=50000&ms=100"], cafile=ca, timeout=30)

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 15
    while len(up.requests) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(up.requests) == n, "the requests never reached the upstream"
    return threads, got


def finished_after_goaway(threads, got, srv) -> None:
    """Waits for the downloads of `downloads_in_flight` and checks that each came whole and
    byte-exact after a GOAWAY, which names the first request stream it will not serve: the
    one after stream 0."""
    for t in threads:
        t.join(30)
    want = pattern(50000) * 20
    assert [[(r.status, bytes(r.body) == want, r.goaway) for r in got.get(i, [])]
            for i in range(len(threads))] == [[(200, True, 4)]] * len(threads), srv.log()


def reload_with(srv, text: str) -> None:
    """Writes `text` as `srv`'s configuration, sends SIGHUP and waits until every zone has
    applied it."""
    import signal
    import time
    applied = srv.log().count("applied by every zone")
    srv.config_path.write_text(text)
    srv.signal(signal.SIGHUP)
    deadline = time.monotonic() + 15
    while srv.log().count("applied by every zone") == applied and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.log().count("applied by every zone") > applied, srv.log()


def quic_go_get(quic_go, site, tmp_path, paths, *opts):
    """quic-go's client (bench/h3load -get) for `paths` of `site` at once on one
    connection, with `opts`: the directory its bodies went to (named by index), and a dict a
    response (status, bytes, headers)."""
    import json
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    url = f"https://localhost:{site['port']}"
    p = subprocess.run([str(quic_go), "-get", "-ca", str(site["ca"]), "-out", str(out),
                        *opts, *[url + x for x in paths]],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    return out, [json.loads(ln) for ln in p.stdout.splitlines()]


def test_alt_svc_is_left_out_over_h3(ringx, tmp_path):
    """The server's own Alt-Svc goes out over TCP, not to a client already on HTTP/3, for
    an answer and a proxied response, a success or an error alike; an operator's other value goes out
    over both."""
    import http.client
    import ssl
    up = UpstreamServer("up")
    p, ca, cfg = quic_server(tmp_path, '  return = { status = 200, body = "x" }\n')
    cfg += f"""  [[server.location]]
  path = "/up"
  proxy_pass = "http://{up.addr}"
  [[server.location]]
  path = "/other"
  add_header = {{ "Alt-Svc" = 'h3="alt.example:443"' }}
  return = {{ status = 200, body = "y" }}
"""
    try:
        ringx.make(cfg)
        ctx = ssl.create_default_context(cafile=str(ca))
        for path in ("/", "/up", "/up/status/404"):
            c = http.client.HTTPSConnection("localhost", p, context=ctx, timeout=10)
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            c.close()
            assert r.getheader("alt-svc") == f'h3=":{p}"; ma=86400', (path, r.headers)
        rs = h3_client.get(p, ["/", "/up", "/up/status/404", "/other"], cafile=ca)
        assert [r.status for r in rs] == [200, 200, 404, 200]
        assert [r.header("alt-svc") for r in rs] == [None, None, None, 'h3="alt.example:443"']
    finally:
        up.close()


def test_retry_always_and_the_counters(ringx, tmp_path):
    admin = free_port()
    p, ca, cfg = quic_server(
        tmp_path, '  return = { status = 200, body = "after a retry\\n" }\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n[http]\nquic_retry = "always"\n')
    ringx.make(cfg)
    rs = h3_client.get(p, ["/", "/x"], cafile=ca)
    assert [(r.status, bytes(r.body)) for r in rs] == [(200, b"after a retry\n")] * 2
    m = quic_metrics(admin)
    assert total(m, "ringx_quic_handshakes_total", result="retry") == 1
    assert total(m, "ringx_quic_handshakes_total", result="accepted") == 1
    assert total(m, "ringx_http3_requests_total") == 2
    assert total(m, "ringx_quic_datagrams_total", direction="in") >= 3
    # The client's two first Initials (before and after the Retry) are padded to 1,200
    # bytes (RFC 9000 §14.1), and so is the server's Initial that answers the second.
    assert total(m, "ringx_quic_bytes_total", direction="in") >= 2400, m
    assert total(m, "ringx_quic_bytes_total", direction="out") >= 1200, m


def test_a_full_zone_refuses_a_new_connection(ringx, tmp_path):
    """`quic_max_connections = 2` (and no Retry): with two connections open, a third is
    refused with CONNECTION_REFUSED and counted; the two go on, and once one has closed a
    new connection is served."""
    import asyncio
    from aioquic.asyncio.client import connect
    admin = free_port()
    p, ca, cfg = quic_server(
        tmp_path, '  return = { status = 200, body = "in\\n" }\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n'
            '[http]\nquic_max_connections = 2\nquic_retry = "never"\n')
    ringx.make(cfg)

    async def ask(c):
        r = await asyncio.wait_for(c.request("GET", "localhost", "/"), 10)
        return r.status, bytes(r.body)

    async def three():
        conf = lambda: h3_client._config("localhost", str(ca))  # noqa: E731
        async with connect("127.0.0.1", p, configuration=conf(),
                           create_protocol=h3_client._Client) as a, \
                connect("127.0.0.1", p, configuration=conf(),
                        create_protocol=h3_client._Client) as b:
            assert [await ask(a), await ask(b)] == [(200, b"in\n")] * 2
            try:
                async with connect("127.0.0.1", p, configuration=conf(),
                                   create_protocol=h3_client._Client) as c:
                    refused = await ask(c)
            except ConnectionError as e:
                refused = e
            return refused, [await ask(a), await ask(b)]

    refused, after = asyncio.run(three())
    assert isinstance(refused, ConnectionError), refused
    assert after == [(200, b"in\n")] * 2
    m = quic_metrics(admin)
    assert total(m, "ringx_quic_handshakes_total", result="refused") == 1, m
    assert total(m, "ringx_quic_handshakes_total", result="accepted") == 2, m
    import time
    deadline = time.monotonic() + 10
    while total(quic_metrics(admin), "ringx_quic_connections") > 1 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    (r,) = h3_client.get(p, ["/"], cafile=ca)
    assert (r.status, bytes(r.body)) == (200, b"in\n")


@pytest.mark.parametrize("reload", [False, True], ids=["", "across-a-reload"])
def test_migrated_connections_stay_on_their_zone(ringx, tmp_path, reload):
    """Clients that move (a new port: a NAT rebinding; a new address with another of the
    server's connection IDs) keep their connection: with two zones the kernel's hash would
    hand about half of them to the zone without their state, but the reuseport program reads
    the zone from the connection ID. Each connection's requests are all counted on the zone
    that accepted it. So too when a reload (SIGHUP, a changed configuration) comes between
    a connection's first request and its move."""
    if os.geteuid() != 0:
        pytest.skip("steering by connection ID needs root (an eBPF reuseport program)")
    admin = free_port()
    p, ca, cfg = quic_server(
        tmp_path, '  return = { status = 200, body = "here\\n" }\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n')
    srv = ringx.make(cfg.replace("zones = 1", "zones = 2"))
    assert "steered to the zone their connection ID names" in srv.log(), srv.log()
    reloads = []

    def sighup():
        reloads.append(1)
        extra = f'  [[server.location]]\n  path = "/r{len(reloads)}"\n  return = {{ status = 204 }}\n'
        reload_with(srv, cfg.replace("zones = 1", "zones = 2") + extra)

    n = 12
    for i in range(n):
        ip, new_cid = ("127.0.0.1", False) if i % 2 else ("127.0.0.2", True)
        first, then, moved_to = h3_client.migrate(p, ["/a"], ["/b", "/c"], ca, ip, new_cid,
                                                  act=sighup if reload else None)
        assert moved_to == ip
        got = [(r.status, bytes(r.body)) for r in first + then]
        assert got == [(200, b"here\n")] * 3, (i, got, srv.log())
    m = quic_metrics(admin)
    accepted = [total(m, "ringx_quic_handshakes_total", result="accepted", zone=str(z))
                for z in (0, 1)]
    served = [total(m, "ringx_http3_requests_total", zone=str(z)) for z in (0, 1)]
    assert sum(accepted) == n, m
    assert served == [3 * a for a in accepted], (accepted, served)


def test_reload_lets_downloads_in_flight_finish(ringx, tmp_path):
    """SIGHUP while six HTTP/3 downloads of 1 MB come from a slow upstream (2 s): they finish
    byte-exact on the configuration they started under; a new connection gets the new
    configuration."""
    up = UpstreamServer("slow")
    loc = f'  proxy_pass = "http://{up.addr}"\n'
    p, ca, cfg = quic_server(tmp_path, loc)
    v = '  [[server.location]]\n  path = "/v"\n  return = {{ status = 200, body = "{}" }}\n'
    srv = ringx.make(cfg.replace("zones = 1", "zones = 2") + v.format("one"))
    try:
        threads, got = downloads_in_flight(p, ca, up, 6)
        reload_with(srv, cfg.replace("zones = 1", "zones = 2") + v.format("two"))
        (r,) = h3_client.get(p, ["/v"], cafile=ca)
        assert bytes(r.body) == b"two"
        for t in threads:
            t.join(30)
        want = pattern(50000) * 20
        assert [[(r.status, bytes(r.body) == want) for r in got.get(i, [])] for i in range(6)] \
            == [[(200, True)]] * 6, srv.log()
    finally:
        up.close()


def udp_sockets(port: int) -> int:
    """How many UDP sockets of this network namespace are bound to 127.0.0.1:`port`."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/udp") as f:
        return sum(line.split()[1] == want for line in f.readlines()[1:])


def udp_bound(port: int) -> bool:
    """Whether a UDP socket of this network namespace is bound to 127.0.0.1:`port`."""
    return udp_sockets(port) > 0


def test_reload_that_ends_http3_on_an_address_sends_goaway(ringx, tmp_path):
    """A reload that takes `quic = true` off the server while four HTTP/3 downloads of 1 MB come
    from a slow upstream (2 s), over two zones: each connection is sent GOAWAY and its
    download finishes byte-exact, as an HTTP/2 connection on a removed address does; HTTPS on
    the address goes on; once the downloads are done, the UDP sockets close and the
    connection gauge is back to zero."""
    import http.client
    import ssl
    import time
    up = UpstreamServer("slow")
    admin = free_port()
    loc = f'  proxy_pass = "http://{up.addr}"\n'
    p, ca, cfg = quic_server(tmp_path, loc, top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n')
    cfg = cfg.replace("zones = 1", "zones = 2")
    cfg += '  [[server.location]]\n  path = "/v"\n  return = { status = 200, body = "v" }\n'
    srv = ringx.make(cfg)
    try:
        assert udp_bound(p)
        threads, got = downloads_in_flight(p, ca, up, 4)
        reload_with(srv, cfg.replace("quic = true", "quic = false"))
        ctx = ssl.create_default_context(cafile=str(ca))
        c = http.client.HTTPSConnection("localhost", p, context=ctx, timeout=10)
        c.request("GET", "/v")
        r = c.getresponse()
        assert (r.status, r.read(), r.getheader("alt-svc")) == (200, b"v", None)
        c.close()
        finished_after_goaway(threads, got, srv)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and udp_bound(p):
            time.sleep(0.02)
        assert not udp_bound(p), "the UDP sockets stayed open after their connections"
        m = quic_metrics(admin)
        assert total(m, "ringx_quic_connections") == 0, m
        # Each closed once its response was acknowledged: by ringx (drained), or by the
        # client, whichever came first.
        closed = [total(m, "ringx_quic_closed_total", reason=r) for r in ("drained", "client")]
        assert sum(closed) == total(m, "ringx_quic_closed_total") == 4, m
    finally:
        up.close()


def test_http3_given_back_while_its_old_connections_drain(ringx, tmp_path):
    """`quic = true` taken off the server while four HTTP/3 downloads of 1 MB come from a slow
    upstream (2 s), over two zones, and put back before they end: the second reload applies,
    the draining connections move to the new sockets and finish byte-exact, a new
    connection is served by the new configuration, and the old sockets close, leaving one
    per zone."""
    import time
    up = UpstreamServer("slow")
    loc = f'  proxy_pass = "http://{up.addr}"\n'
    p, ca, cfg = quic_server(tmp_path, loc)
    cfg = cfg.replace("zones = 1", "zones = 2")
    v = '  [[server.location]]\n  path = "/v"\n  return = {{ status = 200, body = "{}" }}\n'
    srv = ringx.make(cfg + v.format("one"))
    try:
        assert udp_sockets(p) == 2
        threads, got = downloads_in_flight(p, ca, up, 4)
        reload_with(srv, (cfg + v.format("off")).replace("quic = true", "quic = false"))
        reload_with(srv, cfg + v.format("two"))
        (r,) = h3_client.get(p, ["/v"], cafile=ca)
        assert bytes(r.body) == b"two"
        finished_after_goaway(threads, got, srv)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and udp_sockets(p) != 2:
            time.sleep(0.02)
        assert udp_sockets(p) == 2, "the draining sockets stayed open beside the new ones"
        (r,) = h3_client.get(p, ["/v"], cafile=ca)
        assert bytes(r.body) == b"two"
    finally:
        up.close()


def test_a_connection_kept_through_a_reload_stays_with_its_server(ringx, tmp_path):
    """A reload that puts a new server on another address before the QUIC one (its address
    takes the first index in the routes): a connection opened before it is routed by the new
    configuration of its own server, not by the server that took its old index."""
    p, ca, cfg = quic_server(tmp_path, '  return = { status = 200, body = "one" }\n')
    srv = ringx.make(cfg)
    other = free_port()
    head, server = cfg.split("[[server]]", 1)
    moved = (head + f"""[[server]]
listen = ["127.0.0.1:{other}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "the other server" }}
[[server]]""" + server.replace('"one"', '"two"'))

    first, then = h3_client.around(p, ["/"], ["/"], lambda: reload_with(srv, moved), cafile=ca)
    assert [(r.status, bytes(r.body)) for r in first + then] == [(200, b"one"), (200, b"two")]
    assert then[0].goaway is None


def test_reload_refuses_a_new_quic_host(ringx, tmp_path):
    """`[http] quic_host` is in every connection ID a QUIC endpoint issues, and a reload keeps
    the endpoint: a reload that changes it fails with the reason and the way out, and changes
    nothing; the same reload without the change applies."""
    import signal
    ret = '  return = {{ status = 200, body = "{}" }}\n'
    p, ca, cfg = quic_server(tmp_path, ret.format("one"), top="[http]\nquic_host = 3\n")
    srv = ringx.make(cfg)
    assert bytes(h3_client.get(p, ["/"], cafile=ca)[0].body) == b"one"
    srv.config_path.write_text(cfg.replace("quic_host = 3", "quic_host = 4")
                               .replace('"one"', '"two"'))
    srv.signal(signal.SIGHUP)
    line = [ln for ln in srv.wait_log("reload failed").splitlines() if "reload failed" in ln][0]
    assert f"quic_host changed from 3 to 4: the QUIC endpoint on 127.0.0.1:{p}" in line, line
    assert "restart ringx" in line, line
    assert bytes(h3_client.get(p, ["/"], cafile=ca)[0].body) == b"one"
    reload_with(srv, cfg.replace('"one"', '"two"'))
    assert bytes(h3_client.get(p, ["/"], cafile=ca)[0].body) == b"two"


def test_binary_upgrade_lets_downloads_in_flight_finish(ringx, tmp_path):
    """SIGUSR2 while six HTTP/3 downloads of 1 MB come from a slow upstream (2 s): the new
    process binds its
    own QUIC sockets beside the old ones and serves new connections, while every packet of
    the old connections (their acknowledgements, the rest of the responses) still reaches
    the old process, which sends each GOAWAY, finishes them and exits. The connection IDs
    name the process's generation as well as the zone, and the new process takes over the
    steering array. The configuration changed on disk before the upgrade: new connections
    get the new one."""
    if os.geteuid() != 0:
        pytest.skip("steering by connection ID needs root (an eBPF reuseport program)")
    import signal
    import time
    up = UpstreamServer("slow")
    pid_file = tmp_path / "ringx.pid"
    p, ca, cfg = quic_server(tmp_path, f'  proxy_pass = "http://{up.addr}"\n',
                             runtime=f'pid_file = "{pid_file}"\n')
    cfg = cfg.replace("zones = 1", "zones = 2")
    v = '  [[server.location]]\n  path = "/v"\n  return = {{ status = 200, body = "{}" }}\n'
    srv = ringx.make(cfg + v.format("old"))
    try:
        threads, got = downloads_in_flight(p, ca, up, 6)
        srv.config_path.write_text(cfg + v.format("new"))
        old = srv.pid
        os.kill(old, signal.SIGUSR2)
        deadline = time.monotonic() + 15
        while pid_file.read_text().strip() == str(old) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pid_file.read_text().strip() != str(old), srv.log()
        rs = h3_client.get(p, ["/slow?ms=0", "/v"], cafile=ca)
        assert [(r.status, bytes(r.body)) for r in rs] == [(200, b"slow"), (200, b"new")], \
            srv.log()
        for t in threads:
            t.join(30)
        want = pattern(50000) * 20
        # GOAWAY 4: the old process answers the request on stream 0 and no other.
        assert [[(r.status, bytes(r.body) == want, r.goaway) for r in got.get(i, [])]
                for i in range(6)] == [[(200, True, 4)]] * 6, srv.log()
        assert srv.wait_exit(20) == 0, srv.log()
        assert "took over the QUIC steering" in srv.log(), srv.log()
    finally:
        up.close()
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def test_sigterm_lets_an_inflight_request_finish(ringx, tmp_path):
    import signal
    import threading
    import time
    up = UpstreamServer("slow")
    p, _, cfg = quic_server(tmp_path, f'  proxy_pass = "http://{up.addr}"\n')
    try:
        srv = ringx.make(cfg)
        got = {}
        t = threading.Thread(target=lambda: got.update(r=h3_client.get(p, ["/slow?ms=1500"])))
        t.start()
        deadline = time.monotonic() + 10
        while not up.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert up.requests, "the request never reached the upstream"
        srv.signal(signal.SIGTERM)  # while the upstream holds the response
        t.join(15)
        (r,) = got["r"]
        assert (r.status, bytes(r.body)) == (200, b"slow")
        rc = srv.wait_exit(10)
        assert rc == 0, f"exit status {rc} (None: still running)\n{srv.log()}"
    finally:
        up.close()


def test_limit_req_delays_over_h3(ringx, tmp_path):
    """Without nodelay, requests within the burst are answered, spaced at the rate: each
    waits out its delay (the stream is parked and looked at again from the zone's timer)."""
    import time
    p, _, cfg = quic_server(
        tmp_path,
        '  limit_req = { zone = "ip", burst = 10 }\n'
        '  return = { status = 200, body = "in time\\n" }\n',
        top='[[limit_req_zone]]\nname = "ip"\nkey = "$remote_addr"\nrate = "20r/s"\n')
    ringx.make(cfg)
    t0 = time.monotonic()
    rs = h3_client.get(p, [f"/?{i}" for i in range(6)])
    took = time.monotonic() - t0
    assert [(r.status, bytes(r.body)) for r in rs] == [(200, b"in time\n")] * 6
    # Five intervals of 50 ms after the first: never sooner (load can only make it later).
    assert took >= 0.2, took


def test_auth_request_over_h3(ringx, tmp_path):
    """auth_request decides over HTTP/3 as over HTTP/1: the subrequest's 2xx lets the request
    through, its 401 (with the challenge) and 403 are the answer, an unreachable service 500."""
    from origin_server import Origin, token_decision
    o = Origin()
    try:
        o.route("/auth", fn=token_decision)
        p, _, cfg = quic_server(
            tmp_path,
            f'  auth_request = {{ proxy_pass = "http://{o.addr}", uri = "/auth" }}\n'
            '  return = { status = 200, body = "let in\\n" }\n')
        ringx.make(cfg)
        (r,) = h3_client.get(p, ["/x"], headers=[("x-token", "good")])
        assert (r.status, bytes(r.body)) == (200, b"let in\n")
        (r,) = h3_client.get(p, ["/x"], headers=[("x-token", "bad")])
        assert r.status == 401 and r.header("www-authenticate") == 'Bearer realm="api"'
        (r,) = h3_client.get(p, ["/x"], headers=[("x-token", "banned")])
        assert r.status == 403
        assert o.count("/auth") == 3
        o.close()
        (r,) = h3_client.get(p, ["/x"], headers=[("x-token", "good")])
        assert r.status == 500, "an unreachable auth service"
    finally:
        o.close()


def test_auth_basic_verified_on_the_pool_over_h3(ringx, tmp_path):
    """A bcrypt password is verified on the auth pool, off the zone: the HTTP/3 request waits
    for the answer (parked), then gets 200 for the right password, 401 for a wrong one."""
    import base64
    import urllib.request
    users = tmp_path / "users"
    # `htpasswd -nbB -C 4 bob secret`: bcrypt goes to the pool whatever its cost; cost 4
    # keeps each verification near a millisecond, so a loaded machine does not starve it.
    users.write_text("bob:$2y$04$PSP8EQ/tSO3IOd.ESMCCZOSVl7MNmbPFnP892W9X4fHnLGQe1p.RK\n")
    admin = free_port()
    p, _, cfg = quic_server(
        tmp_path,
        f'  auth_basic = {{ realm = "team", user_file = "{users}" }}\n'
        '  return = { status = 200, body = "in\\n" }\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n', runtime="auth_threads = 2\n")
    ringx.make(cfg)

    def basic(pw):
        return [("authorization", "Basic " + base64.b64encode(f"bob:{pw}".encode()).decode())]
    (r,) = h3_client.get(p, ["/"], headers=basic("secret"))
    assert (r.status, bytes(r.body)) == (200, b"in\n")
    (r,) = h3_client.get(p, ["/"], headers=basic("wrong"))
    assert r.status == 401 and r.header("www-authenticate").startswith('Basic realm="team"')
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as m:
        text = m.read().decode()
    assert 'ringx_auth_verifications_total{zone="0",where="pool"} 2' in text, \
        [ln for ln in text.splitlines() if "auth_verif" in ln]
