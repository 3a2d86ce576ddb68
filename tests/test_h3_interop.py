"""HTTP/3 over QUIC (issue 38), the QUIC interop runner's cases that need more than one
connection or a TLS feature: resumption, 0-RTT, key update and ChaCha20, with clients no one
here wrote (Python's aioquic, Debian's ngtcp2 client `gtlsclient`) against the real binary.

Run: RINGX_BIN=target/debug/ringx python3 -m pytest -q -rs tests/test_h3_interop.py
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import subprocess

import pytest

from conftest import free_port
from conftest import metric_total as total
from test_h3 import quic_metrics, quic_server
from upstream_server import UpstreamServer

try:
    import h3_client
except ImportError:
    # CI installs it (scripts/install-deps.sh): there a missing client is a failure.
    if os.environ.get("CI"):
        raise
    pytest.skip("aioquic is not installed (pip install aioquic, or scripts/install-deps.sh)",
                allow_module_level=True)


def gtlsclient():
    """Debian's ngtcp2 client (GnuTLS), or the test skips (fails in CI)."""
    if shutil.which("gtlsclient") is None:
        if os.environ.get("CI"):
            pytest.fail("gtlsclient is missing: scripts/install-deps.sh installs ngtcp2-client")
        pytest.skip("ngtcp2's client is not installed (apt install ngtcp2-client)")
    return "gtlsclient"


def accepted_by_zone(admin):
    m = quic_metrics(admin)
    return [total(m, "ringx_quic_handshakes_total", result="accepted", zone=str(z))
            for z in (0, 1)]


def test_resumption_across_zones(ringx, tmp_path):
    """A client that comes back with the ticket of its last connection resumes it (no
    certificate, no full handshake), whichever zone took that connection: the ticket keys
    are the process's, not a zone's. Connections alternate the client's CPU (the zone a new
    connection reaches follows it when steering is on; the kernel's hash by port otherwise)
    until one resumed a ticket another zone issued."""
    admin = free_port()
    p, ca, cfg = quic_server(tmp_path, '  return = { status = 200, body = "again\\n" }\n',
                             top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n')
    ringx.make(cfg.replace("zones = 1", "zones = 2"))

    def zone_of(fetch):
        """The zone that accepted the connection `fetch` makes, and what it got."""
        before = accepted_by_zone(admin)
        got = fetch()
        after = accepted_by_zone(admin)
        return [b - a for a, b in zip(before, after)].index(1), got

    issuer, first = zone_of(lambda: h3_client.session(p, ["/"], cafile=ca, want_ticket=True))
    assert not first.resumed and first.responses[0].status == 200
    ticket, crossed = first.tickets[-1], 0
    cpus = sorted(os.sched_getaffinity(0))
    try:
        for i in range(40):
            os.sched_setaffinity(0, {cpus[i % len(cpus)]})
            zone, s = zone_of(lambda: h3_client.session(p, ["/a", "/b"], cafile=ca,
                                                        ticket=ticket, want_ticket=True))
            assert s.resumed, i
            assert [(r.status, bytes(r.body)) for r in s.responses] == [(200, b"again\n")] * 2
            crossed += zone != issuer
            if crossed >= 2:
                break
            issuer, ticket = zone, s.tickets[-1]
    finally:
        os.sched_setaffinity(0, set(cpus))
    assert crossed >= 2, "every connection reached the same zone"


def handshake_crypto_in(out):
    """The bytes of TLS handshake ngtcp2's client received in Handshake packets (its trace
    prints each CRYPTO frame): the certificate is among them unless the session resumed."""
    return sum(int(m) for m in re.findall(r" rx \d+ Handshake CRYPTO\(0x06\) offset=\d+ len=(\d+)",
                                          out))


def leaf_der_len(pem_path):
    pem = pem_path.read_text()
    end = "-----END CERTIFICATE-----"
    return len(ssl.PEM_cert_to_DER_cert(pem[:pem.index(end) + len(end)]))


def test_ngtcp2_client_resumes(ringx, tmp_path):
    """Debian's ngtcp2 client saves the session and the transport parameters of its first
    connection, and its second connection resumes them: the server sends no certificate."""
    client = gtlsclient()
    p, _, cfg = quic_server(tmp_path, '  return = { status = 200, body = "again\\n" }\n')
    ringx.make(cfg)
    cert = leaf_der_len(tmp_path / "pki" / "a.pem")
    sess, tp = tmp_path / "session.pem", tmp_path / "tp"
    args = [client, "--exit-on-all-streams-close", f"--session-file={sess}",
            f"--tp-file={tp}", "--disable-early-data", "localhost", str(p),
            f"https://localhost:{p}/"]
    runs = []
    for _ in range(2):
        r = subprocess.run(args, capture_output=True, timeout=60, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(r.stdout + r.stderr)
        assert "again" in runs[-1], runs[-1][-2000:]
        assert sess.exists() and tp.exists()
    full, resumed = handshake_crypto_in(runs[0]), handshake_crypto_in(runs[1])
    assert full > cert > resumed > 0, (full, cert, resumed)
