"""HTTP/3 over QUIC (issue 38), the QUIC interop runner's cases that need more than one
connection or a TLS feature: resumption, 0-RTT, key update and ChaCha20, with clients no one
here wrote (Python's aioquic, Debian's ngtcp2 client `gtlsclient`) against the real binary.

Run: RINGX_BIN=target/debug/ringx python3 -m pytest -q -rs tests/test_h3_interop.py
"""

from __future__ import annotations

import os
import re
import signal
import shutil
import socket
import ssl
import subprocess
import time

import pytest

from conftest import free_port
from conftest import metric_total as total
# test_h3 skips (fails in CI) without aioquic, and this module with it.
from test_h3 import h3_client, quic_metrics, quic_server
from udp_relay import Relay
from upstream_server import UpstreamServer


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
    # Each connection after the first resumed, as the server counts it too.
    hs = handshakes(admin)
    assert hs["full"] == 1 and hs["resumed"] >= 2, hs


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


def early_server(ringx, tmp_path, early=True, zones=2):
    """A QUIC server with `quic_early_data = early` whose "/" answers itself and "/up/"
    proxies to a recording upstream. Returns its port, CA, admin port and the upstream."""
    admin = free_port()
    up = UpstreamServer("up")
    p, ca, cfg = quic_server(
        tmp_path, '  return = { status = 200, body = "early\\n" }\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n[http]\n'
            f'quic_early_data = {"true" if early else "false"}\n'
            f'access_log = "{tmp_path / "access.log"}"\naccess_log_format = "json"\n')
    cfg += f'  [[server.location]]\n  path = "/up/"\n  proxy_pass = "http://{up.addr}/"\n'
    ringx.make(cfg.replace("zones = 1", f"zones = {zones}"))
    return p, ca, admin, up


def access_log(ringx, tmp_path, lines):
    """The first `lines` lines of the access log of the server `early_server` made last,
    once the zones wrote them (SIGUSR1 reopens the log, flushing what a zone holds)."""
    import json
    log = tmp_path / "access.log"

    def got():
        ringx.instances[-1].signal(signal.SIGUSR1)
        return log.exists() and len(log.read_text().splitlines()) >= lines

    wait_for(got, f"{lines} access log lines")
    return [json.loads(ln) for ln in log.read_text().splitlines()]


def early_counts(admin):
    m = quic_metrics(admin)
    return {r: total(m, "ringx_quic_early_data_total", result=r)
            for r in ("accepted", "refused", "served", "too_early")}


def handshakes(admin):
    """QUIC handshakes completed, full and resumed."""
    m = quic_metrics(admin)
    return {r: total(m, "ringx_quic_tls_handshakes_total", result=r) for r in ("full", "resumed")}


def upstream_got(up, target):
    with up._lock:
        return [r for r in up.requests if r["target"] == target]


def header(req, name):
    return [v for k, v in req["headers"] if k.lower() == name]


def test_early_get_is_served_and_says_so_upstream(ringx, tmp_path):
    """With quic_early_data, a client back with its ticket sends GETs in 0-RTT: the server
    accepts them (aioquic sees its early data accepted), answers the local one, and the one
    it proxies reaches the upstream with Early-Data: 1. A 1-RTT request does not carry it."""
    p, ca, admin, up = early_server(ringx, tmp_path)
    try:
        first = h3_client.session(p, ["/up/one"], cafile=ca, want_ticket=True)
        assert first.responses[0].status == 200 and not first.early_accepted
        ticket = first.tickets[-1]
        assert ticket.max_early_data_size == 0xFFFFFFFF  # QUIC's only value (RFC 9001 §4.6.1)
        s = h3_client.session(p, ["/", "/up/two"], cafile=ca, ticket=ticket, early=True)
        assert s.resumed and s.early_accepted
        assert [(r.status, bytes(r.body)) for r in s.responses] == [(200, b"early\n"),
                                                                    (200, b"ok")]
        (two,) = upstream_got(up, "/two")
        assert header(two, "early-data") == ["1"]
        (one,) = upstream_got(up, "/one")
        assert header(one, "early-data") == []
        assert early_counts(admin) == {"accepted": 1, "refused": 0, "served": 2, "too_early": 0}
        assert handshakes(admin) == {"full": 1, "resumed": 1}
        reused = {ln["request"].split()[1]: ln["ssl_session_reused"]
                  for ln in access_log(ringx, tmp_path, 3)}
        assert reused == {"/up/one": ".", "/": "r", "/up/two": "r"}, reused
    finally:
        up.close()


