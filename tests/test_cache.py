"""The proxy cache end to end: the real binary in front of a scriptable origin
(origin_server.py). Miss then hit, expiry, a stale copy while the origin is down, 100
parallel misses collapsed into one origin request across two zones, purge through the
admin port, keys holding CR/LF, size bounds with least-recently-used eviction, and a
restart that keeps the disk tier."""

from __future__ import annotations

import http.client
import re
import threading
import time
import urllib.parse

import pytest

from conftest import free_port, runtime_section
from origin_server import Origin


def config(port, admin, origin, cache_dir, pc="", path_extra="", zones=1, http_extra=""):
    sep = ", " if pc else ""
    return (runtime_section(None, zones) + f"""
[http]
access_log = "{cache_dir}/access.log"
access_log_format = "json"
{http_extra}
[admin]
listen = "127.0.0.1:{admin}"
[[proxy_cache_path]]
name = "c"
path = "{cache_dir}/cache"
{path_extra}
[[upstream]]
name = "origin"
servers = ["{origin.addr}"]
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "origin"
  proxy_cache = {{ zone = "c"{sep}{pc} }}
""")


def get(port, path, headers=None, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.getheader("X-Cache-Status"), body, r


def admin(port, method, target):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, target)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.close()


@pytest.fixture
def dirs(tmp_path):
    return tmp_path


def test_miss_hit_expiry_and_log(ringx, origin, dirs):
    port, ap = free_port(), free_port()
    origin.route("/a", body=b"A" * 4096, headers={"Cache-Control": "max-age=1", "Content-Type": "text/plain"})
    r = ringx.make(config(port, ap, origin, dirs))
    st, cs, body, resp = get(port, "/a")
    assert (st, cs, body) == (200, "MISS", b"A" * 4096)
    st, cs, body, resp = get(port, "/a")
    assert (st, cs, len(body)) == (200, "HIT", 4096)
    assert resp.getheader("Age") is not None
    assert origin.count("/a") == 1
    time.sleep(1.3)
    st, cs, body, _ = get(port, "/a")
    assert (st, cs) == (200, "EXPIRED")
    assert origin.count("/a") == 2
    # The access log carries the cache status (flushed within a second).
    time.sleep(1.2)
    log = (dirs / "access.log").read_text()
    assert '"upstream_cache_status":"MISS"' in log and '"upstream_cache_status":"HIT"' in log, log


def test_stale_copy_while_the_origin_is_down(ringx, origin, dirs):
    port, ap = free_port(), free_port()
    origin.route("/s", body=b"kept", headers={"Cache-Control": "max-age=1"})
    ringx.make(config(port, ap, origin, dirs, pc='use_stale = ["error", "timeout"]'))
    assert get(port, "/s")[1] == "MISS"
    origin.close()
    time.sleep(1.2)
    st, cs, body, _ = get(port, "/s")
    assert (st, cs, body) == (200, "STALE", b"kept")
    st, cs, body, _ = get(port, "/other")
    assert st == 502, "nothing stale to stand in"


def test_stale_if_error_from_the_response(ringx, origin, dirs):
    port, ap = free_port(), free_port()
    origin.route("/s", body=b"v1", headers={"Cache-Control": "max-age=1, stale-if-error=60"})
    ringx.make(config(port, ap, origin, dirs))
    get(port, "/s")
    origin.route("/s", status=500, body=b"broken")
    time.sleep(1.2)
    # RFC 5861: a 500 is an error that stale-if-error covers, as is a dead origin; a 404 is
    # an answer, passed on.
    st, cs, body, _ = get(port, "/s")
    assert (st, cs, body) == (200, "STALE", b"v1")
    origin.route("/s", status=404, body=b"gone")
    assert get(port, "/s")[0] == 404
    origin.close()
    st, cs, body, _ = get(port, "/s")
    assert (st, cs, body) == (200, "STALE", b"v1")


