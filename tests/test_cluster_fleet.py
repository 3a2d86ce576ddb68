"""Issue 42's test bed: three ringx hosts behind `ringx lb`, sharing one real redis-server
(and, for the failover, redis-sentinel with a replica), in network namespaces this test
creates (tests/netns_bed.py, the bed of tests/test_lb.py):

    c (client) ── r (router; Redis, replica, Sentinel on 10.88.200.1) ── l (ringx lb on l0)
                                                                      ├── b1 (ringx host)
                                                                      ├── b2 (ringx host)
                                                                      └── b3 (ringx host)

Each host serves the VIP (decapsulated from the balancer's GUE) with a `limit_req` zone of
RATE r/s, `scope = "cluster"` on `/` and `scope = "local"` on `/local`, a TLS server, and a
proxy cache of an origin of its own; `[cluster]` names the Redis on the router. Through the
balancer, from the client namespace:

1. the cluster limit admits `rate x t + burst + 1` (within the issue's 10%) across the three
   hosts, where the local one admits three times that;
2. a TLS session made on one host resumes on another (openssl s_client -sess_out/-sess_in,
   addressing the hosts directly);
3. a purge with `cluster=1` on one host removes the object on the other two;
4. Redis stopped during a load run: no request fails, every host falls back to its share
   (/metrics says so) and the shares add up to the limit; Redis back: the cluster limit
   holds again. The same with the master killed under Sentinel: the hosts follow the
   failover to the replica;
5. a host removed from the balancer mid-run: no connection to the other two breaks, the
   limit holds with two hosts, and once the removed host stops, the two remaining hosts'
   shares grow to cover it (with Redis then stopped, their shares add up to the limit).

Accuracy is measured as in tests/test_cluster_limits.py (whose load and check it uses): the
load offered is many times the rate, the window is the client's own (first request sent to
last answer read), so a slow machine lowers only the offered load. Every wait polls for a
state, with a timeout. Root only (namespaces, XDP); skips with the reason otherwise.

Run: python3 -m pytest -q -rs tests/test_cluster_fleet.py
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import urllib.request

import pytest

from netns_bed import BACKENDS, PORT, SHARED, VIP, Bed, get, skip_reason
from redis_peer import Redis, Sentinel, require_redis, wait_until
from test_cluster_limits import BURST, RATE, Load, allowed, check_accuracy, run_for, sample_sum
from tls_pki import Pki

BED = Bed("fl")
HOSTS = tuple(BACKENDS)       # b1, b2, b3: each host's namespace and host_id
ADMIN = "127.0.0.1:9901"      # in each host's namespace
TLS_PORT = 8443
ORIGIN = 8099                 # the origin each host's cache fills from, on its own loopback
TOKEN = "t0ken-of-the-fleet-admin"
SECRET = "the-secret-of-the-fleet-0123456789"
WINDOW = 8.0                  # seconds of load per measured phase
CONNS = 24                    # client connections per measured phase, spread by the balancer
WHO = "X-Host"                # the response header that names the answering host
MASTER = "fleet"              # the Sentinel's name of the master


def host_config(name: str, cluster: str, cache_dir, pki_leaf) -> str:
    cert, key = pki_leaf
    limit = f'burst = {BURST}, nodelay = true, status = 429'
    return f"""
