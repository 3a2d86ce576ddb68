"""HTTP/3 clients that move, behind `ringx lb` (issue 38: connection IDs that name their host).

The namespace bed of test_lb.py (tests/netns_bed.py): client -> router -> balancer (XDP,
GUE) -> backends, direct return. Two backends run ringx with HTTP/3 on the VIP, `[http]
quic_host = 1` and `2`; the balancer's UDP service gives them the same `quic_host`. An aioquic
client makes a request, moves to a new port (a NAT rebinding) or a new address (with a new
connection ID), and makes more on the same connection: every answer comes from the backend
that accepted it, although the balancer sees each move as a new 5-tuple, which its ring
would hash to either backend. Then, with the hosts taken out of the balancer's configuration,
the same moves lose some connections: the routing by ID is what kept them.

Needs root, netns, XDP and aioquic; skips with the reason otherwise.
"""

from __future__ import annotations

import os

import pytest

from netns_bed import BACKENDS, CLI, LB, LB6, VIP, Bed, skip_reason
from tls_pki import Pki

try:
    import h3_client
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("aioquic is not installed (pip install aioquic, or scripts/install-deps.sh)",
                allow_module_level=True)

BED = Bed("lq")
PORT = 8443
HOSTS = {"b1": 1, "b2": 2}
MOVED_TO = "10.88.1.10"  # a second address of the client


def backend_config(name: str, cert, key) -> str:
    # Listening on the VIP itself: the answers leave from it (direct return).
    return f"""
[runtime]
zones = 1
[http]
quic_host = {HOSTS[name]}
[[server]]
listen = ["{VIP}:{PORT}"]
tls = {{ cert = "{cert}", key = "{key}" }}
quic = true
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{name}\\n" }}
"""


def lb_config(with_hosts: bool) -> str:
    bl = ", ".join(
        f'{{ addr = "{BACKENDS[b]}"' + (f", quic_host = {h}" if with_hosts else "") + " }"
        for b, h in HOSTS.items())
    return f"""
[lb]
devices = ["l0"]
mode = "native"
encap = "gue"
gue_port = 6080
source_v4 = "{LB}"
source_v6 = "{LB6}"
pin_dir = "{BED.pin}/lb"
conn_table_size = 65536

[[lb.service]]
vip = "{VIP}:{PORT}"
proto = "udp"
backends = [{bl}]
"""


@pytest.fixture(scope="module")
def bed(ringx_module, tmp_path_factory):
    why = skip_reason()
    if why:
        print(f"skipped: {why}")
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("lbquic")
    pki = Pki(tmp / "pki")
    cert, key = pki.leaf("a", ["localhost"])
    servers = []
    try:
        BED.build()
        BED.run("c", "ip", "addr", "add", f"{MOVED_TO}/24", "dev", "c0")
        for b in HOSTS:
            servers.append(ringx_module.make(backend_config(b, cert, key), name=f"lq-{b}",
                                             preexec_fn=BED.setns_to(b)))
        cfg = tmp / "lb.toml"
        cfg.write_text(lb_config(True))
        out = BED.lb("attach", "--dev", "l0", "-c", cfg)
        assert "attached the balancer to l0" in out.stdout, out.stdout + out.stderr
        yield {"ca": pki.ca_path, "cfg": cfg, "servers": servers}
    finally:
        for r in servers:
            r.stop()
        BED.teardown()


def moves(bed, n: int, timeout: float) -> list[tuple[str, list[str]] | str]:
    """n connections from the client namespace, each: a request, a move (odd ones to a new
    port, even ones to the second address with a new connection ID), two more requests.
    Each gives (who answered first, who answered after) or the error that ended it."""
    def run():
        out = []
        for i in range(n):
            ip, new_cid = (CLI, False) if i % 2 else (MOVED_TO, True)
            try:
                first, then, moved_to = h3_client.migrate(
                    PORT, ["/a"], ["/b", "/c"], bed["ca"], ip, new_cid, timeout=timeout,
                    server=VIP)
            except Exception as e:  # a lost connection: the caller counts it
                out.append(f"{type(e).__name__}: {e}")
                continue
            assert moved_to == ip
            assert all(r.status == 200 for r in first + then)
            out.append((bytes(first[0].body).decode().strip(),
                        [bytes(r.body).decode().strip() for r in then]))
        return out
    return BED.in_ns("c", run)


def fwd_quic() -> int:
    return BED.lb_stats()["reasons"]["fwd_quic"]["packets"]


def test_moved_clients_stay_on_their_backend(bed):
    n = 12
    before = fwd_quic()
    got = moves(bed, n, timeout=10)
    lost = [g for g in got if isinstance(g, str)]
    assert not lost, (lost, [s.log() for s in bed["servers"]])
    for first, then in got:
        assert then == [first, first], got
    # Both backends accepted connections (the ring spreads the Initials), and each move's
    # first packet on its new path went by the ID.
    assert {first for first, _ in got} == set(HOSTS), got
    assert fwd_quic() - before >= n

    # Without the hosts, a move is a new 5-tuple the ring hashes to either backend: some of
    # the connections land where they have no state (the chance that all twelve hash to
    # their own backend is 1 in 4096).
    bed["cfg"].write_text(lb_config(False))
    out = BED.lb("attach", "--dev", "l0", "-c", bed["cfg"])
    assert "swapped the balancer on l0" in out.stdout, out.stdout + out.stderr
    try:
        before = fwd_quic()
        got = moves(bed, n, timeout=3)
        kept = [g for g in got if not isinstance(g, str) and g[1] == [g[0], g[0]]]
        assert len(kept) < n, got
        assert fwd_quic() == before
    finally:
        bed["cfg"].write_text(lb_config(True))
        BED.lb("attach", "--dev", "l0", "-c", bed["cfg"])
