"""Access control and limits end to end: allow/deny order (IPv4 and IPv6), the real client
address behind a trusted proxy, basic authentication against every htpasswd hash kind
(htpasswd -B, openssl passwd -5/-6/-apr1), auth_request allowing and denying, limit_req
rates measured within 10% of the configured rate (also with two zones), limit_conn, an
Authorization header of 1 MB, and `ringx check` on bad directives."""

from __future__ import annotations

import http.client
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

from conftest import free_port, runtime_section
from origin_server import Origin


def get(port, path="/", headers=None, source=None, host="127.0.0.1", timeout=10):
    c = http.client.HTTPConnection(host, port, timeout=timeout,
                                   source_address=(source, 0) if source else None)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r, body


def server(port, locations, top="", zones=1, http=""):
    return (runtime_section(None, zones) + f"[http]\n{http}\n" + top +
            f'[[server]]\nlisten = ["127.0.0.1:{port}"]\n'
            '  [[server.location]]\n  path = "/"\n  return = { status = 200, body = "open\\n" }\n'
            + locations)


def loc(extra, path="/g/"):
    return f'  [[server.location]]\n  path = "{path}"\n  return = {{ status = 200, body = "in\\n" }}\n  {extra}\n'


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_allow_and_deny_in_order(ringx):
    port = free_port()
    v6 = ipv6_loopback()
    cfg = server(port, loc('access = ["deny 127.0.0.2", "allow 127.0.0.0/8", "allow ::1", "deny all"]')
                 + loc('access = ["deny ::1", "allow all"]', "/v6/"))
    if v6:
        cfg = cfg.replace(f'listen = ["127.0.0.1:{port}"]', f'listen = ["127.0.0.1:{port}", "[::1]:{port}"]')
    ringx.make(cfg)
    assert get(port, "/g/")[0] == 200
    assert get(port, "/g/", source="127.0.0.2")[0] == 403
    assert get(port, "/g/", source="127.0.0.3")[0] == 200
    assert get(port, "/", source="127.0.0.2")[0] == 200, "other locations are open"
    if v6:
        assert get(port, "/g/", host="::1")[0] == 200
        assert get(port, "/v6/", host="::1")[0] == 403
        assert get(port, "/v6/")[0] == 200
    else:
        print("skipped the IPv6 part: no ::1 on this machine")


def test_the_real_address_behind_a_trusted_proxy(ringx):
    port = free_port()
    ringx.make(server(port, loc('access = ["allow 203.0.113.0/24", "deny all"]'),
                      http='real_ip_from = ["127.0.0.1"]\nreal_ip_header = "X-Forwarded-For"\n'
                           'real_ip_recursive = true'))
    xff = lambda v: {"X-Forwarded-For": v}
    assert get(port, "/g/", xff("203.0.113.7"))[0] == 200
    assert get(port, "/g/", xff("203.0.113.7, 127.0.0.1"))[0] == 200, "trusted hops skipped"
    assert get(port, "/g/", xff("198.51.100.1"))[0] == 403
    assert get(port, "/g/")[0] == 403
    # From an untrusted peer the header is not believed.
    assert get(port, "/g/", xff("203.0.113.7"), source="127.0.0.2")[0] == 403


def htpasswd_file(path):
    lines = []
    if shutil.which("htpasswd"):
        out = subprocess.run(["htpasswd", "-nbB", "-C", "5", "bcrypt", "pw-bcrypt"],
                             capture_output=True, text=True, check=True).stdout.strip()
        lines.append(out)
    for flag, user in (("-5", "sha256"), ("-6", "sha512"), ("-apr1", "apr1")):
        h = subprocess.run(["openssl", "passwd", flag, f"pw-{user}"],
                           capture_output=True, text=True, check=True).stdout.strip()
        lines.append(f"{user}:{h}")
    path.write_text("\n".join(lines) + "\n")
    return [ln.split(":")[0] for ln in lines]