[runtime]
zones = 1
[admin]
listen = "{ADMIN}"
token = "{TOKEN}"
[tls]
session_tickets = true
session_cache = 0
[cluster]
{cluster}
prefix = "fleet:"
connect_timeout = "500ms"
timeout = "1s"
host_id = "{name}"
confirm_timeout = "5s"
events_secret = "{SECRET}"
[[limit_req_zone]]
name = "api"
key = "$http_x_client"
rate = "{RATE}r/s"
scope = "cluster"
cluster_sync = "20ms"
[[limit_req_zone]]
name = "loc"
key = "$http_x_client"
rate = "{RATE}r/s"
scope = "local"
[[proxy_cache_path]]
name = "c"
path = "{cache_dir}"
[[upstream]]
name = "origin"
servers = ["127.0.0.1:{ORIGIN}"]
[[server]]
listen = ["0.0.0.0:{PORT}"]
add_header = {{ "{WHO}" = {{ value = "{name}", always = true }} }}
# A limit's refusal carries the server's headers when an error page serves it.
error_page = {{ "429" = "/limited" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{name}\\n" }}
  limit_req = {{ zone = "api", {limit} }}
  [[server.location]]
  path = "/local"
  return = {{ status = 200, body = "{name}\\n" }}
  limit_req = {{ zone = "loc", {limit} }}
  [[server.location]]
  path = "= /limited"
  return = {{ status = 429, body = "limited by {name}\\n" }}
  [[server.location]]
  path = "/who"
  return = {{ status = 200, body = "{name}\\n" }}
  [[server.location]]
  path = "/obj"
  proxy_pass = "origin"
  proxy_cache = {{ zone = "c", key = "$uri" }}
[[server]]
listen = ["0.0.0.0:{TLS_PORT}"]
server_name = ["t.test"]
tls = {{ cert = "{cert}", key = "{key}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "hello from {name}\\n" }}
[[server]]
listen = ["127.0.0.1:{ORIGIN}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "the object\\n" }}
  add_header = {{ "Cache-Control" = "max-age=600" }}
"""


def ports_free() -> bool:
    """Whether this namespace's host ports can be bound (run inside it: BED.in_ns)."""
    admin_ip, admin_port = ADMIN.rsplit(":", 1)
    for addr in (("0.0.0.0", PORT), ("0.0.0.0", TLS_PORT), ("127.0.0.1", ORIGIN),
                 (admin_ip, int(admin_port))):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError:
            return False
        finally:
            s.close()
    return True


class Fleet:
    """The bed's Redis, hosts and balancer configuration, as the tests change them."""

    def __init__(self, factory, tmp, leaf):
        self.factory, self.tmp, self.leaf = factory, tmp, leaf
        self.redis = Redis(tmp / "redis", host=SHARED, enter=BED.setns_to("r"))
        self.replica: Redis | None = None
        self.sentinel: Sentinel | None = None
        self.hosts: dict[str, object] = {}
        self.cluster = ""
        self.lb_cfg = tmp / "lb.toml"
        self.lb_hosts: tuple[str, ...] = ()
        self.generation = 0

    # -- what runs --------------------------------------------------------------
    def start_hosts(self, cluster: str) -> None:
        """(Re)starts every host with `cluster` as its [cluster] servers; returns once each
        syncs its limits and sees three hosts (a stopped process's heartbeat expires in 3 s)."""
        self.stop_hosts()
        # A killed ringx's sockets go with its io_uring, which the kernel tears down after
        # the process is gone; a new ringx refuses a port still held (listen.rs).
        wait_until("the stopped hosts' ports are free",
                   lambda: all(BED.in_ns(h, ports_free) for h in HOSTS), timeout=30)
        self.generation += 1
        for h in HOSTS:
            cfg = host_config(h, cluster, self.tmp / f"cache-{h}-{self.generation}", self.leaf)
            self.hosts[h] = self.factory.make(cfg, name=f"fleet-{h}-{self.generation}",
                                              preexec_fn=BED.setns_to(h))
        self.cluster = cluster
        wait_until("every host sees three hosts",
                   lambda: all(self.total(h, "ringx_limit_cluster_hosts") == 3 for h in HOSTS))

    def stop_hosts(self) -> None:
        for r in self.hosts.values():
            r.stop()
        self.hosts = {}

    def plain(self) -> str:
        return f'redis = ["{self.redis.addr}"]'

    def balance(self, hosts=HOSTS) -> None:
        """The balancer's service over `hosts` (attached, or swapped in)."""
        self.lb_cfg.write_text(BED.lb_config(hosts))
        out = BED.lb("attach", "--dev", "l0", "-c", self.lb_cfg)
        assert "the balancer" in out.stdout, out.stdout + out.stderr
        self.lb_hosts = tuple(hosts)

    def ready(self) -> "Fleet":
        """The state every test starts from: the plain Redis up, the three hosts on it, all
        three behind the balancer."""
        if self.sentinel is not None:
            self.sentinel.stop()
            self.sentinel = None
        if self.replica is not None:
            self.replica.stop()
            self.replica = None
        if self.redis.proc is None or self.redis.proc.poll() is not None:
            self.redis.stop()
            self.redis.start()
        alive = all(r.proc is not None and r.proc.poll() is None for r in self.hosts.values())
        if not (alive and len(self.hosts) == len(HOSTS) and self.cluster == self.plain()):
            self.start_hosts(self.plain())
        if self.lb_hosts != HOSTS:
            self.balance()
        return self

    def close(self) -> None:
        self.stop_hosts()
        for p in (self.sentinel, self.replica, self.redis):
            if p is not None:
                p.stop()

    # -- what the hosts say -----------------------------------------------------
    def admin(self, h: str, method: str, target: str) -> tuple[int, str]:
        def call():
            c = http.client.HTTPConnection(ADMIN, timeout=30)
            try:
                c.request(method, target, headers={"X-Ringx-Token": TOKEN})
                r = c.getresponse()
                return r.status, r.read().decode()
            finally:
                c.close()
        return BED.in_ns(h, call)

    def metrics(self, h: str) -> str:
        def read():
            with urllib.request.urlopen(f"http://{ADMIN}/metrics", timeout=10) as r:
                return r.read().decode()
        return BED.in_ns(h, read)

    def total(self, h: str, pattern: str) -> float:
        return sample_sum(self.metrics(h), pattern)

    def zone(self, h: str, what: str, extra: str = "") -> float:
        """A cluster limit metric of the `api` zone on host h."""
        return self.total(h, rf'ringx_limit_cluster_{what}\{{limit="limit_req",name="api"'
                             rf'{extra}\}}')


@pytest.fixture(scope="module")
def bed(ringx_module, tmp_path_factory):
    why = skip_reason()
    if why is None:
        try:
            require_redis()
        except pytest.skip.Exception as e:
            why = str(e)
    if why:
        print(f"skipped: {why}")
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("fleet")
    leaf = Pki(tmp / "pki").leaf("t", ["t.test"])
    fleet = Fleet(ringx_module, tmp, leaf)
    try:
        BED.build()
        fleet.ready()
        yield fleet
    finally:
        fleet.close()
        BED.teardown()


@pytest.fixture
def fleet(bed) -> Fleet:
    return bed.ready()


def load(key: str, path: str = "/", conns: int = CONNS) -> Load:
    """Load to the VIP from the client namespace (not started)."""
    return Load([PORT] * conns, key, host=VIP, path=path, enter=BED.setns_to("c"), who=WHO)


def measure(key: str, path: str = "/", conns: int = CONNS) -> Load:
    return run_for([PORT] * conns, key, WINDOW, host=VIP, path=path,
                   enter=BED.setns_to("c"), who=WHO)


def served_by(ld: Load) -> set:
    return {h for h, codes in ld.by_server.items() if sum(codes.values()) > 0}


def test_a_cluster_limit_holds_across_three_hosts_where_a_local_one_admits_three_times(fleet):
    before = sum(fleet.total(h, r'ringx_limit_req_total\{zone="\d+",result="passed"\}')
                 for h in HOSTS)
    cluster = measure("spread")
    assert served_by(cluster) == set(HOSTS), cluster.by_server
    check_accuracy(cluster)
    after = sum(fleet.total(h, r'ringx_limit_req_total\{zone="\d+",result="passed"\}')
                for h in HOSTS)
    # The hosts counted what the client saw.
    assert after - before == cluster.codes[200]
    local = measure("spread-local", path="/local")
    assert served_by(local) == set(HOSTS), local.by_server
    check_accuracy(local, hosts=len(HOSTS))
    print(f"through the balancer: cluster admitted {cluster.codes[200]} in "
          f"{cluster.window():.2f}s (allowed {allowed(cluster.window()):.0f}), local "
          f"{local.codes[200]} in {local.window():.2f}s (allowed "
          f"{allowed(local.window(), len(HOSTS)):.0f}); per host "
          f"{ {h: c.get(200, 0) for h, c in sorted(cluster.by_server.items())} } / "
          f"{ {h: c.get(200, 0) for h, c in sorted(local.by_server.items())} }")
    assert sum(fleet.zone(h, "fallback_total") for h in HOSTS) == 0


def s_client(addr: str, *args) -> str:
    req = "GET / HTTP/1.1\r\nHost: t.test\r\nConnection: close\r\n\r\n"
    r = BED.run("c", "openssl", "s_client", "-connect", f"{addr}:{TLS_PORT}", "-tls1_3",
                "-servername", "t.test", "-ign_eof", *args, input=req, check=False,
                timeout=15)
    return r.stdout + r.stderr


def test_a_tls_session_from_one_host_resumes_on_another(fleet):
    if shutil.which("openssl") is None:
        print("skipped: openssl is not installed")
        pytest.skip("openssl is not installed")
    for h in HOSTS:
        wait_until(f"{h} seals with the keys from Redis", lambda h=h: fleet.total(
            h, r'ringx_tls_ticket_key_source\{source="cluster"\}') == 1)
    sess = fleet.tmp / "sess.pem"
    for a, b in (("b1", "b2"), ("b2", "b3")):
        first = s_client(BACKENDS[a], "-sess_out", str(sess))
        assert "New, TLSv1.3" in first and f"hello from {a}" in first, first
        second = s_client(BACKENDS[b], "-sess_in", str(sess))
        assert "Reused, TLSv1.3" in second and f"hello from {b}" in second, second
    assert fleet.total("b2", r'ringx_tls_tickets_total\{result="opened"\}') >= 1


def fetch(addr: str, path: str) -> tuple[int, str | None]:
    """GET path on a host, from the client namespace: (status, X-Cache-Status)."""
    def call():
        c = http.client.HTTPConnection(addr, PORT, timeout=10)
        try:
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            return r.status, r.getheader("X-Cache-Status")
        finally:
            c.close()
    return BED.in_ns("c", call)


def test_a_purge_on_one_host_removes_the_object_on_the_others(fleet):
    for h in HOSTS:
        wait_until(f"{h} subscribed", lambda h=h: fleet.total(
            h, "ringx_cluster_redis_subscribed") == 1)
    wait_until("all three alive in Redis", lambda: sorted(fleet.redis.command(
        "ZRANGE", "fleet:hosts", 0, -1)) == [h.encode() for h in HOSTS])
    path = f"/obj/{fleet.generation}-{id(fleet)}"
    for h in HOSTS:
        assert fetch(BACKENDS[h], path) == (200, "MISS")
        assert fetch(BACKENDS[h], path) == (200, "HIT")
        # A purge before the cache's writer indexed the file would be undone when it does.
        wait_until(f"{h} has it on disk", lambda h=h: fleet.total(
            h, r'ringx_cache_entries\{cache="c",tier="disk"\}') >= 1)
    key = path.replace("/", "%2F")
    st, body = fleet.admin("b1", "PURGE", f"/cache/c?key={key}&cluster=1")
    assert st == 200, body
    ans = json.loads(body)
    confirmed = {x["host"]: (x["status"], x["result"]) for x in ans["cluster"]["confirmed"]}
    assert confirmed == {"b1": (200, "applied by the request on this host"),
                         "b2": (200, "purged"), "b3": (200, "purged")}, ans
    for h in HOSTS:
        assert fetch(BACKENDS[h], path)[1] == "MISS", h


def redis_gone_and_back(fleet: Fleet, kill, back, key: str, shares: bool) -> Load:
    """A load run through the balancer during which `kill()` takes Redis away and `back()`
    brings it (or its replica) back: no request fails; every host falls back to its share
    (with `shares`, a fresh key measures them while Redis is away: they add up to the
    limit); then every host syncs again, and the cluster limit holds. Returns the run."""
    fallbacks = {h: fleet.zone(h, "fallback_total") for h in HOSTS}
    ok = {h: fleet.zone(h, "sync_total", ',result="ok"') for h in HOSTS}
    run = load(key, conns=6).start()
    try:
        wait_until("the load is admitted, refused and synced",
                   lambda: run.ok() >= BURST and run.codes.get(429, 0) > 0
                   and all(fleet.zone(h, "sync_total", ',result="ok"') > ok[h]
                           for h in HOSTS))
        kill()
        # Counted, not only shown: a failover may end the fallback before all are looked at.
        wait_until("every host falls back", lambda: all(
            fleet.zone(h, "fallback_total") > fallbacks[h] for h in HOSTS))
        at = run.answered()
        refused = run.codes.get(429, 0)
        wait_until("more answered on the fallback", lambda: run.answered() > at + 50)
        assert run.codes.get(429, 0) > refused, "the fallback still limits"
        if shares:
            assert all(fleet.zone(h, "falling_back") == 1 for h in HOSTS)
            share = measure(f"{key}-shares")
            assert all(fleet.zone(h, "falling_back") == 1 for h in HOSTS), \
                "Redis back during the measure"
            assert served_by(share) == set(HOSTS), share.by_server
            print(f"{key}: on the fallback, the three shares admitted {share.codes.get(200)} "
                  f"in {share.window():.2f}s (allowed {allowed(share.window()):.0f})")
            check_accuracy(share)
        synced = {h: fleet.zone(h, "sync_total", ',result="ok"') for h in HOSTS}
        back()
        wait_until("every host syncs again",
                   lambda: all(fleet.zone(h, "falling_back") == 0
                               and fleet.zone(h, "sync_total", ',result="ok"') > synced[h]
                               for h in HOSTS), timeout=60)
        # Each host's share of the burst is known again before a fresh key is measured.
        wait_until("every host sees three hosts again", lambda: all(
            fleet.total(h, "ringx_limit_cluster_hosts") == 3 for h in HOSTS))
    finally:
        run.finish()
    assert run.failed == 0 and set(run.codes) <= {200, 429}, (run.codes, run.failed)
    after = measure(f"{key}-after")
    print(f"{key}: synced again, the cluster admitted {after.codes.get(200)} in "
          f"{after.window():.2f}s (allowed {allowed(after.window()):.0f}); the run "
          f"answered {run.answered()} ({run.codes}), none failed")
    check_accuracy(after)
    return run


def test_redis_stopped_during_a_load_run(fleet):
    lines = ('limit_req zone "api" cannot sync with Redis',
             'limit_req zone "api" synced with Redis again')
    logged = {h: [fleet.hosts[h].log().count(x) for x in lines] for h in HOSTS}
    redis_gone_and_back(fleet, fleet.redis.stop, fleet.redis.start, "outage", shares=True)
    # Logged each way; more than once where a busy machine made a sync late (its budget is
    # 5 periods) right after Redis came back: each fallback logged, and ended.
    for h in HOSTS:
        log = fleet.hosts[h].log()
        lost, back = (log.count(x) - n for x, n in zip(lines, logged[h]))
        assert lost >= 1 and back == lost, log


def test_a_host_removed_from_the_balancer_mid_run(fleet):
    # Connections to each host, kept alive: they must outlive the removal of another.
    kept: list = []

    def open_until_each_host_has_two():
        by: dict[str, int] = {}
        while min(by.get(h, 0) for h in HOSTS) < 2:
            assert len(kept) < 200, by
            name, conn = get(path="/who")
            kept.append((name, conn))
            by[name] = by.get(name, 0) + 1
    try:
        BED.in_ns("c", open_until_each_host_has_two)
        run = load("removal").start()
        try:
            wait_until("every host admits and refuses", lambda: served_by(run) == set(HOSTS)
                       and run.codes.get(429, 0) > 0)
            fleet.balance(("b1", "b2"))
            # Established flows to b1 and b2 kept their backend through the swap.
            kept_others = [(n, c) for n, c in kept if n != "b3"]
            assert [get(c, path="/who")[0] for _, c in kept_others] == \
                [n for n, _ in kept_others]
            before = {h: dict(run.by_server.get(h, {})) for h in HOSTS}
            cut = run.answered()
            wait_until("more load answered after the removal",
                       lambda: run.answered() > cut + 200)
        finally:
            run.finish()
        assert all(run.failed_on.get(h, 0) == 0 for h in ("b1", "b2")), run.failed_on
        assert set(run.codes) <= {200, 429}, run.codes
        moved = {h: sum(run.by_server.get(h, {}).values()) - sum(before[h].values())
                 for h in ("b1", "b2")}
        assert all(v > 0 for v in moved.values()), moved
        # The cluster limit holds with two hosts serving (the third idle, still alive).
        two = measure("removal-two")
        assert served_by(two) == {"b1", "b2"}, two.by_server
        check_accuracy(two)
        # The removed host stops: its heartbeat expires, and the two remaining hosts' shares
        # grow to half each. With Redis stopped, they enforce those shares, which add up to
        # the limit.
        fleet.hosts["b3"].stop()
        wait_until("b1 and b2 count two hosts", lambda: all(
            fleet.total(h, "ringx_limit_cluster_hosts") == 2 for h in ("b1", "b2")))
        fleet.redis.stop()
        wait_until("b1 and b2 fall back",
                   lambda: all(fleet.zone(h, "falling_back") == 1 for h in ("b1", "b2")))
        for h in ("b1", "b2"):
            fleet.hosts[h].wait_log("this host enforces its share, 1/2 of the limit")
        halves = measure("removal-halves")
        assert served_by(halves) == {"b1", "b2"}, halves.by_server
        print(f"removal: two hosts admitted {two.codes.get(200)} in {two.window():.2f}s "
              f"(allowed {allowed(two.window()):.0f}); on their halves without Redis "
              f"{halves.codes.get(200)} in {halves.window():.2f}s (allowed "
              f"{allowed(halves.window()):.0f}); b3's connections failed "
              f"{run.failed_on.get('b3', 0)} times, then moved")
        check_accuracy(halves)
    finally:
        for _, c in kept:
            c.close()


def test_sentinel_failover_during_a_load_run(fleet):
    enter = BED.setns_to("r")
    fleet.replica = Redis(fleet.tmp / "redis", replica_of=fleet.redis.port, host=SHARED,
                          enter=enter).start()
    fleet.sentinel = Sentinel(fleet.tmp / "redis", fleet.redis.port, MASTER, host=SHARED,
                              enter=enter).start()
    fleet.start_hosts(f'sentinel = ["{fleet.sentinel.addr}"]\nmaster = "{MASTER}"')
    up = r'ringx_cluster_redis_up\{master="%s"\}'
    for h in HOSTS:
        wait_until(f"{h} on the master", lambda h=h: fleet.total(h, up % fleet.redis.addr) == 1)
    # The sentinel must know the replica, in sync, before it can promote it.
    wait_until("the replica is in sync", lambda: b"master_link_status:up"
               in fleet.replica.command("INFO", "replication"))
    wait_until("the sentinel knows the replica", lambda: len(fleet.sentinel.command(
        "SENTINEL", "REPLICAS", MASTER)) == 1)
    replica = fleet.replica

    def promoted():
        for h in HOSTS:
            wait_until(f"{h} follows the failover to the replica",
                       lambda h=h: fleet.total(h, up % replica.addr) == 1, timeout=60)
    redis_gone_and_back(fleet, fleet.redis.stop, promoted, "failover", shares=False)
    assert all(fleet.total(h, "ringx_cluster_redis_failovers_total") == 1 for h in HOSTS)
