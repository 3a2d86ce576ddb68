"""HTTP/2 streams get what HTTP/1.1 requests get from the locations that make a request wait
or answer from elsewhere (issue 22): the proxy cache (hit, miss, Vary, stale copies,
collapsed misses, the background refresh, the cache status field and log field, entries
shared with HTTP/1.1 traffic), `auth_request` (allow, 401/403 passed on, an unreachable auth
service a 500), and a `limit_req` delay (the stream waits, at the rate; the connection's
other streams do not). Real clients: Python h2 driving streams on one connection, curl
--http2-prior-knowledge, http.client for HTTP/1.1.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_h2_parity.py
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import subprocess
import time

import pytest

from conftest import free_port, runtime_section
from origin_server import Origin
from upstream_server import UpstreamServer

h2 = pytest.importorskip("h2", reason="Python h2 is not installed (tests/requirements.txt)")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402


class Answer:
    def __init__(self):
        self.status, self.headers, self.body, self.done = 0, {}, bytearray(), None


def h2_streams(port: int, requests: list[tuple], timeout: float = 30) -> list[Answer]:
    """Sends every request at once on one h2c connection ((path, extra fields) for a GET, or
    (path, fields, body) for a POST, the body sent as the windows allow); returns each one's
    status, fields, body and when it ended (monotonic), in request order."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    c = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True,
                                                                    header_encoding="utf-8"))
    c.initiate_connection()
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
    c.increment_flow_control_window(1 << 30)
    out: dict[int, Answer] = {}
    pending: dict[int, bytes] = {}
    for i, (path, extra, *body) in enumerate(requests):
        sid = 1 + 2 * i
        method = "POST" if body else "GET"
        pseudo = {":method": method, ":scheme": "http", ":path": path, ":authority": "a.test"}
        pseudo.update((k, v) for k, v in extra.items() if k.startswith(":"))
        fields = list(pseudo.items()) + [(k, v) for k, v in extra.items() if not k.startswith(":")]
        c.send_headers(sid, fields, end_stream=not body)
        if body:
            pending[sid] = body[0]
        out[sid] = Answer()

    def send_bodies():
        for sid in list(pending):
            rest = pending[sid]
            while rest:
                n = min(len(rest), c.local_flow_control_window(sid), c.max_outbound_frame_size)
                if n <= 0:
                    break
                c.send_data(sid, rest[:n])
                rest = rest[n:]
            pending[sid] = rest
            if not rest:
                c.end_stream(sid)
                del pending[sid]

    send_bodies()
    s.sendall(c.data_to_send())
    deadline = time.monotonic() + timeout
    try:
        while any(a.done is None for a in out.values()) and time.monotonic() < deadline:
            data = s.recv(1 << 20)
            if not data:
                break
            now = time.monotonic()
            try:
                evs = c.receive_data(data)
            except Exception as e:
                raise AssertionError(f"{e}: {[(sid, a.status, a.headers, len(a.body), a.done) for sid, a in out.items()]}")
            for ev in evs:
                if isinstance(ev, h2.events.ResponseReceived):
                    h = dict(ev.headers)
                    out[ev.stream_id].status = int(h[":status"])
                    out[ev.stream_id].headers = h
                elif isinstance(ev, h2.events.DataReceived):
                    out[ev.stream_id].body += ev.data
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                    out[ev.stream_id].done = now
            send_bodies()
            s.sendall(c.data_to_send())
    finally:
        s.close()
    left = [sid for sid, a in out.items() if a.done is None]
    assert not left, f"streams left unanswered: {left}"
    return [out[1 + 2 * i] for i in range(len(requests))]


def h2_get(port: int, path: str, **fields) -> Answer:
    return h2_streams(port, [(path, {k.replace("_", "-").lower(): v for k, v in fields.items()})])[0]


