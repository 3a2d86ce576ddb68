"""Purge and drain everywhere (issue 42): three ringx hosts with a proxy cache each share one
real redis-server. A purge on host A with `?cluster=1` removes the object on B and C too, and
the answer lists A, B and C as confirmed; `POST /drain?cluster=1` sends all three into their
graceful drain (/healthz 503 on each, requests in flight finished); with Redis stopped the
purge is still done on A and the answer says the cluster part failed."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import urllib.request

import pytest

from conftest import free_port
from origin_server import Origin
from redis_peer import command, redis, wait_until  # noqa: F401 (redis: the fixture)


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.close()


class Host:
    def __init__(self, port: int, admin: int, proc, host_id: str):
        self.port, self.admin, self.proc, self.id = port, admin, proc, host_id


TOKEN = "t0ken-of-the-admin"
SECRET = "the-secret-of-the-fleet-0123456789"


def config(port, admin, origin, cache_dir, redis_addr, host_id, confirm="5s", token=TOKEN,
           secret=SECRET):
    hid = f'host_id = "{host_id}"' if host_id else ""
    tok = f'token = "{token}"' if token else ""
    sec = f'events_secret = "{secret}"' if secret else ""
    return f"""
[runtime]
zones = 1
drain_timeout = "60s"
[admin]
listen = "127.0.0.1:{admin}"
{tok}
[cluster]
redis = ["{redis_addr}"]
prefix = "fleet:"
confirm_timeout = "{confirm}"
{hid}
{sec}
[[proxy_cache_path]]
name = "c"
path = "{cache_dir}"
[[upstream]]
name = "origin"
servers = ["{origin.addr}"]
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "origin"
  proxy_cache = {{ zone = "c", key = "$uri" }}
