"""HTTP/3 over QUIC (issue 38) on a path that loses packets: a relay between aioquic and
ringx drops some of ringx's datagrams, the download still arrives byte-exact, and /metrics
counts what was lost (`ringx_quic_packets_lost_total`, `ringx_quic_lost_bytes_total`,
`ringx_quic_congestion_events_total`) against what was sent
(`ringx_quic_packets_sent_total`).

Run: RINGX_BIN=target/debug/ringx python3 -m pytest -q -rs tests/test_h3_loss.py
"""

from __future__ import annotations

import os

from conftest import free_port
from conftest import metric_total as total
# test_h3 skips (fails in CI) without aioquic, and this module with it.
from test_h3 import h3_client, quic_metrics, quic_server
from udp_relay import Relay


def test_lost_packets_are_sent_again_and_counted(ringx, tmp_path):
    admin = free_port()
    www = tmp_path / "www"
    www.mkdir()
    data = os.urandom(1024 * 1024)
    (www / "big.bin").write_bytes(data)
    p, ca, cfg = quic_server(tmp_path, f'  root = "{www}"\n',
                             top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n')
    ringx.make(cfg)
    # Every tenth datagram ringx sends past its first twenty (the handshake's), so it is
    # the downloads' data that goes missing: each a loss ringx must detect and repair.
    relay = Relay(p, drop=lambda n: n > 20 and n % 10 == 0)
    try:
        s = h3_client.session(relay.port, ["/big.bin", "/big.bin"], cafile=ca, timeout=60)
    finally:
        relay.close()
    assert [(r.status, bytes(r.body) == data) for r in s.responses] == [(200, True)] * 2
    assert relay.dropped > 50, relay.dropped
    m = quic_metrics(admin)
    sent = total(m, "ringx_quic_packets_sent_total")
    lost = total(m, "ringx_quic_packets_lost_total")
    # Past the handshake each datagram carries one packet, and only the client closes (a
    # close packet is sent but not counted), so packets sent are at least the datagrams
    # sent (the handshake's coalesced ones make a few more). A dropped one is declared
    # lost once the client acknowledges packets sent after it, which it does all through
    # the downloads (only what is dropped at the very end may go unnoticed).
    assert sent >= total(m, "ringx_quic_datagrams_total", direction="out") > 0, m
    assert relay.dropped // 2 <= lost < sent, (relay.dropped, m)
    assert total(m, "ringx_quic_lost_bytes_total") >= 1000, m
    assert total(m, "ringx_quic_congestion_events_total") >= 1, m