def h1_get(port: int, path: str, headers: dict | None = None) -> tuple[int, str | None, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    # The host the h2 streams name (`:authority`): the cache key has it.
    c.request("GET", path, headers={"Host": "a.test", **(headers or {})})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.getheader("X-Cache-Status"), body


def cache_config(port, admin, origin, d, pc="", path_extra=""):
    sep = ", " if pc else ""
    return runtime_section(None, 1) + f"""
[http]
access_log = "{d}/access.log"
access_log_format = "json"
[admin]
listen = "127.0.0.1:{admin}"
[[proxy_cache_path]]
name = "c"
path = "{d}/cache"
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
  [[server.location]]
  path = "/open"
  return = {{ status = 200, body = "open\\n" }}
"""


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.close()


def log_lines(path, tries=30):
    """The access log's JSON lines (it is flushed within a second)."""
    for _ in range(tries):
        if path.exists() and path.read_text().strip():
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            if lines:
                return lines
        time.sleep(0.1)
    return []


def test_h2_streams_use_the_cache_and_share_its_entries_with_http1(ringx, origin, tmp_path):
    port, ap = free_port(), free_port()
    hdrs = {"Cache-Control": "max-age=60", "Content-Type": "text/plain", "ETag": '"v1"'}
    origin.route("/a", body=b"A" * 4096, headers=hdrs)
    origin.route("/b", body=b"B" * 100, headers=hdrs)
    ringx.make(cache_config(port, ap, origin, tmp_path))
    a = h2_get(port, "/a")
    assert (a.status, a.headers.get("x-cache-status"), bytes(a.body)) == (200, "MISS", b"A" * 4096)
    a = h2_get(port, "/a")
    assert (a.status, a.headers.get("x-cache-status"), bytes(a.body)) == (200, "HIT", b"A" * 4096)
    assert "age" in a.headers and a.headers["content-length"] == "4096"
    # HTTP/1.1 finds the entry an h2 stream filled, and the other way round.
    assert h1_get(port, "/a") == (200, "HIT", b"A" * 4096)
    assert h1_get(port, "/b") == (200, "MISS", b"B" * 100)
    b = h2_get(port, "/b")
    assert (b.status, b.headers.get("x-cache-status"), bytes(b.body)) == (200, "HIT", b"B" * 100)
    # A validator that matches the entry: 304 from the cache, no body.
    nm = h2_get(port, "/a", if_none_match='"v1"')
    assert (nm.status, bytes(nm.body)) == (304, b""), nm.headers
    # HEAD from the cache: the length, no body.
    assert origin.count("/a") == 1 and origin.count("/b") == 1, origin.requests()
    # curl over h2c sees the same.
    r = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-H", "Host: a.test", "-D", "-", "-o", "/dev/null",
                        f"http://127.0.0.1:{port}/a"], capture_output=True, timeout=20)
    head = r.stdout.decode().lower()
    assert head.startswith("http/2 200") and "x-cache-status: hit" in head, head
    lines = [x for x in log_lines(tmp_path / "access.log") if "HTTP/2.0" in x.get("request", "")]
    got = [(x["request"], x.get("upstream_cache_status")) for x in lines]
    assert ("GET /a HTTP/2.0", "MISS") in got and ("GET /b HTTP/2.0", "HIT") in got, got


def test_h2_hit_from_the_disk_tier_and_head(ringx, origin, tmp_path):
    """An entry larger than the memory tier is answered from its file (sent by the stream's
    file pieces); HEAD from the cache has the length and no body."""
    port, ap = free_port(), free_port()
    big = bytes(range(256)) * 1200  # 300 KB: more than a window and the memory tier
    origin.route("/big", body=big, headers={"Cache-Control": "max-age=60"})
    ringx.make(cache_config(port, ap, origin, tmp_path, path_extra='memory_size = "64k"'))
    a = h2_get(port, "/big")
    assert (a.headers["x-cache-status"], bytes(a.body)) == ("MISS", big)
    time.sleep(0.3)  # written to disk after the response
    a = h2_get(port, "/big")
    assert (a.headers["x-cache-status"], len(a.body), bytes(a.body) == big) == ("HIT", len(big), True)
    got = h2_streams(port, [("/big", {}), ("/big", {})])
    assert all(bytes(g.body) == big for g in got)
    head = h2_streams(port, [("/big", {":method": "HEAD"})])[0]
    assert head.status == 200 and head.headers["content-length"] == str(len(big)) and not head.body
    assert origin.count("/big") == 1


def test_h2_cache_keeps_variants_by_vary(ringx, origin, tmp_path):
    port, ap = free_port(), free_port()

    def by_lang(method, target, headers):
        lang = headers.get("X-Lang", "none")
        return {"body": f"in {lang}".encode(),
                "headers": {"Cache-Control": "max-age=60", "Vary": "X-Lang"}}
    origin.route("/v", fn=by_lang)
    ringx.make(cache_config(port, ap, origin, tmp_path))
    en = h2_get(port, "/v", x_lang="en")
    fr = h2_get(port, "/v", x_lang="fr")
    assert (en.headers["x-cache-status"], bytes(en.body)) == ("MISS", b"in en")
    assert (fr.headers["x-cache-status"], bytes(fr.body)) == ("MISS", b"in fr")
    en = h2_get(port, "/v", x_lang="en")
    assert (en.headers["x-cache-status"], bytes(en.body)) == ("HIT", b"in en")
    assert h1_get(port, "/v", {"X-Lang": "fr"}) == (200, "HIT", b"in fr")
    assert origin.count("/v") == 2


