"""[cluster] (issue 42): the CA's validation reaches a host other than the one that ordered, as it
may behind `ringx lb`, and that host answers it. Two ringx hosts share one Redis; pebble validates
through a stand-in balancer that sends every validation connection to the host that does NOT hold
the ordering lock. The ordering host posts its http-01 key authorization (or tls-alpn-01's) to
Redis and to every host before telling pebble to validate; the certificate is issued once and
served by both; the answers are taken down when the order ends."""

from __future__ import annotations

import re
import shutil
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from acme_pebble import Pebble, pebble_bins
from conftest import close_listener, free_port
from redis_peer import Redis, command, require_redis, wait_until

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="openssl is not installed (the checks use s_client)")

PREFIX = "fleet:"
LOCK = f"{PREFIX}acme/locks/c.test"


def metric(admin: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


class Balancer:
    """A TCP relay in front of the hosts, as `ringx lb` is: each connection to `port(kind)`
    goes to the backend `route()` picks at that moment (None: the connection is closed).
    Records, per connection, the kind, the backend's index and the first bytes sent."""

    def __init__(self, backends: dict[str, list[int]], route):
        self.backends, self.route = backends, route
        self.seen: list[tuple[str, int | None, bytes]] = []
        self.lock = threading.Lock()
        self.listeners: dict[str, socket.socket] = {}
        self.threads: list[threading.Thread] = []
        for kind in backends:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", free_port()))
            s.listen(16)
            self.listeners[kind] = s
            t = threading.Thread(target=self._accept, args=(kind, s), daemon=True)
            t.start()
            self.threads.append(t)

    def port(self, kind: str) -> int:
        return self.listeners[kind].getsockname()[1]

    def _accept(self, kind: str, s: socket.socket) -> None:
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(kind, c), daemon=True).start()

    def _relay(self, kind: str, c: socket.socket) -> None:
        i = self.route()
        record = [kind, i, b""]
        with self.lock:
            self.seen.append(record)
        if i is None:
            c.close()
            return
        try:
            b = socket.create_connection(("127.0.0.1", self.backends[kind][i]), timeout=10)
        except OSError:
            c.close()
            return

        def pump(src: socket.socket, dst: socket.socket, first: bool) -> None:
            try:
                while data := src.recv(65536):
                    if first and len(record[2]) < 512:
                        record[2] += data[:512]
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        back = threading.Thread(target=pump, args=(b, c, False), daemon=True)
        back.start()
        pump(c, b, True)
        back.join(timeout=20)
        c.close()
        b.close()

    def stop(self) -> None:
        for s in self.listeners.values():
            close_listener(s)
        for t in self.threads:
            t.join(timeout=5)


@pytest.fixture
def fleet_peers(tmp_path):
    """Skips (saying why) without redis-server or pebble; stops what the test started."""
    require_redis()
    pebble_bins()
    made: list = []
    yield made
    for p in reversed(made):
        p.stop()


@pytest.mark.parametrize("challenge", ["http-01", "tls-alpn-01"])
def test_a_validation_that_reaches_another_host_is_answered_there(
        ringx, fleet_peers, tmp_path, challenge):
    import test_acme

    r = Redis(tmp_path).start()
    fleet_peers.append(r)
    plain = [free_port(), free_port()]
    tls = [free_port(), free_port()]
    admin = [free_port(), free_port()]
    pids: list[int] = []

    def not_the_orderer() -> int | None:
        """The host that does not hold the order's lock (its token is HOST/PID/HEX)."""
        token = command(r.port, "GET", LOCK)
        if token is None or len(pids) < 2:
            return None
        holder = int(token.split(b"/")[1])
        others = [i for i, p in enumerate(pids) if p != holder]
        return others[0] if len(others) == 1 else None

    lb = Balancer({"http": plain, "tls": tls}, not_the_orderer)
    fleet_peers.append(lb)
    pb = Pebble(tmp_path / "pebble", http_port=lb.port("http"), tls_port=lb.port("tls"))
    fleet_peers.append(pb)
    pb.start()
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pb.root_pem())
    # Held by the test until both hosts are up and heard from, so that the host that takes it
    # next waits for the other's confirmation, whichever it is.
    assert command(r.port, "SET", LOCK, "test/0/held", "PX", "60000") == "OK"
    hosts = []
    for i in range(2):
        hosts.append(ringx.make(f"""
[runtime]
zones = 2
[admin]
listen = "127.0.0.1:{admin[i]}"
[cluster]
redis = ["{r.addr}"]
prefix = "{PREFIX}"
host_id = "host{i}"
[acme]
directory = "{pb.directory}"
ca = "{pb.listener_ca}"
storage = "{tmp_path / 'acme-not-used'}"
challenge = "{challenge}"
[[server]]
listen = ["127.0.0.1:{plain[i]}"]
server_name = ["c.test"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "plain\\n" }}
[[server]]
listen = ["127.0.0.1:{tls[i]}"]
server_name = ["c.test"]
tls = {{ acme = true }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "secure\\n" }}
""", name=f"host{i}"))
        pids.append(hosts[-1].pid)
    for h in hosts:
        h.wait_log("is held by test/0/held; waiting for it")
    wait_until("both hosts heartbeat",
               lambda: sorted(command(r.port, "ZRANGE", f"{PREFIX}hosts", "0", "-1"))
               == [b"host0", b"host1"])
    assert command(r.port, "DEL", LOCK) == 1

    leaves = [test_acme.wait_issued(p, "c.test", root) for p in tls]
    assert leaves[0].serial_number == leaves[1].serial_number
    assert pb.orders() == 1, pb.log_path.read_text()[-3000:]
    ordered = [metric(a, 'ringx_acme_orders_total{result="ok"}') for a in admin]
    assert sorted(ordered) == [0, 1], ordered
    orderer, other = ordered.index(1), ordered.index(0)
    # Every validation went to the host that did not order, and was answered there.
    with lb.lock:
        seen = list(lb.seen)
    kind = "http" if challenge == "http-01" else "tls"
    assert seen and all(k == kind and i == other for k, i, _ in seen), seen
    received = 'ringx_acme_cluster_challenges_total{result="received"}'
    assert metric(admin[other], received) == 1
    assert metric(admin[orderer], 'ringx_acme_cluster_challenges_total{result="posted"}') == 1
    assert metric(admin[orderer], received) == 0
    if challenge == "http-01":
        known = 'ringx_acme_http01_requests_total{token="known"}'
        assert metric(admin[other], known) >= 1
        assert metric(admin[orderer], known) == 0
        token = re.search(rb"GET /\.well-known/acme-challenge/([A-Za-z0-9_-]+) ", seen[0][2])
        assert token, seen[0][2]
        path = f"/.well-known/acme-challenge/{token.group(1).decode()}"
        # Taken down on both hosts when the order ended.
        wait_until("the answer is taken down everywhere",
                   lambda: [status(p, path) for p in plain] == [404, 404])
    else:
        assert all(re.search(rb"acme-tls/1", first) for _, _, first in seen), seen
    assert command(r.port, "KEYS", f"{PREFIX}acme/challenges/*") == []
    assert "ACME: certificate loaded from storage" in hosts[other].log()