def test_early_post_is_too_early(ringx, tmp_path):
    """A POST (not a safe method) in 0-RTT is answered 425 Too Early and never reaches the
    upstream; sent again after the handshake it is served."""
    p, ca, admin, up = early_server(ringx, tmp_path)
    try:
        first = h3_client.session(p, ["/"], cafile=ca, want_ticket=True)
        s = h3_client.session(p, ["/up/post"], cafile=ca, ticket=first.tickets[-1], early=True,
                              method="POST", body=b"twice?", want_ticket=True)
        assert s.early_accepted
        assert s.responses[0].status == 425
        assert upstream_got(up, "/post") == []
        assert early_counts(admin) == {"accepted": 1, "refused": 0, "served": 0, "too_early": 1}
        # The client's retry, once its handshake is done (RFC 8470 §5.2).
        again = h3_client.session(p, ["/up/post"], cafile=ca, ticket=s.tickets[-1],
                                  method="POST", body=b"twice?")
        assert again.resumed and again.responses[0].status == 200
        assert handshakes(admin) == {"full": 1, "resumed": 2}
        (post,) = upstream_got(up, "/post")
        assert post["body_len"] == 6 and header(post, "early-data") == []
    finally:
        up.close()


def test_early_data_off_answers_after_the_handshake(ringx, tmp_path):
    """With quic_early_data off (the default), a client that sends a request in 0-RTT (its
    ticket allowed it: a server that had it on gave it) has its early data refused; it sends
    the request again in 1-RTT and gets the answer, which the upstream got without
    Early-Data."""
    p_on, ca, _, up_on = early_server(ringx, tmp_path / "on", zones=1)
    p, _, admin, up = early_server(ringx, tmp_path / "off", early=False)
    try:
        ticket = h3_client.session(p_on, ["/"], cafile=ca, want_ticket=True).tickets[-1]
        assert ticket.max_early_data_size == 0xFFFFFFFF
        # The second server's certificate is from another CA: not checked here.
        s = h3_client.session(p, ["/up/late"], ticket=ticket, early=True)
        assert not s.early_accepted and not s.resumed
        assert s.responses[0].status == 200 and bytes(s.responses[0].body) == b"ok"
        (late,) = upstream_got(up, "/late")
        assert header(late, "early-data") == []
        # The client's early data counted as refused, the handshake as a full one.
        assert early_counts(admin) == {"accepted": 0, "refused": 1, "served": 0, "too_early": 0}
        assert handshakes(admin) == {"full": 1, "resumed": 0}
        # Its own tickets are stateless and allow no early data.
        t = h3_client.session(p, ["/"], want_ticket=True).tickets[-1]
        assert t.max_early_data_size is None
    finally:
        up.close()
        up_on.close()