def test_h2_misses_collapse_and_stale_copies_stand_in(ringx, origin, tmp_path):
    port, ap = free_port(), free_port()
    origin.route("/hot", body=b"H" * 5000, headers={"Cache-Control": "max-age=1"}, delay=0.5)
    ringx.make(cache_config(port, ap, origin, tmp_path, pc='use_stale = ["error", "timeout"]'))
    t0 = time.monotonic()
    got = h2_streams(port, [("/hot", {})] * 20 + [("/open", {})])
    assert origin.count("/hot") == 1, origin.requests()
    hot = got[:20]
    assert all(a.status == 200 and bytes(a.body) == b"H" * 5000 for a in hot)
    statuses = sorted(a.headers["x-cache-status"] for a in hot)
    assert statuses.count("MISS") == 1 and statuses.count("HIT") == 19, statuses
    # The streams waiting for the fill did not hold up the connection's other stream.
    assert got[20].done - t0 < 0.4 and bytes(got[20].body) == b"open\n", got[20].done - t0
    origin.close()
    time.sleep(1.2)
    a = h2_get(port, "/hot")
    assert (a.status, a.headers.get("x-cache-status"), bytes(a.body)) == (200, "STALE", b"H" * 5000)
    assert h2_get(port, "/cold").status == 502, "nothing stale to stand in"


def test_h2_stale_while_revalidate_refreshes_in_the_background(ringx, origin, tmp_path):
    port, ap = free_port(), free_port()
    cc = {"Cache-Control": "max-age=1, stale-while-revalidate=60", "ETag": '"v1"'}
    origin.route("/s", body=b"v1", headers=cc)
    ringx.make(cache_config(port, ap, origin, tmp_path))
    assert h2_get(port, "/s").headers["x-cache-status"] == "MISS"
    # v2 stays fresh for a minute: however slow the machine, the HIT below is v2's.
    origin.route("/s", body=b"v2",
                 headers={"Cache-Control": "max-age=60", "ETag": '"v2"'})
    time.sleep(1.2)  # v1's max-age=1 passes (a time the test is about, not a wait)
    a = h2_get(port, "/s")
    assert (a.headers["x-cache-status"], bytes(a.body)) == ("STALE", b"v1")
    # The refresh goes on after the answer. Until it is stored, requests get the stale copy
    # (UPDATING: the refresh in flight holds the entry's lock, so no second one starts);
    # then v2 is a HIT. Waited for by its condition: seeing the origin's count reach 2 is
    # not enough, the refresh's response may still be on its way into the cache.
    deadline = time.monotonic() + 20
    seen = []
    while True:
        a = h2_get(port, "/s")
        got = (a.headers["x-cache-status"], bytes(a.body))
        if got == ("HIT", b"v2"):
            break
        seen.append(got[0])
        assert got in {("UPDATING", b"v1"), ("STALE", b"v1")}, got
        assert time.monotonic() < deadline, f"the refresh was not stored: {got}"
        time.sleep(0.01)
    assert origin.count("/s") == 2, seen


@pytest.mark.parametrize("proto", ["h2", "http1"])
def test_a_refresh_outlives_the_client_that_started_it(ringx, origin, tmp_path, proto):
    """The client that got the stale answer closes at once, while its refresh still waits
    for the origin (0.5 s): the refresh ends in the cache all the same. Before, the closing
    connection took its refresh with it: the entry stayed locked until the lock aged (5 s),
    then the next request was STALE and sent a second refresh."""
    port, ap = free_port(), free_port()
    cc = {"Cache-Control": "max-age=1, stale-while-revalidate=60", "ETag": '"v1"'}
    origin.route("/r", body=b"v1", headers=cc)
    ringx.make(cache_config(port, ap, origin, tmp_path))
    get = (lambda: h2_get(port, "/r")) if proto == "h2" else None

    def status_body():
        if proto == "h2":
            a = get()
            return a.headers["x-cache-status"], bytes(a.body)
        st, cs, body = h1_get(port, "/r")
        return cs, body

    assert status_body()[0] == "MISS"
    origin.route("/r", body=b"v2", headers={"Cache-Control": "max-age=60", "ETag": '"v2"'},
                 delay=0.5)
    time.sleep(1.2)  # v1's max-age=1 passes
    assert status_body() == ("STALE", b"v1")  # and that client is gone
    deadline = time.monotonic() + 20
    seen = []
    while True:
        got = status_body()
        if got == ("HIT", b"v2"):
            break
        seen.append(got[0])
        assert got == ("UPDATING", b"v1"), (got, seen)
        assert time.monotonic() < deadline, f"the refresh was not stored: {seen}"
        time.sleep(0.02)
    assert origin.count("/r") == 2