"""


def metrics(admin: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as r:
        return r.read().decode()


def metric(admin: int, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", metrics(admin), re.M)
    return float(m.group(1)) if m else None


def on_disk(admin: int, n: int = 1) -> None:
    """Waits until the cache holds n entries on disk: a purge before the cache's writer
    thread has indexed a new file is undone when it does (the object is a HIT again)."""
    wait_until(f"{n} entries on disk", lambda: metric(
        admin, 'ringx_cache_entries{cache="c",tier="disk"}') == n)


def start_hosts(ringx, origin, redis, tmp_path) -> list[Host]:
    """A and B with a configured host_id, C with the default HOSTNAME:ADMIN_PORT; returns
    once all three are subscribed and known alive in Redis."""
    hosts = []
    for name in ("a", "b", "c"):
        port, admin = free_port(), free_port()
        hid = f"host-{name}" if name != "c" else ""
        proc = ringx.make(config(port, admin, origin, tmp_path / f"cache-{name}", redis.addr, hid),
                          name=f"host-{name}")
        hosts.append(Host(port, admin, proc, hid or f"{socket.gethostname()}:{admin}"))
    for h in hosts:
        wait_until(f"{h.id} subscribed",
                   lambda h=h: metric(h.admin, "ringx_cluster_redis_subscribed") == 1)
    want = sorted(h.id.encode() for h in hosts)
    wait_until("all three alive in Redis",
               lambda: sorted(command(redis.port, "ZRANGE", "fleet:hosts", 0, -1)) == want)
    return hosts


def get(port: int, path: str) -> tuple[int, str | None, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.getheader("X-Cache-Status"), r.read()
    finally:
        c.close()


def admin(port: int, method: str, target: str, token: str | None = TOKEN,
          body: str | None = None) -> tuple[int, str, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"X-Ringx-Token": token} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        c.request(method, target, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        c.close()


def healthz(port: int) -> int | None:
    try:
        return admin(port, "GET", "/healthz")[0]
    except OSError:
        return None


def test_purge_everywhere_and_without_redis(ringx, origin, redis, tmp_path):
    origin.route("/obj", body=b"O" * 1000, headers={"Cache-Control": "max-age=600"})
    hosts = start_hosts(ringx, origin, redis, tmp_path)
    a, b, c = hosts
    for h in hosts:
        assert get(h.port, "/obj")[1] == "MISS"
        assert get(h.port, "/obj")[1] == "HIT"
        on_disk(h.admin)
    # Without cluster=1 a purge stays on its host, answered as before.
    st, ctype, body = admin(b.admin, "PURGE", "/cache/c?key=%2Fobj")
    assert (st, ctype, body) == (200, "text/plain", b"purged\n")
    assert get(b.port, "/obj")[1] == "MISS"
    assert get(c.port, "/obj")[1] == "HIT"

    st, ctype, body = admin(a.admin, "PURGE", "/cache/c?key=%2Fobj&cluster=1")
    assert (st, ctype) == (200, "application/json"), body
    ans = json.loads(body)
    assert ans["host"] == a.id and ans["local"] == {"status": 200, "result": "purged"}, ans
    cl = ans["cluster"]
    assert cl["ok"] is True and cl["missing"] == [] and cl["receivers"] == 3, ans
    confirmed = {x["host"]: (x["status"], x["result"]) for x in cl["confirmed"]}
    assert confirmed == {
        a.id: (200, "applied by the request on this host"),
        b.id: (200, "purged"),
        c.id: (200, "purged"),
    }, ans
    for h in hosts:
        assert get(h.port, "/obj")[1] == "MISS", h.id
    assert origin.count("/obj") == 7
    assert metric(a.admin, 'ringx_cluster_redis_messages_total{kind="published"}') == 1
    assert metric(a.admin, 'ringx_cluster_redis_confirmations_total{result="confirmed"}') == 3
    for h in hosts:
        assert metric(h.admin, 'ringx_cluster_redis_messages_total{kind="received"}') == 1
        # Counted once Redis answered the HSET, which the answer may have been faster than.
        wait_until(f"{h.id}'s confirmation counted", lambda h=h: metric(
            h.admin, 'ringx_cluster_redis_confirmations_sent_total{result="ok"}') == 1)

    # Redis stopped: the purge is still done on A, and the answer says the rest failed.
    for h in hosts:
        assert get(h.port, "/obj")[1] == "HIT"
        on_disk(h.admin)
    redis.stop()
    st, ctype, body = admin(a.admin, "PURGE", "/cache/c?key=%2Fobj&cluster=1")
    assert (st, ctype) == (503, "application/json"), body
    ans = json.loads(body)
    assert ans["local"] == {"status": 200, "result": "purged"}, ans
    assert ans["cluster"]["ok"] is False and "not sent" in ans["cluster"]["error"], ans
    assert get(a.port, "/obj")[1] == "MISS"
    assert get(b.port, "/obj")[1] == "HIT"
    assert metric(a.admin, 'ringx_cluster_redis_messages_total{kind="publish_failed"}') == 1
    # Requests never waited on Redis.
    assert [get(c.port, "/obj")[0] for _ in range(20)] == [200] * 20


def test_drain_everywhere(ringx, origin, redis, tmp_path):
    release = threading.Event()
    origin.route("/hold", fn=lambda *_: {"body": b"held"} if release.wait(60) else {})
    hosts = start_hosts(ringx, origin, redis, tmp_path)
    # A request in flight on each host: the drain waits for it, so each is seen draining.
    got: dict[str, tuple] = {}
    threads = [threading.Thread(target=lambda h=h: got.__setitem__(h.id, get(h.port, "/hold")))
               for h in hosts]
    for t in threads:
        t.start()
    try:
        wait_until("three requests in flight", lambda: origin.count("/hold") == 3)
        assert all(healthz(h.admin) == 200 for h in hosts)
        st, ctype, body = admin(hosts[0].admin, "POST", "/drain?cluster=1")
        assert (st, ctype) == (200, "application/json"), body
        ans = json.loads(body)
        assert ans["action"] == "drain" and ans["local"]["result"] == "draining", ans
        confirmed = sorted(x["host"] for x in ans["cluster"]["confirmed"])
        assert confirmed == sorted(h.id for h in hosts), ans
        assert ans["cluster"]["missing"] == [], ans
        for h in hosts:
            wait_until(f"{h.id} draining", lambda h=h: healthz(h.admin) == 503)
            h.proc.wait_log("shutting down gracefully")
    finally:
        release.set()
        for t in threads:
            t.join(60)
    # What was in flight finished; then each host ended by itself.
    assert {k: v[0] for k, v in got.items()} == {h.id: 200 for h in hosts}
    for h in hosts:
        assert h.proc.wait_exit(60) == 0, h.proc.log()


def test_cluster_purge_needs_a_cluster_section(ringx, origin, tmp_path):
    origin.route("/obj", body=b"O" * 100, headers={"Cache-Control": "max-age=600"})
    port, adm = free_port(), free_port()
    cfg = config(port, adm, origin, tmp_path / "cache", "127.0.0.1:1", "")
    cfg = cfg[:cfg.index("[cluster]")] + cfg[cfg.index("[[proxy_cache_path]]"):]
    ringx.make(cfg)
    assert [get(port, "/obj")[1] for _ in range(2)] == ["MISS", "HIT"]
    on_disk(adm)
    for target in ("/cache/c?key=%2Fobj&cluster=1", "/cache/c?cluster=1"):
        st, ctype, body = admin(adm, "PURGE", target)
        assert (st, ctype) == (400, "application/json") and b"[cluster]" in body, body
        # Nothing done: not on this host either.
        assert get(port, "/obj")[1] == "HIT", target
    st, _, body = admin(adm, "POST", "/drain?cluster=1")
    assert st == 400 and b"[cluster]" in body, body
    assert healthz(adm) == 200


def test_the_admin_port_answers_while_a_purge_waits_for_the_others(ringx, origin, redis,
                                                                   tmp_path):
    port, adm = free_port(), free_port()
    ringx.make(config(port, adm, origin, tmp_path / "cache", redis.addr, "host-a",
                      confirm="60s"))
    wait_until("subscribed", lambda: metric(adm, "ringx_cluster_redis_subscribed") == 1)
    wait_until("alive", lambda: command(redis.port, "ZRANGE", "fleet:hosts", 0, -1)
               == [b"host-a"])
    # "ghost" is alive in Redis's eyes, and confirms only when this test says so.
    secs, micros = command(redis.port, "TIME")
    command(redis.port, "ZADD", "fleet:hosts", int(secs) * 1000 + int(micros) // 1000, "ghost")
    got = []
    t = threading.Thread(target=lambda: got.append(admin(adm, "PURGE", "/cache/c?cluster=1")))
    t.start()
    try:
        def confirm_key():
            keys = command(redis.port, "KEYS", "fleet:confirm:*")
            return keys[0] if keys else None
        key = wait_until("host-a confirmed", confirm_key)
        assert command(redis.port, "HKEYS", key) == [b"host-a"]
        # The purge waits for ghost; /healthz and /metrics do not wait for it.
        assert healthz(adm) == 200
        assert metric(adm, 'ringx_cluster_redis_messages_total{kind="published"}') == 1
        assert t.is_alive() and got == []
        command(redis.port, "HSET", key, "ghost", "200 purged 0 entries of c")
    finally:
        t.join(60)
    st, ctype, body = got[0]
    assert (st, ctype) == (200, "application/json"), body
    confirmed = {x["host"]: x["result"] for x in json.loads(body)["cluster"]["confirmed"]}
    assert confirmed == {"host-a": "applied by the request on this host",
                         "ghost": "purged 0 entries of c"}, body


def test_two_processes_under_one_host_id(ringx, origin, redis, tmp_path):
    """A copied configuration (or a binary upgrade's old and new process): two processes
    with one host_id. Each applies what the other sends, the answer is not 200 (two
    subscribers, one confirmation), and the heartbeats say so."""
    origin.route("/obj", body=b"O" * 100, headers={"Cache-Control": "max-age=600"})
    twins = []
    for name in ("a", "b"):
        port, adm = free_port(), free_port()
        ringx.make(config(port, adm, origin, tmp_path / f"cache-{name}", redis.addr, "twin",
                          confirm="3s"), name=f"twin-{name}")
        twins.append((port, adm))
    for _, adm in twins:
        wait_until("subscribed", lambda adm=adm: metric(adm, "ringx_cluster_redis_subscribed") == 1)
    wait_until("the two processes under one id seen", lambda: sum(
        metric(adm, "ringx_cluster_redis_host_id_conflicts_total") or 0 for _, adm in twins) > 0)
    for port, adm in twins:
        assert [get(port, "/obj")[1] for _ in range(2)] == ["MISS", "HIT"], port
        on_disk(adm)
    (a_port, a_adm), (b_port, _) = twins
    st, ctype, body = admin(a_adm, "PURGE", "/cache/c?key=%2Fobj&cluster=1")
    assert (st, ctype) == (504, "application/json"), body
    cl = json.loads(body)["cluster"]
    assert cl["ok"] is False and cl["missing"] == [], cl
    assert (cl["receivers"], cl["unconfirmed_receivers"]) == (2, 1), cl
    # The other process purged it: it did not take the message for its own.
    assert [get(a_port, "/obj")[1], get(b_port, "/obj")[1]] == ["MISS", "MISS"], cl


def test_too_many_sent_at_once_is_refused_and_nothing_done(ringx, origin, redis, tmp_path):
    """8 purges or drains sent to every host wait at once at most; one more is answered 503
    "try again" and nothing is done, on this host either (its drain included)."""
    origin.route("/obj", body=b"O" * 100, headers={"Cache-Control": "max-age=600"})
    port, adm = free_port(), free_port()
    proc = ringx.make(config(port, adm, origin, tmp_path / "cache", redis.addr, "host-a",
                             confirm="60s"))
    wait_until("subscribed", lambda: metric(adm, "ringx_cluster_redis_subscribed") == 1)
    wait_until("alive", lambda: command(redis.port, "ZRANGE", "fleet:hosts", 0, -1)
               == [b"host-a"])
    assert [get(port, "/obj")[1] for _ in range(2)] == ["MISS", "HIT"]
    # "ghost" is alive in Redis's eyes: each purge waits for it until this test confirms.
    secs, micros = command(redis.port, "TIME")
    command(redis.port, "ZADD", "fleet:hosts", int(secs) * 1000 + int(micros) // 1000, "ghost")
    got = []
    waiting = [threading.Thread(target=lambda: got.append(
        admin(adm, "PURGE", "/cache/c?key=%2Fother&cluster=1"))) for _ in range(8)]
    for t in waiting:
        t.start()
    try:
        wait_until("8 waiting", lambda: len(command(redis.port, "KEYS", "fleet:confirm:*")) == 8)
        st, _, body = admin(adm, "PURGE", "/cache/c?key=%2Fobj&cluster=1")
        assert (st, body) == (503, b"too many requests to every host in flight; nothing done: "
                                   b"try again\n")
        assert get(port, "/obj")[1] == "HIT"
        st, _, body = admin(adm, "POST", "/drain?cluster=1")
        assert st == 503 and b"try again" in body, body
    finally:
        for key in command(redis.port, "KEYS", "fleet:confirm:*"):
            command(redis.port, "HSET", key, "ghost", "404 no such entry")
        for t in waiting:
            t.join(60)
    assert [g[0] for g in got] == [200] * 8, got
    # The refused drain was not started.
    assert healthz(adm) == 200 and proc.proc.poll() is None
    assert "shutting down" not in proc.log()


def test_drain_needs_a_token_and_so_does_a_purge_everywhere(ringx, origin, redis, tmp_path):
    """A drain is a plain form POST: without [admin] token any web page the operator opens
    could send it, so it is refused; with a token it needs it, and so does a purge sent to
    every host. A purge of this host alone needs none, as before."""
    origin.route("/obj", body=b"O" * 100, headers={"Cache-Control": "max-age=600"})
    port, adm = free_port(), free_port()
    proc = ringx.make(config(port, adm, origin, tmp_path / "cache", redis.addr, "host-a",
                             token=""))
    wait_until("subscribed", lambda: metric(adm, "ringx_cluster_redis_subscribed") == 1)
    for target in ("/drain", "/drain?cluster=1"):
        st, _, body = admin(adm, "POST", target, token=None)
        assert st == 403 and b"set [admin] token" in body, (target, body)
    # The form a page elsewhere would post.
    st, _, body = admin(adm, "POST", "/drain", token=None, body="cluster=1")
    assert st == 403 and b"set [admin] token" in body, body
    assert healthz(adm) == 200

    port, adm = free_port(), free_port()
    ringx.make(config(port, adm, origin, tmp_path / "cache-b", redis.addr, "host-b"))
    wait_until("subscribed", lambda: metric(adm, "ringx_cluster_redis_subscribed") == 1)
    assert [get(port, "/obj")[1] for _ in range(2)] == ["MISS", "HIT"]
    on_disk(adm)
    for method, target in (("POST", "/drain"), ("POST", "/drain?cluster=1"),
                           ("PURGE", "/cache/c?key=%2Fobj&cluster=1")):
        for token in (None, "wrong"):
            st, _, body = admin(adm, method, target, token=token)
            assert st == 403 and b"token" in body, (method, target, token, body)
    assert get(port, "/obj")[1] == "HIT"
    assert healthz(adm) == 200
    st, _, body = admin(adm, "PURGE", "/cache/c?key=%2Fobj", token=None)
    assert (st, body) == (200, b"purged\n")
    assert proc.proc.poll() is None


def test_messages_without_the_secret_drain_nothing(ringx, origin, redis, tmp_path):
    """Anyone who can publish in Redis: with [cluster] events_secret a host refuses a message
    without its MAC, and counts it; without a secret a host still purges what it is sent,
    but refuses a drain; and it does not send one (POST /drain?cluster=1 is a 400)."""
    hosts = {}
    for name, secret in (("signed", SECRET), ("open", "")):
        port, adm = free_port(), free_port()
        proc = ringx.make(config(port, adm, origin, tmp_path / f"cache-{name}", redis.addr,
                                 f"host-{name}", secret=secret), name=name)
        wait_until("subscribed", lambda adm=adm: metric(
            adm, "ringx_cluster_redis_subscribed") == 1)
        hosts[name] = (adm, proc)
    secs, _ = command(redis.port, "TIME")
    forged = f"ringx-event/2 x1 mallory {int(secs) * 1000} drain  -"
    assert command(redis.port, "PUBLISH", "fleet:events", forged) == 2
    signed_adm, open_adm = hosts["signed"][0], hosts["open"][0]
    wait_until("the forged drain refused", lambda: metric(
        signed_adm, 'ringx_cluster_redis_messages_total{kind="unauthenticated"}') == 1)
    # The host without a secret took the message, and refused the drain in its confirmation.
    got = wait_until("confirmed", lambda: command(redis.port, "HGET", "fleet:confirm:x1",
                                                  "host-open"))
    assert got.startswith(b"403 refused: a drain sent through Redis needs [cluster] "
                          b"events_secret"), got
    assert command(redis.port, "HGET", "fleet:confirm:x1", "host-signed") is None
    st, ctype, body = admin(open_adm, "POST", "/drain?cluster=1")
    assert (st, ctype) == (400, "application/json") and b"events_secret" in body, body
    for adm, proc in hosts.values():
        assert healthz(adm) == 200 and proc.proc.poll() is None
        assert "shutting down" not in proc.log()