def wait_for(cond, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_replayed_first_flight_gets_no_second_request(ringx, tmp_path):
    """An attacker who captured a client's first flight (ClientHello and a GET in 0-RTT)
    sends it again from another port once the client is gone: the ticket was used, so the
    server makes a full handshake of it and accepts no early data; the upstream saw the GET
    once. (One zone: the requests that follow the replay are then read after it.)"""
    p, ca, admin, up = early_server(ringx, tmp_path, zones=1)
    relay = Relay(p)
    try:
        ticket = h3_client.session(p, ["/"], cafile=ca, want_ticket=True).tickets[-1]
        s = h3_client.session(relay.port, ["/up/once"], cafile=ca, ticket=ticket, early=True)
        assert s.early_accepted and s.responses[0].status == 200
        assert len(upstream_got(up, "/once")) == 1
        flight = list(relay.first_flight)
        assert flight and flight[0][0] & 0xF0 == 0xC0  # a long header: the Initial
        # The client's connection is gone from the server (closed, then drained).
        m = quic_metrics(admin)
        wait_for(lambda: total(quic_metrics(admin), "ringx_quic_connections") == 0,
                 "the client's connection to be drained")
        before = quic_metrics(admin)
        seen = total(before, "ringx_quic_datagrams_total", direction="in")
        attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        attacker.bind(("127.0.0.1", 0))
        attacker.settimeout(10)
        for d in flight:
            attacker.sendto(d, ("127.0.0.1", p))
        # The server answers the replayed Initial (a full handshake it will never finish).
        attacker.recvfrom(65536)
        wait_for(lambda: total(quic_metrics(admin), "ringx_quic_datagrams_total",
                               direction="in") >= seen + len(flight),
                 "the zone to read the replayed datagrams")
        # A request after the replay, on the same zone, as a barrier.
        (r,) = h3_client.get(p, ["/up/after"], cafile=ca)
        assert r.status == 200 and len(upstream_got(up, "/after")) == 1
        assert len(upstream_got(up, "/once")) == 1
        after = quic_metrics(admin)
        accepted = lambda m: total(m, "ringx_quic_early_data_total", result="accepted")
        served = lambda m: total(m, "ringx_quic_early_data_total", result="served")
        refused = lambda m: total(m, "ringx_quic_early_data_total", result="refused")
        assert (accepted(m), served(m), refused(m)) == (1, 1, 0)
        # The replayed first flight's early data refused, though its handshake never ends.
        assert (accepted(after), served(after), refused(after)) == (1, 1, 1)
        assert total(after, "ringx_quic_handshakes_total", result="accepted") == \
            total(before, "ringx_quic_handshakes_total", result="accepted") + 2
        attacker.close()
    finally:
        relay.close()
        up.close()


def test_ngtcp2_client_early_data(ringx, tmp_path):
    """ngtcp2's client, back with the session and transport parameters of its first
    connection, sends its GET in 0-RTT: accepted, and the upstream sees Early-Data: 1."""
    client = gtlsclient()
    p, _, admin, up = early_server(ringx, tmp_path)
    try:
        sess, tp = tmp_path / "session.pem", tmp_path / "tp"
        runs = []
        for path in ("/up/first", "/up/second"):
            r = subprocess.run([client, "--exit-on-all-streams-close",
                                f"--session-file={sess}", f"--tp-file={tp}", "localhost",
                                str(p), f"https://localhost:{p}{path}"],
                               capture_output=True, timeout=60, text=True)
            runs.append(r.stdout + r.stderr)
            assert r.returncode == 0, runs[-1][-2000:]
        assert " 0RTT " not in runs[0] and " 0RTT " in runs[1], runs[1][-3000:]
        assert "Early data was rejected" not in runs[1]
        (first,), (second,) = upstream_got(up, "/first"), upstream_got(up, "/second")
        assert header(first, "early-data") == [] and header(second, "early-data") == ["1"]
        assert early_counts(admin) == {"accepted": 1, "refused": 0, "served": 1, "too_early": 0}
    finally:
        up.close()


BIG = 1024 * 1024


@pytest.fixture(scope="module")
def files(ringx_module, tmp_path_factory):
    """Two zones serving two 1 MiB files of random bytes and a `return`."""
    d = tmp_path_factory.mktemp("h3-interop")
    www = d / "www"
    www.mkdir()
    data = {n: os.urandom(BIG) for n in ("a.bin", "b.bin")}
    for n, b in data.items():
        (www / n).write_bytes(b)
    p, ca, cfg = quic_server(d, f'  root = "{www}"\n')
    cfg += '  [[server.location]]\n  path = "/r"\n  return = { status = 200, body = "r\\n" }\n'
    ringx_module.make(cfg.replace("zones = 1", "zones = 2"), name="h3-interop")
    return dict(port=p, ca=ca, data=data)


def assert_byte_exact(files, paths, responses):
    assert len(responses) == len(paths)
    for path, r in zip(paths, responses):
        want = b"r\n" if path.startswith("/r") else files["data"][path.lstrip("/")]
        assert r.status == 200 and bytes(r.body) == want, (path, r.status, len(r.body))


# ngtcp2 refuses to start a key update within 3 PTO of the last one (RFC 9001 §6.5), and
# its client then closes the connection with NO_ERROR and exits 0, downloads unfinished.
# quinn-proto updates its own keys after a random 10 to 1,000 packets, so about one run in
# fifty its update lands just before the client's 1 ms timer: that run shows nothing of
# the server and is made again.
CLIENT_REFUSED_ITS_UPDATE = "ngtcp2_conn_initiate_key_update: ERR_INVALID_STATE"


def ngtcp2_download(files, tmp_path, paths, *opts):
    """Downloads `paths` with ngtcp2's client and `opts`; checks them byte-exact and
    returns its trace."""
    client = gtlsclient()
    p = files["port"]
    for attempt in range(5):
        out = tmp_path / f"dl{attempt}"
        out.mkdir()
        r = subprocess.run([client, "--exit-on-all-streams-close", "--no-quic-dump",
                            "--no-http-dump", f"--download={out}", *opts, "localhost",
                            str(p), *[f"https://localhost:{p}{path}" for path in paths]],
                           capture_output=True, timeout=60, text=True)
        trace = r.stdout + r.stderr
        if CLIENT_REFUSED_ITS_UPDATE not in trace:
            break
    assert r.returncode == 0, trace[-2000:]
    assert CLIENT_REFUSED_ITS_UPDATE not in trace, trace[-3000:]
    for path in paths:
        name = path.lstrip("/")
        got = (out / name).read_bytes() if (out / name).exists() else None
        assert got == files["data"][name], \
            (name, None if got is None else len(got), r.returncode, trace[-3000:])
    return trace


def test_key_update_keeps_the_connection_served(files):
    """aioquic updates its 1-RTT keys between two batches of requests (RFC 9001 §6), and
    every answer, before and after, is byte-exact: the answers after it could be read only
    because the server followed (a packet in the old phase no longer decrypts). quinn-proto
    also updates its own keys every few hundred packets, which aioquic follows in turn."""
    before = ["/r", "/a.bin", "/r?2", "/b.bin"]
    after = ["/b.bin", "/r?3", "/a.bin", "/r?4"]
    s = h3_client.session(files["port"], before, cafile=files["ca"], after_key_update=after)
    assert s.key_updates[:1] == ["local_update"], s.key_updates
    assert_byte_exact(files, before + after, s.responses)


def test_ngtcp2_client_key_update(files, tmp_path):
    """ngtcp2's client updates its keys 1 ms into two 1 MiB downloads: the server confirms
    the update (its packets in the new phase) and the files arrive byte-exact."""
    trace = ngtcp2_download(files, tmp_path, ["/a.bin", "/b.bin"], "--key-update=1ms")
    assert "Initiate key update" in trace and "key update confirmed" in trace, trace[-3000:]


def test_chacha20_only_client_is_served(files):
    """aioquic offering TLS_CHACHA20_POLY1305_SHA256 alone (a client without AES
    acceleration would): the handshake takes it, and the answers are byte-exact. (Initial
    packets are AES-128-GCM whatever the suite, RFC 9001 §5.2.)"""
    from aioquic.tls import CipherSuite
    paths = ["/a.bin", "/r", "/b.bin"]
    s = h3_client.session(files["port"], paths, cafile=files["ca"],
                          cipher_suites=[CipherSuite.CHACHA20_POLY1305_SHA256])
    assert s.cipher == CipherSuite.CHACHA20_POLY1305_SHA256
    assert_byte_exact(files, paths, s.responses)


def test_ngtcp2_client_chacha20(files, tmp_path):
    """ngtcp2's client (GnuTLS) with ChaCha20-Poly1305 as its only cipher: negotiated, and
    two 1 MiB downloads byte-exact, with a key update among them (ChaCha20's keys update
    as AES's do)."""
    trace = ngtcp2_download(files, tmp_path, ["/a.bin", "/b.bin"], "--key-update=1ms",
                            "--ciphers=NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:"
                            "+CHACHA20-POLY1305")
    assert "Negotiated cipher suite is CHACHA20-POLY1305" in trace, trace[-3000:]
    assert "key update confirmed" in trace


def test_a_client_back_from_a_known_path_starts_at_its_size(ringx, tmp_path):
    """Once a connection's handshake is done, the server searches its path for larger
    datagrams (1,326, 1,389, 1,420, then 1,452 bytes, each probe acknowledged before the
    next); the zone records each size acknowledged for the client's address, and the
    client's next connection starts at the largest: its handshake flight comes in datagrams
    over 1,200 bytes (the test certificate's flight fits one), where the first one's came in
    1,200 (`ringx_quic_known_paths_total`; crates/quic/src/known_paths.rs)."""
    admin = free_port()
    p, ca, cfg = quic_server(tmp_path, '  return = { status = 200, body = "sized\\n" }\n',
                             top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n')
    ringx.make(cfg)  # one zone: both connections reach it

    def paths(event):
        return total(quic_metrics(admin), "ringx_quic_known_paths_total", event=event)

    def flight(sizes):
        """The size of the server's first datagram of its flight (one carrying an Initial is
        at least 1,200 bytes; a lone ACK of the client's first Initial may come before)."""
        return next(n for n in sizes if n >= 1200)

    # aioquic acknowledges every probe: held open, the first connection's search ends at
    # the top.
    first, sizes = h3_client.get_sized(p, ["/"], ca, until=lambda: paths("learned") >= 4)
    assert [(r.status, bytes(r.body)) for r in first] == [(200, b"sized\n")]
    assert flight(sizes) == 1200, sizes
    assert 1452 in sizes, sizes  # the last probe
    assert paths("used") == 0
    second, sizes = h3_client.get_sized(p, ["/", "/"], ca)
    assert [(r.status, bytes(r.body)) for r in second] == [(200, b"sized\n")] * 2
    assert 1200 < flight(sizes) <= 1452, sizes
    assert (paths("used"), paths("learned"), paths("forgotten")) == (1, 4, 0)


def test_ngtcp2_client_migrates_mid_download(files, tmp_path):
    """ngtcp2's client moves to a new local port 1 ms after its handshake, in the middle of
    two 1 MiB downloads, as a client that changed networks does (it validates the new
    path). Over two zones the kernel's hash would hand the new 4-tuple to either; the files
    arrive byte-exact because the reuseport program reads the zone from the connection ID.

    Its `--nat-rebinding` (a move without path validation) is left out: it ignores what
    still comes to its old port, so about one run in ten its packets from the new port
    carry nothing but a NEW_CONNECTION_ID frame, again at each PTO, and a server that
    follows RFC 9000 §9.3 (quinn-proto) does not migrate on probing frames alone; the
    connection stalls until its idle timeout. aioquic's port rebinding is in
    test_h3.py."""
    if os.geteuid() != 0:
        pytest.skip("steering by connection ID needs root (an eBPF reuseport program)")
    trace = ngtcp2_download(files, tmp_path, ["/a.bin", "/b.bin"], "--change-local-addr=1ms")
    assert "Local address is now" in trace, trace[-3000:]


def test_ngtcp2_client_follows_a_retry(ringx, tmp_path):
    """`quic_retry = "always"`: ngtcp2's client gets a Retry, sends its Initial again with
    the token, and is served (the interop runner's "retry")."""
    client = gtlsclient()
    admin = free_port()
    p, ca, cfg = quic_server(
        tmp_path, '  return = { status = 200, body = "after a retry\\n" }\n',
        top=f'[admin]\nlisten = "127.0.0.1:{admin}"\n[http]\nquic_retry = "always"\n')
    ringx.make(cfg)
    out = tmp_path / "dl"
    out.mkdir()
    r = subprocess.run([client, "-q", "--exit-on-all-streams-close", f"--download={out}",
                        "localhost", str(p), f"https://localhost:{p}/x"],
                       capture_output=True, timeout=60, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    assert (out / "x").read_bytes() == b"after a retry\n"
    m = quic_metrics(admin)
    assert total(m, "ringx_quic_handshakes_total", result="retry") == 1, m
    assert total(m, "ringx_quic_handshakes_total", result="accepted") == 1, m


def test_many_connections_at_once(files):
    """The interop runner's "multiconnect", at once: 16 connections from as many threads,
    each downloading a 1 MiB file and a `return`, all byte-exact."""
    import threading
    got = {}

    def one(i):
        paths = ["/a.bin" if i % 2 else "/b.bin", f"/r?{i}"]
        got[i] = (paths, h3_client.get(files["port"], paths, cafile=files["ca"], timeout=30))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == list(range(16))
    for paths, responses in got.values():
        assert_byte_exact(files, paths, responses)
