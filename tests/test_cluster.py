"""[cluster] (issue 42): ringx hosts sharing state through a real Redis. Two hosts with the same
[cluster] get one ACME certificate ordered once (pebble sees one order; both serve it); a host
keeps serving while Redis is gone, says so in its log and /metrics, and reconnects by itself
when Redis is back; with Sentinel it follows a failover to the replica; a wrong [cluster] is
refused at FILE:LINE:COL."""

from __future__ import annotations

import http.client
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from acme_pebble import Pebble, pebble_bins
from conftest import free_port
from redis_peer import Redis, Sentinel, command, require_redis, wait_until


@pytest.fixture
def peers(tmp_path):
    """Redis servers, sentinels and pebbles made by the test, all stopped at its end."""
    require_redis()
    made: list = []

    def make(p):
        made.append(p)
        return p.start()
    yield make
    for p in reversed(made):
        p.stop()


def metrics(admin: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        return r.read().decode()


def metric(admin: int, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", metrics(admin), re.M)
    return float(m.group(1)) if m else None


def up(admin: int, master: str) -> float | None:
    return metric(admin, f'ringx_cluster_redis_up{{master="{master}"}}')


def site(port: int, admin: int, cluster: str, extra: str = "") -> str:
    return f"""
[runtime]
zones = 2
[admin]
listen = "127.0.0.1:{admin}"
[cluster]
{cluster}
{extra}
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "up\\n" }}
"""


def get(port: int) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/")
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def test_two_hosts_order_one_certificate_and_serve_it(ringx, peers, tmp_path):
    import test_acme

    pebble_bins()
    r = peers(Redis(tmp_path))
    tls = [free_port(), free_port()]
    admin = [free_port(), free_port()]
    # pebble validates without asking (the challenge answers live in the ordering host:
    # sharing them is later work); what is tested here is the order, the lock and storage.
    pb = peers(Pebble(tmp_path / "pebble", http_port=free_port(), tls_port=tls[0],
                      env={"PEBBLE_VA_ALWAYS_VALID": "1"}))
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pb.root_pem())
    storage = tmp_path / "acme-not-used"
    hosts = []
    for i in range(2):
        cfg = f"""
[runtime]
zones = 2
[admin]
listen = "127.0.0.1:{admin[i]}"
[cluster]
redis = ["{r.addr}"]
prefix = "fleet:"
[acme]
directory = "{pb.directory}"
ca = "{pb.listener_ca}"
storage = "{storage}"
challenge = "tls-alpn-01"
[[server]]
listen = ["127.0.0.1:{tls[i]}"]
server_name = ["c.test"]
tls = {{ acme = true }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "secure\\n" }}
"""
        hosts.append(ringx.make(cfg, name=f"host{i}"))
    leaves = [test_acme.wait_issued(p, "c.test", root) for p in tls]
    assert leaves[0].serial_number == leaves[1].serial_number
    assert test_acme.sans(leaves[0]) == ["c.test"]
    assert pb.orders() == 1, pb.log_path.read_text()[-3000:]
    ordered = [metric(a, 'ringx_acme_orders_total{result="ok"}') for a in admin]
    assert sorted(ordered) == [0, 1], ordered
    other = hosts[ordered.index(0)]
    assert "ACME: certificate loaded from storage" in other.log(), other.log()
    # Kept in Redis under the prefix, the key too; nothing on either host's disk.
    keys = command(r.port, "KEYS", "fleet:acme/*")
    names = sorted(k.decode().rsplit("/", 1)[-1] for k in keys)
    assert names == ["account.json", "cert.pem", "key.pem"], keys
    assert not storage.exists()
    # The lock is gone with the order.
    assert command(r.port, "KEYS", "fleet:acme/locks/*") == []


def test_serving_goes_on_without_redis_and_recovers(ringx, peers, tmp_path):
    r = peers(Redis(tmp_path))
    port, admin = free_port(), free_port()
    h = ringx.make(site(port, admin, f'redis = ["{r.addr}"]\ntimeout = "200ms"'))
    wait_until("connected", lambda: up(admin, r.addr) == 1)
    pid = h.pid
    r.stop()
    wait_until("the loss is seen", lambda: up(admin, r.addr) == 0)
    h.wait_log("cluster: lost the Redis master")
    # Requests do not wait on Redis, nor fail for it.
    assert [get(port) for _ in range(50)] == [200] * 50
    wait_until("a failed reconnect is counted",
               lambda: (metric(admin, 'ringx_cluster_redis_connects_total{result="error"}')
                        or 0) >= 1)
    r.start()
    wait_until("reconnected", lambda: up(admin, r.addr) == 1)
    assert metric(admin, "ringx_cluster_redis_reconnects_total") == 1
    h.wait_log("Redis reachable again")
    assert h.pid == pid and h.proc.poll() is None
    assert get(port) == 200


def test_sentinel_failover_is_followed(ringx, peers, tmp_path):
    m = peers(Redis(tmp_path))
    rep = peers(Redis(tmp_path, replica_of=m.port))
    s = peers(Sentinel(tmp_path, m.port, "mymaster"))
    port, admin = free_port(), free_port()
    ringx.make(site(port, admin, f'sentinel = ["{s.addr}"]\nmaster = "mymaster"'))
    wait_until("connected to the master", lambda: up(admin, m.addr) == 1)
    # The sentinel must know the replica, in sync, before it can promote it.
    wait_until("the replica is in sync",
               lambda: b"master_link_status:up" in command(rep.port, "INFO", "replication"))

    def failover():
        try:
            return command(s.port, "SENTINEL", "FAILOVER", "mymaster") == "OK"
        except RuntimeError:
            return False  # NOGOODSLAVE until the sentinel has seen the replica
    wait_until("the sentinel starts a failover", failover, every=0.2)
    wait_until("ringx follows it to the replica", lambda: up(admin, rep.addr) == 1, timeout=60)
    assert metric(admin, "ringx_cluster_redis_failovers_total") == 1
    assert get(port) == 200


@pytest.mark.parametrize("cluster, line, says", [
    ('redis = ["a:1"]\nsentinel = ["b:2"]\nmaster = "m"', 3, "both redis and sentinel"),
    ('sentinel = ["b:2"]', 2, "sentinel needs master"),
    ('redis = ["a:1"]\nmaster = "m"', 3, "master is for sentinel"),
    ('redis = ["nope"]', 2, "host:port"),
    ('redis = ["a:1"]\ntimeout = "soon"', 3, "invalid duration"),
    ('redis = ["a:1"]\nusername = "u"', 3, "username needs password"),
])
def test_config_errors_say_file_line(ringx_bin, tmp_path, cluster, line, says):
    f = tmp_path / "bad.toml"
    f.write_text(f"[cluster]\n{cluster}\n" + site(8080, 9901, "").split("[cluster]")[1])
    out = subprocess.run([ringx_bin, "check", "-c", str(f)], capture_output=True, text=True,
                         timeout=30)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert re.search(rf"{re.escape(str(f))}:{line}:\d+: .*{re.escape(says)}", text), text


def test_an_unusable_tls_file_stops_the_start_at_its_line(ringx_bin, tmp_path):
    f = tmp_path / "tls.toml"
    f.write_text(site(free_port(), free_port(),
                      f'redis = ["127.0.0.1:1"]\ntls = {{ ca = "{tmp_path}/none.pem" }}'))
    out = subprocess.run([ringx_bin, "serve", "-c", str(f)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode != 0
    assert re.search(rf"{re.escape(str(f))}:8:7: \[cluster\] tls: .*none.pem", out.stderr), \
        out.stderr