def test_one_origin_request_for_100_parallel_misses_across_zones(ringx, origin, dirs):
    port, ap = free_port(), free_port()
    origin.route("/hot", body=b"H" * 4096, headers={"Cache-Control": "max-age=60"}, delay=0.5)
    ringx.make(config(port, ap, origin, dirs, zones=2,
                      http_extra=""))
    results, start = [], threading.Barrier(100)

    def one():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        c.connect()
        start.wait()
        c.request("GET", "/hot")
        r = c.getresponse()
        results.append((r.status, r.getheader("X-Cache-Status"), len(r.read())))
        c.close()

    ts = [threading.Thread(target=one) for _ in range(100)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert origin.count("/hot") == 1, origin.requests()
    assert len(results) == 100 and all(s == 200 and n == 4096 for s, _, n in results), results
    statuses = sorted(cs for _, cs, _ in results)
    assert statuses.count("MISS") == 1 and statuses.count("HIT") == 99, statuses
    # Both zones answered hits: the waiters of the zone that did not fetch were collapsed too.
    m = admin(ap, "GET", "/metrics")[1].decode()
    hits = [int(v) for v in re.findall(r'ringx_cache_requests_total\{zone="\d",status="HIT"\} (\d+)', m)]
    assert len(hits) == 2 and all(h > 0 for h in hits), (hits, m)


def test_purge_through_the_admin_port_and_keys_with_cr_lf(ringx, origin, dirs):
    port, ap = free_port(), free_port()
    origin.route("*", body=b"x", headers={"Cache-Control": "max-age=60"})
    ringx.make(config(port, ap, origin, dirs, pc='key = "$uri"'))
    assert get(port, "/p")[1] == "MISS"
    assert get(port, "/p")[1] == "HIT"
    assert admin(ap, "PURGE", "/cache/c?key=%2Fp")[0] == 200
    assert admin(ap, "PURGE", "/cache/c?key=%2Fp")[0] == 404
    assert get(port, "/p")[1] == "MISS"
    # $uri decodes %0D%0A: the key holds CR LF, which the disk format and purge keep intact.
    assert get(port, "/a%0D%0Ab")[1] == "MISS"
    assert get(port, "/a%0D%0Ab")[1] == "HIT"
    assert get(port, "/a%0Db")[1] == "MISS", "a key with CR alone is another key"
    assert admin(ap, "PURGE", "/cache/c?key=" + urllib.parse.quote("/a\r\nb", safe=""))[0] == 200
    assert get(port, "/a%0D%0Ab")[1] == "MISS"
    assert get(port, "/a%0Db")[1] == "HIT"
    assert admin(ap, "PURGE", "/cache/nope?key=x")[0] == 404
    st, body = admin(ap, "PURGE", "/cache/c")
    assert st == 200 and b"purged" in body
    assert get(port, "/a%0Db")[1] == "MISS"


def test_lru_eviction_keeps_the_disk_bound(ringx, origin, dirs):
    port, ap = free_port(), free_port()
    big = b"B" * (300 * 1024)
    origin.route("*", body=big, headers={"Cache-Control": "max-age=600"})
    ringx.make(config(port, ap, origin, dirs,
                      path_extra='max_size = "1m"\nmemory_size = "256k"\nmax_object = "512k"'))
    for i in range(6):
        assert get(port, f"/o{i}")[1] == "MISS"
        time.sleep(0.2)  # the writer thread stores each before the next
    m = admin(ap, "GET", "/metrics")[1].decode()
    disk = int(re.search(r'ringx_cache_bytes\{cache="c",tier="disk"\} (\d+)', m).group(1))
    assert 0 < disk <= 1 << 20, m
    assert get(port, "/o5")[1] == "HIT", "the most recent entry stays"
    assert get(port, "/o0")[1] == "MISS", "the least recently used went"
    time.sleep(0.5)  # the writer thread removes evicted files
    files = [p for p in (dirs / "cache").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= (1 << 20) + 4096, files


def test_a_restart_keeps_the_disk_tier(ringx, origin, dirs):
    port, ap = free_port(), free_port()
    origin.route("/keep", body=b"K" * 100_000, headers={"Cache-Control": "max-age=600"})
    r = ringx.make(config(port, ap, origin, dirs))
    assert get(port, "/keep")[1] == "MISS"
    time.sleep(0.3)
    r.stop()
    # New ports: the killed server's io_uring may hold its sockets a moment longer.
    port, ap = free_port(), free_port()
    r2 = ringx.make(config(port, ap, origin, dirs), name="again")
    r2.wait_log("entries loaded from", timeout=5)
    st, cs, body, _ = get(port, "/keep")
    assert (st, cs, body) == (200, "HIT", b"K" * 100_000)
    assert origin.count("/keep") == 1


def test_check_reports_bad_cache_directives(ringx_bin, tmp_path):
    import subprocess
    bad = tmp_path / "bad.toml"
    bad.write_text(f"""
[[proxy_cache_path]]
name = "c"
path = "{tmp_path}/c"
[[server]]
listen = ["127.0.0.1:1"]
  [[server.location]]
  path = "/"
  proxy_pass = "http://127.0.0.1:2"
  proxy_cache = {{ zone = "c", use_stale = ["sometimes"] }}
""")
    out = subprocess.run([ringx_bin, "check", "-c", str(bad)], capture_output=True, text=True)
    assert out.returncode != 0
    assert re.search(r"bad\.toml:10:\d+: .*use_stale \"sometimes\"", out.stderr + out.stdout), out
