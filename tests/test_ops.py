"""Operations (issue #8): park/wake (idle CPU, wake latency), /metrics parsed by a real
Prometheus parser, the access log (combined, JSON, SIGUSR1 reopen), hot reload (SIGHUP,
`ringx reload`, broken configurations, requests in flight), and binary upgrade (SIGUSR2)
under wrk load with reloads."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import close_listener, free_port, runtime_section
from conftest import metric_total as total
from util_http import Conn, get, request


def config(port, admin=None, body="v1", extra_http="", extra_runtime="", listen=None,
           engine=None, zones=1):
    listen = listen or [port]
    out = runtime_section(engine, zones=zones, extra=extra_runtime)
    if extra_http:
        out += "[http]\n" + extra_http
    if admin:
        out += f'[admin]\nlisten = "127.0.0.1:{admin}"\n'
    addrs = ", ".join(f'"127.0.0.1:{p}"' for p in listen)
    out += f"""
[[server]]
listen = [{addrs}]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{body}" }}
  [[server.location]]
  path = "/missing"
  return = {{ status = 404, body = "no" }}
"""
    return out


def scrape(admin_port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}{path}", timeout=5) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def samples(text):
    """{(name, frozenset(labels)): value} through prometheus_client's parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def wait_for(pred, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def cpu_ticks(pid):
    """utime + stime of every thread of `pid`, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


# -- metrics ------------------------------------------------------------------------


def test_metrics_parse_and_count(engine, ringx):
    p, a = free_port(), free_port()
    srv = ringx.make(config(p, admin=a, engine=engine, zones=2), engine=engine)
    for _ in range(5):
        assert get(p, "/").status == 200
    for _ in range(3):
        assert get(p, "/missing").status == 404
    with Conn(p) as c:  # one connection left open
        c.send(request("GET", "/"))
        c.read_response()
        status, ctype, text = scrape(a)
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), ctype
        smp = samples(text)
        assert total(smp, "ringx_requests_total") == 9
        assert total(smp, "ringx_responses_total", **{"class": "2xx"}) == 6
        assert total(smp, "ringx_responses_total", **{"class": "4xx"}) == 3
        assert total(smp, "ringx_connections_active") == 1
        assert total(smp, "ringx_connections_accepted_total") == 9
        assert total(smp, "ringx_bytes_sent_total") > 0
        assert total(smp, "ringx_zone_wait_syscalls_total") > 0
        assert total(smp, "ringx_reloads_total", result="error") == 0
        # Per zone, every counter family has one sample per zone.
        zones = {dict(ls)["zone"] for (n, ls) in smp if n == "ringx_requests_total"}
        assert zones == {"0", "1"}
        assert ("ringx_info", frozenset({("version", "0.1.0"), ("engine", engine)})) in smp
    assert scrape(a, "/healthz")[2] == "ok\n"
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(a, "/nope")
    assert e.value.code == 404
    srv.signal(signal.SIGTERM)
    assert srv.wait_exit(5) == 0


# -- park and wake ----------------------------------------------------------------


def test_idle_zone_parks_and_wakes_fast(engine, ringx):
    """Idle: under 1% of a CPU for the whole process; a parked zone answers a new
    connection within 1 ms of a blocked-accept yardstick (median of 20, each after the zones
    parked again)."""
    p, a = free_port(), free_port()
    srv = ringx.make(config(p, admin=a, engine=engine, zones=2), engine=engine)
    get(p, "/")
    time.sleep(0.5)
    hz = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.monotonic(), cpu_ticks(srv.pid)
    time.sleep(5)
    t1, c1 = time.monotonic(), cpu_ticks(srv.pid)
    cpu = (c1 - c0) / hz / (t1 - t0)
    assert cpu < 0.01, f"idle ringx used {cpu:.1%} of a CPU"
    smp = samples(scrape(a)[2])
    assert total(smp, "ringx_zone_parked") == 2, "both zones should be parked when idle"
    parked_s = total(smp, "ringx_zone_parked_seconds_total")
    assert parked_s > 2 * 4.5, f"zones parked only {parked_s:.2f} s of 2 x 5 s"

    # On a shared machine another process can hold the CPU the zone wakes on, and a loaded
    # host delays every wake-up by milliseconds: each connection to ringx is paired with one to
    # a yardstick in this process (a thread blocked in accept(), which the kernel wakes
    # directly), and the parked zone must answer within 1 ms of the yardstick's median. A zone
    # that woke only on a timer would miss that by its timer's period. Up to three rounds of
    # 20; the best round counts.
    yard = socket.socket()
    yard.bind(("127.0.0.1", 0))
    yard.listen(64)

    def answer():
        while True:
            try:
                c, _ = yard.accept()
            except OSError:
                return
            c.recv(256)
            c.sendall(b"H")
            c.close()

    answering = threading.Thread(target=answer, daemon=True)
    answering.start()

    def first_byte(port):
        t = time.perf_counter()
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        first = s.recv(1)
        took = time.perf_counter() - t
        s.close()
        assert first == b"H"
        return took

    excess = []
    try:
        for _ in range(3):
            lat, floor = [], []
            for _ in range(20):
                time.sleep(0.05)
                wait_for(lambda: total(samples(scrape(a)[2]), "ringx_zone_parked") == 2,
                         what="zones parked")
                floor.append(first_byte(yard.getsockname()[1]))
                lat.append(first_byte(p))
            lat.sort()
            floor.sort()
            excess.append((lat[len(lat) // 2], floor[len(floor) // 2]))
            if excess[-1][0] - excess[-1][1] < 0.001:
                break
    finally:
        close_listener(yard)
        answering.join(5)
    assert min(x - y for x, y in excess) < 0.001, (
        "connect-to-first-byte on a parked zone against the yardstick's (us): "
        f"{[(round(x * 1e6), round(y * 1e6)) for x, y in excess]}")


def test_control_wakeup_reaches_parked_zone(engine, ringx):
    """A reload wakes parked zones (MSG_RING on io_uring, eventfd on epoll)."""
    p, a = free_port(), free_port()
    srv = ringx.make(config(p, admin=a, engine=engine, zones=2), engine=engine)
    time.sleep(0.3)
    srv.signal(signal.SIGHUP)
    wait_for(lambda: total(samples(scrape(a)[2]), "ringx_zone_config_generation") == 4,
             what="both zones at generation 2")
    smp = samples(scrape(a)[2])
    via = "msg_ring" if engine == "uring" else "eventfd"
    assert total(smp, "ringx_zone_wakeups_sent_total", via=via) == 2, smp
    assert total(smp, "ringx_zone_control_messages_total") == 2


# -- access log ---------------------------------------------------------------------


COMBINED = re.compile(
    r'^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] '
    r'"(?P<req>[^"]*)" (?P<status>\d{3}) (?P<bytes>\d+) "(?P<ref>[^"]*)" "(?P<ua>[^"]*)"$')


def test_access_log_combined_and_reopen(engine, ringx, tmp_path):
    p = free_port()
    log = tmp_path / "access.log"
    srv = ringx.make(config(p, engine=engine, extra_http=f'access_log = "{log}"\n'),
                     engine=engine)
    with Conn(p) as c:
        c.send(request("GET", "/a?x=1", headers={"User-Agent": "ua \"quoted\"",
                                                 "Referer": "http://r/"}))
        assert c.read_response().status == 200
        c.send(request("GET", "/missing"))
        assert c.read_response().status == 404
    lines = wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2 and
                     log.read_text().splitlines(), what="two log lines")
    m = [COMBINED.match(ln) for ln in lines]
    assert all(m), lines
    assert m[0]["req"] == "GET /a?x=1 HTTP/1.1" and m[0]["status"] == "200"
    assert m[0]["bytes"] == "2" and m[0]["ref"] == "http://r/"
    assert m[0]["ua"] == "ua \\x22quoted\\x22"
    assert m[1]["status"] == "404" and m[1]["ref"] == "-"
    # logrotate: move the file, SIGUSR1, the next line goes to a new file.
    rotated = tmp_path / "access.log.1"
    os.rename(log, rotated)
    srv.signal(signal.SIGUSR1)
    srv.wait_log("reopened the access log")
    time.sleep(0.2)
    assert get(p, "/b").status == 200
    new = wait_for(lambda: log.exists() and log.read_text(), what="the reopened log")
    assert "GET /b HTTP/1.1" in new and "GET /b" not in rotated.read_text()


def test_access_log_json_and_499(engine, ringx, tmp_path):
    p = free_port()
    log = tmp_path / "access.json"
    http = f'access_log = "{log}"\naccess_log_format = "json"\n'
    srv = ringx.make(config(p, engine=engine, extra_http=http), engine=engine)
    with Conn(p) as c:
        c.send(b"GET /j HTTP/1.1\r\nHost: x\r\nUser-Agent: \xc3\xa9\r\n\r\n")
        assert c.read_response().status == 200
        # A body that never finishes: the client gives up (499 when it closes).
        c.send(request("POST", "/", headers={"Content-Length": "10"}) + b"abc")
        time.sleep(0.1)
    lines = wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2 and
                     log.read_text().splitlines(), what="two JSON lines")
    recs = [json.loads(ln) for ln in lines]
    assert recs[0]["request"] == "GET /j HTTP/1.1" and recs[0]["status"] == 200
    assert recs[0]["http_user_agent"] == "\u00c3\u00a9"  # bytes escaped one by one
    assert recs[0]["remote_addr"] == "127.0.0.1" and recs[0]["body_bytes_sent"] == 2
    assert recs[1]["request"] == "POST / HTTP/1.1"
    assert recs[1]["status"] == 499, recs[1]
    # Every line has a $request_id, its own.
    assert all(re.fullmatch(r"[0-9a-f]{32}", r["request_id"]) for r in recs), recs
    assert recs[0]["request_id"] != recs[1]["request_id"]


# -- reload -------------------------------------------------------------------------


def test_reload_routes_and_listeners(engine, ringx, ringx_bin, tmp_path):
    p, p2, a = free_port(), free_port(), free_port()
    pid_file = tmp_path / "ringx.pid"
    rt = f'pid_file = "{pid_file}"\n'
    srv = ringx.make(config(p, admin=a, engine=engine, zones=2, extra_runtime=rt),
                     engine=engine)
    assert get(p, "/").body == b"v1"
    assert int(pid_file.read_text()) == srv.pid
    # An in-flight request (body still arriving) finishes under the old configuration.
    c = Conn(p)
    c.send(request("POST", "/", headers={"Content-Length": "4"}) + b"01")
    time.sleep(0.1)
    srv.config_path.write_text(config(p, admin=a, body="v2", listen=[p, p2], engine=engine,
                                      zones=2, extra_runtime=rt))
    out = subprocess.run([ringx_bin, "reload", "-c", str(srv.config_path)],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out
    srv.wait_log("reload 2 applied by every zone")
    c.send(b"23")
    r = c.read_response()
    assert r.body == b"v1", "a request in flight must finish under the old configuration"
    c.close()
    assert get(p, "/").body == b"v2"
    assert get(p2, "/").body == b"v2", "the new listen address serves"
    # Remove the first address: it stops accepting; the other one stays.
    srv.config_path.write_text(config(p2, admin=a, body="v3", engine=engine, zones=2,
                                      extra_runtime=rt))
    srv.signal(signal.SIGHUP)
    srv.wait_log("reload 3 applied by every zone")
    assert get(p2, "/").body == b"v3"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", p), timeout=1).close()
    smp = samples(scrape(a)[2])
    assert total(smp, "ringx_reloads_total", result="ok") == 2
    assert total(smp, "ringx_config_generation") == 3


def test_broken_reload_changes_nothing(engine, ringx):
    p, a = free_port(), free_port()
    srv = ringx.make(config(p, admin=a, engine=engine), engine=engine)
    good = srv.config_path.read_text()
    srv.config_path.write_text(good.replace('body = "v1"', 'body = "v2"') +
                               '\n[[server]]\nlisten = ["127.0.0.1:not-a-port"]\n')
    srv.signal(signal.SIGHUP)
    log = srv.wait_log("reload failed")
    line = [ln for ln in log.splitlines() if "reload failed" in ln][0]
    assert re.search(re.escape(str(srv.config_path)) + r":\d+:\d+: ", line), line
    assert "configuration unchanged" in line
    assert get(p, "/").body == b"v1"
    smp = samples(scrape(a)[2])
    assert total(smp, "ringx_reloads_total", result="error") == 1
    assert total(smp, "ringx_config_generation") == 1
    assert total(smp, "ringx_zone_config_generation") == 1


# -- binary upgrade -------------------------------------------------------------------


def _kill_pidfile(pid_file):
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


def test_upgrade_that_fails_keeps_the_old_process(ringx, tmp_path):
    p = free_port()
    pid_file = tmp_path / "ringx.pid"
    srv = ringx.make(config(p, extra_runtime=f'pid_file = "{pid_file}"\n'))
    srv.config_path.write_text("this is not toml")
    srv.signal(signal.SIGUSR2)
    srv.wait_log("binary upgrade failed, this process keeps serving", timeout=10)
    assert srv.proc.poll() is None
    assert get(p, "/").body == b"v1"
    assert int(pid_file.read_text()) == srv.pid


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_reloads_and_upgrade_under_wrk(ringx, tmp_path):
    """20 s of wrk; 10 reloads and one binary upgrade meanwhile: no socket errors, no
    non-2xx responses."""
    p, a = free_port(), free_port()
    pid_file = tmp_path / "ringx.pid"
    rt = f'pid_file = "{pid_file}"\n'
    srv = ringx.make(config(p, admin=a, zones=2, extra_runtime=rt))
    try:
        wrk = subprocess.Popen(["wrk", "-t2", "-c32", "-d20s", f"http://127.0.0.1:{p}/"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1)
        for i in range(10):
            srv.config_path.write_text(config(p, admin=a, body=f"v{i + 2}", zones=2,
                                              extra_runtime=rt))
            applied = srv.log().count("applied by every zone")
            os.kill(int(pid_file.read_text()), signal.SIGHUP)
            # Each reload applied before the next is sent: a later one supersedes one the
            # zones have not applied yet (under load that takes longer than the 0.8 s below).
            wait_for(lambda: srv.log().count("applied by every zone") > applied, timeout=20,
                     what=f"reload {i + 1} applied by every zone")
            time.sleep(0.8)
            if i == 4:
                old = srv.pid
                os.kill(old, signal.SIGUSR2)
                wait_for(lambda: int(pid_file.read_text()) != old, timeout=10,
                         what="the new process's pid file")
                assert srv.wait_exit(10) == 0, "the old process should drain and exit 0"
        out, _ = wrk.communicate(timeout=40)
        assert "requests in" in out, out
        assert "Socket errors" not in out, out
        assert "Non-2xx" not in out, out
        new = int(pid_file.read_text())
        assert new != srv.pid
        assert get(p, "/").body == b"v11"
        log = srv.log()
        assert log.count("applied by every zone") == 10, log
        assert "binary upgrade: process" in log
    finally:
        _kill_pidfile(pid_file)


def test_upgrades_lose_no_new_connection(ringx, tmp_path):
    """Binary upgrade after binary upgrade while clients open a new connection per request,
    with an access log (so each accepted connection waits for its peer address before the
    zone sees it): every request is answered. A draining zone that left with a connection
    accepted in its last moments closed it unanswered, about one upgrade in 17."""
    p = free_port()
    pid_file = tmp_path / "ringx.pid"
    rt = f'pid_file = "{pid_file}"\n'
    extra = f'access_log = "{tmp_path / "access.log"}"\n'
    srv = ringx.make(config(p, zones=2, extra_runtime=rt, extra_http=extra))
    stop, fails, count = threading.Event(), [], [0]

    def load():
        while not stop.is_set():
            try:
                r = get(p, "/")
                if r.status != 200:
                    fails.append(r.status)
            except OSError as e:
                fails.append(repr(e))
            count[0] += 1

    clients = [threading.Thread(target=load) for _ in range(3)]
    for t in clients:
        t.start()
    try:
        for i in range(60):
            old = int(pid_file.read_text())
            os.kill(old, signal.SIGUSR2)
            wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() not in ("", str(old)),
                     timeout=20, what=f"upgrade {i + 1}: the new process's pid file")
            wait_for(lambda: _gone(old), timeout=40, what=f"upgrade {i + 1}: the old process's exit")
    finally:
        stop.set()
        for t in clients:
            t.join()
        _kill_pidfile(pid_file)
    assert count[0] > 0
    assert not fails, f"{len(fails)} of {count[0]} requests failed: {fails[:5]}"


def _gone(pid):
    """The process has exited (a zombie counts: its parent, an earlier ringx, is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