def guard_config(port, locations, top=""):
    return (runtime_section(None, 1) + "[http]\n" + top +
            f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
            '  [[server.location]]\n  path = "/"\n  return = { status = 200, body = "open\\n" }\n'
            f'  [[server.location]]\n  path = "/g/"\n  return = {{ status = 200, body = "in\\n" }}\n'
            f'  {locations}\n')


def test_h2_auth_request_allows_denies_and_fails_as_http1(ringx):
    o = Origin()
    try:
        def decide(method, target, headers):
            tok = headers.get("X-Token")
            assert headers.get("X-Original-URI", "").startswith("/g/")
            if tok == "good":
                return {"status": 204}
            if tok == "banned":
                return {"status": 403}
            if tok == "broken":
                return {"status": 302, "headers": {"Location": "/x"}}
            return {"status": 401, "headers": {"WWW-Authenticate": 'Bearer realm="api"'}}
        o.route("/auth", fn=decide)
        port = free_port()
        ringx.make(guard_config(port, f'auth_request = {{ proxy_pass = "http://{o.addr}", uri = "/auth" }}'))
        # All on one connection at once: each stream waits for its own answer.
        got = h2_streams(port, [("/g/x", {"x-token": "good"}), ("/g/x", {"x-token": "bad"}),
                                ("/g/x", {"x-token": "banned"}), ("/g/x", {"x-token": "broken"}),
                                ("/", {})])
        assert got[0].status == 200 and bytes(got[0].body) == b"in\n"
        assert got[1].status == 401 and got[1].headers.get("www-authenticate") == 'Bearer realm="api"'
        assert got[2].status == 403
        assert got[3].status == 500
        assert got[4].status == 200
        assert o.count("/auth") == 4, "the open location asks nobody"
        o.close()
        assert h2_get(port, "/g/x", x_token="good").status == 500, "an unreachable auth service"
    finally:
        o.close()


def test_h2_limit_req_delay_spaces_streams_at_the_rate(ringx):
    """Without nodelay, 30 streams at once on one connection are all served, spaced at the
    rate (10 r/s, within 10%), while a stream to an unlimited location is answered at once."""
    port = free_port()
    ringx.make(guard_config(port, 'limit_req = { zone = "ip", burst = 40 }',
                            top='[[limit_req_zone]]\nname = "ip"\nkey = "$remote_addr"\nrate = "10r/s"\n'))
    t0 = time.monotonic()
    got = h2_streams(port, [("/g/", {})] * 30 + [("/", {})])
    limited = got[:30]
    assert all(a.status == 200 and bytes(a.body) == b"in\n" for a in limited)
    ends = sorted(a.done for a in limited)
    span = ends[-1] - ends[0]
    rate = 29 / span
    print(f"h2 limit_req delay: 30 streams over {span:.3f} s, {rate:.2f} r/s (configured 10)")
    assert abs(rate - 10) <= 1.0, (rate, span)
    assert got[30].done - t0 < 0.5, "the unlimited stream did not wait for the delayed ones"


def test_h2_delayed_stream_keeps_its_body_and_sends_it_on(ringx):
    """A proxied request whose stream waits for its `limit_req` delay: the body that arrives
    meanwhile (more than a window's worth: the client must wait for the window to reopen)
    reaches the upstream whole once the request goes on."""
    up = UpstreamServer("up")
    try:
        port = free_port()
        ringx.make(runtime_section(None, 1) + "[http]\nclient_max_body_size = \"16m\"\n"
                   '[[limit_req_zone]]\nname = "ip"\nkey = "$remote_addr"\nrate = "5r/s"\n'
                   f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
                   f'  [[server.location]]\n  path = "/"\n  proxy_pass = "http://{up.addr}"\n'
                   '  limit_req = { zone = "ip", burst = 10 }\n')
        bodies = [bytes([65 + i]) * (200_000 + i) for i in range(4)]
        t0 = time.monotonic()
        got = h2_streams(port, [("/upload", {}, b) for b in bodies])
        for a, b in zip(got, bodies):
            assert a.status == 200, (a.status, bytes(a.body))
            seen = json.loads(bytes(a.body))
            assert (seen["len"], seen["sha256"]) == (len(b), hashlib.sha256(b).hexdigest())
        # The last one waited three intervals (600 ms at 5 r/s) before it went on.
        assert max(a.done for a in got) - t0 >= 0.5
    finally:
        up.close()