def test_basic_auth_with_every_hash_kind(ringx, tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed (scripts/install-deps.sh installs it)")
    users = htpasswd_file(tmp_path / "users")
    if "bcrypt" not in users:
        print("bcrypt not tested: no htpasswd (apache2-utils)")
    port = free_port()
    ringx.make(server(port, loc(f'auth_basic = {{ realm = "team", user_file = "{tmp_path}/users" }}')))
    st, r, _ = get(port, "/g/")
    assert st == 401 and r.getheader("WWW-Authenticate") == 'Basic realm="team", charset="UTF-8"'
    import base64
    auth = lambda u, p: {"Authorization": "Basic " + base64.b64encode(f"{u}:{p}".encode()).decode()}
    for u in users:
        assert get(port, "/g/", auth(u, f"pw-{u}"))[0] == 200, u
        assert get(port, "/g/", auth(u, "wrong"))[0] == 401, u
    assert get(port, "/g/", auth("nobody", "pw-sha256"))[0] == 401


def test_an_authorization_header_of_1mb_is_refused_promptly(ringx, tmp_path):
    (tmp_path / "users").write_text("a:$apr1$saltsalt$LrttParrLPdxvgutaSXWJ0\n")
    port = free_port()
    ringx.make(server(port, loc(f'auth_basic = {{ realm = "r", user_file = "{tmp_path}/users" }}')))
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t0 = time.monotonic()
    try:
        s.sendall(b"GET /g/ HTTP/1.1\r\nHost: a\r\nAuthorization: Basic " + b"A" * (1 << 20) + b"\r\n\r\n")
    except OSError:
        pass  # the server may close while we still send: that is the point
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    s.close()
    assert time.monotonic() - t0 < 5
    assert data.startswith(b"HTTP/1.1 431") or data.startswith(b"HTTP/1.1 400") or data == b"", data[:100]
    assert get(port, "/")[0] == 200, "the server goes on"


def test_auth_request_allows_and_denies(ringx):
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
        ringx.make(server(port, loc(f'auth_request = {{ proxy_pass = "http://{o.addr}", uri = "/auth" }}')))
        assert get(port, "/g/x", {"X-Token": "good"})[0] == 200
        st, r, _ = get(port, "/g/x", {"X-Token": "bad"})
        assert st == 401 and r.getheader("WWW-Authenticate") == 'Bearer realm="api"'
        assert get(port, "/g/x", {"X-Token": "banned"})[0] == 403
        assert get(port, "/g/x", {"X-Token": "broken"})[0] == 500
        assert get(port, "/")[0] == 200
        assert o.count("/auth") == 4, "the open location asks nobody"
        o.close()
        assert get(port, "/g/x", {"X-Token": "good"})[0] == 500, "an unreachable auth service"
    finally:
        o.close()


def hammer(port, seconds, conns, path="/g/"):
    """Requests as fast as `conns` keep-alive connections can go for `seconds`: the statuses,
    and when the first request was sent and the last answered."""
    out, stop, times = [], time.monotonic() + seconds, []
    lock = threading.Lock()

    def worker():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.connect()
        mine, first = [], None
        while time.monotonic() < stop:
            t = time.monotonic()
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            first = first or t
            mine.append(r.status)
            if r.getheader("Connection", "").lower() == "close":
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        last = time.monotonic()
        c.close()
        with lock:
            out.extend(mine)
            times.append((first or last, last))

    ts = [threading.Thread(target=worker) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out, min(a for a, _ in times), max(b for _, b in times)


@pytest.mark.parametrize("zones", [1, 2])
def test_limit_req_rate_within_10_percent(ringx, zones):
    port = free_port()
    rate, secs = 40, 4
    ap = free_port()
    # With two zones the kernel's reuseport hash spreads the connections over both, so the
    # limit must hold across zones.
    top = (f'[steering]\nlisten = "hash"\n[admin]\nlisten = "127.0.0.1:{ap}"\n'
           f'[[limit_req_zone]]\nname = "ip"\nkey = "$remote_addr"\nrate = "{rate}r/s"\n')
    # A burst of 10 (250 ms at this rate): a client stalled for less than that (this machine
    # is shared) loses none of its rate; the count is then rate × t + burst + 1.
    burst = 10
    ringx.make(server(port, loc(f'limit_req = {{ zone = "ip", burst = {burst}, status = 429, nodelay = true }}'),
                      top=top, zones=zones))
    st, first, last = hammer(port, secs, conns=16)
    took = last - first
    ok, refused = st.count(200), st.count(429)
    expected = rate * took + burst + 1
    assert refused > ok, "the client went far over the rate"
    assert abs(ok - expected) <= 0.1 * expected, (ok, expected, took, len(st))
    c = http.client.HTTPConnection("127.0.0.1", ap, timeout=5)
    c.request("GET", "/metrics")
    m = c.getresponse().read().decode()
    per_zone = [int(v) for v in re.findall(r'ringx_limit_req_total\{zone="\d+",result="passed"\} (\d+)', m)]
    assert sum(per_zone) == ok and len(per_zone) == zones, (per_zone, ok)
    if zones == 2:
        assert all(v > 0 for v in per_zone), ("both zones passed requests", per_zone)


def test_limit_req_delays_within_the_burst(ringx):
    """Without nodelay, 30 requests at once are all served, spaced at the rate (10 r/s)."""
    port = free_port()
    ringx.make(server(port, loc('limit_req = { zone = "ip", burst = 40 }'),
                      top='[[limit_req_zone]]\nname = "ip"\nkey = "$remote_addr"\nrate = "10r/s"\n'))
    done, t0 = [], time.monotonic()

    def one():
        st = get(port, "/g/")[0]
        done.append((st, time.monotonic() - t0))

    ts = [threading.Thread(target=one) for _ in range(30)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(s == 200 for s, _ in done), done
    last = max(t for _, t in done)
    # 29 intervals of 100 ms after the first.
    assert abs(last - 2.9) <= 0.29, last


def test_limit_conn_refuses_over_max(ringx):
    o = Origin()
    try:
        o.route("/slow", body=b"s", delay=0.5)
        port = free_port()
        ringx.make(runtime_section(None, 1) + f"""
[[limit_conn_zone]]
name = "addr"
key = "$remote_addr"
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "http://{o.addr}"
  limit_conn = {{ zone = "addr", max = 2, status = 429 }}
""")
        res = []
        ts = [threading.Thread(target=lambda: res.append(get(port, "/slow")[0])) for _ in range(5)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert sorted(res) == [200, 200, 429, 429, 429], res
        assert get(port, "/slow")[0] == 200, "counted out when done"
    finally:
        o.close()


@pytest.mark.parametrize("bad,where,msg", [
    ('access = ["allow 10.0.0.0/33"]', "access", "prefix length /33"),
    ('access = ["permit all"]', "access", "start with \"allow\" or \"deny\""),
    ('limit_req = { zone = "nope" }', "zone", "no [[limit_req_zone]] named \"nope\""),
    ('auth_basic = { realm = "r", user_file = "/nonexistent/users" }', "user_file", "/nonexistent/users"),
    ('limit_req = { zone = "z", escalate = { after = 5, block_for = "60s" } }', "escalate", "needs an [xdp] section"),
])
def test_check_reports_bad_directives_at_their_place(ringx_bin, tmp_path, bad, where, msg):
    cfg = tmp_path / "bad.toml"
    text = ('[[limit_req_zone]]\nname = "z"\nkey = "$remote_addr"\nrate = "1r/s"\n'
            '[[server]]\nlisten = ["127.0.0.1:1"]\n[[server.location]]\npath = "/"\n'
            f'return = {{ status = 200 }}\n{bad}\n')
    cfg.write_text(text)
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    err = out.stderr + out.stdout
    assert out.returncode != 0, err
    m = re.search(r"bad\.toml:(\d+):(\d+): (.*)", err)
    assert m and m.group(1) == "10", err
    assert msg in m.group(3), err
    assert where in text.splitlines()[9], err


def test_check_reports_a_bad_rate(ringx_bin, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[limit_req_zone]]\nname = "z"\nkey = "$remote_addr"\nrate = "10 per second"\n'
                   '[[server]]\nlisten = ["127.0.0.1:1"]\n[[server.location]]\npath = "/"\n'
                   'return = { status = 200 }\n')
    out = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True)
    assert re.search(r"bad\.toml:4:\d+: invalid rate \"10 per second\"", out.stderr + out.stdout), out
