"""UDP segmentation offloads for HTTP/3 (issue 38): `[runtime] quic_gso` (a burst of a
connection's packets leaves in one segmented send) and `quic_gro` (a sender's packets
arrive coalesced in one receive), each on by default and switched off for a measurement
or a path that mishandles them. quic-go's client (bench/h3load), which sends with GSO
itself, downloads 1 MiB and uploads 1 MiB through a proxied location; both arrive
byte-exact either way, and `ringx_quic_batches_total` against `ringx_quic_datagrams_total`
shows what the switches did: off, one send per datagram and one receive per datagram,
exactly; on, fewer sends than datagrams for the download (GSO) and fewer receives than
datagrams for the upload (GRO). On both engines (epoll receives with recvmmsg and sends
with sendmmsg, the segments and ECN marks alike).

The kernel side (a GRO listener takes a client's segmented send whole, with its ECN bits;
a segmented send leaves ECN-marked) is checked without QUIC in crates/engine/tests/dgram.rs.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_h3_offload.py
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from conftest import free_port
from conftest import metric_total as total
from upstream_server import UpstreamServer

try:
    import h3_client  # noqa: F401  (test_h3's fixtures need it)
    from test_h3 import quic_metrics, quic_server
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("aioquic is not installed (pip install aioquic, or scripts/install-deps.sh)",
                allow_module_level=True)

MIB = 1024 * 1024


@pytest.mark.parametrize("offload", ["on", "off"])
@pytest.mark.parametrize("engine", ["uring", "epoll"])
def test_gso_and_gro_switches(ringx, tmp_path, quic_go, engine, offload):
    up = UpstreamServer("up")
    admin = free_port()
    www = tmp_path / "www"
    www.mkdir()
    data = os.urandom(MIB)
    (www / "big.bin").write_bytes(data)
    flag = "true" if offload == "on" else "false"
    p, ca, cfg = quic_server(
        tmp_path, f'  root = "{www}"\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n',
        runtime=f'engine = "{engine}"\nquic_gso = {flag}\nquic_gro = {flag}\n')
    cfg += f"""  [[server.location]]
  path = "/up"
  proxy_pass = "http://{up.addr}"
"""
    try:
        ringx.make(cfg)
        url = f"https://localhost:{p}"
        body = tmp_path / "body"
        body.write_bytes(data)
        out = tmp_path / "out"
        out.mkdir()
        r = subprocess.run([str(quic_go), "-get", "-ca", str(ca), "-out", str(out),
                            f"{url}/big.bin"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr[-2000:]
        assert (out / "0").read_bytes() == data
        sent = quic_metrics(admin)
        r = subprocess.run([str(quic_go), "-get", "-ca", str(ca), "-out", str(out),
                            "-post", str(body), f"{url}/up/upload"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr[-2000:]
        assert [json.loads(ln)["status"] for ln in r.stdout.splitlines()] == [200]
        got = json.loads((out / "0").read_bytes())
        assert got == {"len": MIB, "sha256": hashlib.sha256(data).hexdigest()}
        m = quic_metrics(admin)
        d_out = total(sent, "ringx_quic_datagrams_total", direction="out")
        s_out = total(sent, "ringx_quic_batches_total", direction="out")
        d_in = total(m, "ringx_quic_datagrams_total", direction="in")
        r_in = total(m, "ringx_quic_batches_total", direction="in")
        assert d_out > MIB // 1500 and d_in > MIB // 1500, m
        print(offload, dict(d_out=d_out, s_out=s_out, d_in=d_in, r_in=r_in))
        if offload == "off":
            assert s_out == d_out, "without GSO every datagram is its own send"
            assert r_in == d_in, "without GRO every datagram is its own receive"
        else:
            # A 1 MiB download leaves in bursts of the congestion window: segmented sends.
            assert s_out < d_out, m
            # quic-go sends the upload in GSO bursts, which reach a GRO socket whole.
            assert r_in < d_in, m
    finally:
        up.close()
