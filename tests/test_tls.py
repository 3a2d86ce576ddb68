"""HTTPS termination (issue 21): real clients (curl, openssl s_client, Python's ssl) against the
real binary, with certificates made by tests/tls_pki.py.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_tls.py
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import close_listener, free_port, runtime_section
from tls_pki import Pki
from upstream_server import UpstreamServer

BIG = 10 * 1024 * 1024


@pytest.fixture(scope="module")
def site(ringx_module, tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    pki = Pki(d / "pki")
    a_rsa = pki.leaf("a-rsa", ["a.test", "*.a.test"], kind="rsa")
    a_ec = pki.leaf("a-ec", ["a.test", "*.a.test"], kind="ec")
    b_ec = pki.leaf("b", ["b.test"])
    m_ec = pki.leaf("m", ["m.test"])
    clients = Pki(d / "clients", name="client CA")
    alice = clients.leaf("alice", ["alice"], client=True, cn="alice")
    www = d / "www"
    www.mkdir()
    data = os.urandom(BIG)
    (www / "big.bin").write_bytes(data)
    up = UpstreamServer("up")
    p, q, r = free_port(), free_port(), free_port()
    cfg = runtime_section(None, zones=1, extra="") + f"""
[http]
client_header_timeout = "2s"
[[server]]
listen = ["127.0.0.1:{p}"]
server_name = ["a.test", "*.a.test"]
tls = [{{ cert = "{a_rsa[0]}", key = "{a_rsa[1]}" }}, {{ cert = "{a_ec[0]}", key = "{a_ec[1]}" }}]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "site a\\n" }}
  [[server.location]]
  path = "/f/"
  alias = "{www}/"
  [[server.location]]
  path = "/up/"
  proxy_pass = "http://{up.addr}"
[[server]]
listen = ["127.0.0.1:{p}"]
server_name = ["b.test"]
tls = {{ cert = "{b_ec[0]}", key = "{b_ec[1]}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "site b\\n" }}
[[server]]
listen = ["127.0.0.1:{q}"]
server_name = ["m.test"]
tls = {{ cert = "{m_ec[0]}", key = "{m_ec[1]}", client_ca = "{clients.ca_path}", verify = "required" }}
  [[server.location]]
  path = "/"
  proxy_pass = "http://{up.addr}"
[[server]]
listen = ["127.0.0.1:{r}"]
server_name = ["m.test"]
tls = {{ cert = "{m_ec[0]}", key = "{m_ec[1]}", client_ca = "{clients.ca_path}", verify = "optional" }}
  [[server.location]]
  path = "/"
  proxy_pass = "http://{up.addr}"
"""
    srv = ringx_module.make(cfg, name="tls")
    yield dict(p=p, q=q, r=r, pki=pki, clients=clients, alice=alice, srv=srv, up=up,
               sha=hashlib.sha256(data).hexdigest(), dir=d)
    up.close()


def curl(*args, timeout=20):
    return subprocess.run(["curl", "-sS", "--max-time", "15", *args], capture_output=True,
                          timeout=timeout)


def s_client(port, *args, stdin=b"", timeout=15):
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", *args],
                       input=stdin, capture_output=True, timeout=timeout)
    return r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


def ctx(pki: Pki, cert=None) -> ssl.SSLContext:
    c = ssl.create_default_context(cafile=str(pki.ca_path))
    if cert:
        c.load_cert_chain(str(cert[0]), str(cert[1]))
    return c


def get(port, host, path="/", context=None, pki=None, headers=b""):
    """One HTTPS GET with Python's ssl; returns (status line, headers, body, the ssl socket's
    version and peer certificate)."""
    context = context or ctx(pki)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as s:
            s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + host.encode()
                      + b"\r\nConnection: close\r\n" + headers + b"\r\n")
            buf = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            head, _, body = buf.partition(b"\r\n\r\n")
            return head.decode(), body, s.version(), s.getpeercert()


def cn_of(cert) -> str:
    return dict(x[0] for x in cert["subject"])["commonName"]


# -- names, versions, key types -------------------------------------------------------------


def test_curl_gets_each_name_its_certificate(site):
    ca = str(site["pki"].ca_path)
    for host, body, cn in [("a.test", "site a", "a.test"), ("www.a.test", "site a", "a.test"),
                           ("b.test", "site b", "b.test")]:
        r = curl("-v", "--cacert", ca, "--resolve", f"{host}:{site['p']}:127.0.0.1",
                 f"https://{host}:{site['p']}/")
        err = r.stderr.decode()
        assert r.returncode == 0, err
        assert r.stdout.decode().strip() == body
        assert re.search(rf"subject: CN={re.escape(cn)}\b", err), err
    # An unknown name gets the listener's default server (a.test), whose certificate curl
    # rejects for that name.
    r = curl("--cacert", ca, "--resolve", f"nope.test:{site['p']}:127.0.0.1",
             f"https://nope.test:{site['p']}/")
    assert r.returncode == 60, r.stderr


def test_tls12_and_tls13_with_alpn(site):
    for flag, want in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")]:
        out = s_client(site["p"], "-servername", "b.test", flag, "-alpn", "http/1.1",
                       "-CAfile", str(site["pki"].ca_path))
        assert f"Protocol  : {want}" in out or f"New, {want}" in out, out
        assert "ALPN protocol: http/1.1" in out, out
        assert "Verify return code: 0 (ok)" in out, out


def test_rsa_or_ecdsa_by_what_the_client_verifies(site):
    ec = s_client(site["p"], "-servername", "a.test", "-sigalgs", "ECDSA+SHA256")
    assert "Server public key is 256 bit" in ec, ec
    rsa = s_client(site["p"], "-servername", "a.test", "-sigalgs", "RSA-PSS+SHA256:RSA+SHA256")
    assert "Server public key is 2048 bit" in rsa, rsa


def test_python_ssl_and_the_forwarded_scheme(site):
    head, body, version, cert = get(site["p"], "a.test", "/up/x", pki=site["pki"])
    assert head.startswith("HTTP/1.1 200"), head
    assert version == "TLSv1.3" and cn_of(cert) == "a.test"
    seen = site["up"].requests[-1]
    hdrs = {k.lower(): v for k, v in seen["headers"]}
    assert hdrs.get("x-forwarded-proto") == "https", seen
    assert "x-ssl-client-verify" not in hdrs, "no client certificates on this server"


# -- resumption -----------------------------------------------------------------------------


def test_resumption_by_ticket_and_by_session_id(site, tmp_path):
    sess = tmp_path / "sess.pem"
    req = b"GET / HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n"
    for version, extra in [("-tls1_3", []), ("-tls1_2", []), ("-tls1_2", ["-no_ticket"])]:
        first = s_client(site["p"], "-servername", "b.test", version, *extra, "-ign_eof",
                         "-sess_out", str(sess), stdin=req)
        assert "New, TLSv1." in first, first
        second = s_client(site["p"], "-servername", "b.test", version, *extra, "-ign_eof",
                          "-sess_in", str(sess), stdin=req)
        assert "Reused, TLSv1." in second, (version, extra, second)
        assert "site b" in second


# -- bytes ----------------------------------------------------------------------------------


def test_ten_megabytes_byte_exact(site, tmp_path):
    out = tmp_path / "got"
    r = curl("--cacert", str(site["pki"].ca_path), "--resolve", f"a.test:{site['p']}:127.0.0.1",
             "-o", str(out), f"https://a.test:{site['p']}/f/big.bin", timeout=60)
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == site["sha"]


# -- client certificates --------------------------------------------------------------------


def test_mtls_required_and_optional(site):
    pki, alice = site["pki"], site["alice"]
    with pytest.raises((ssl.SSLError, ConnectionError)):
        head, *_ = get(site["q"], "m.test", pki=pki)
        # TLS 1.3: the client learns of the refusal on its first read.
        assert not head.startswith("HTTP/1.1 200"), head
    head, *_ = get(site["q"], "m.test", "/who", context=ctx(pki, alice),
                   headers=b"X-SSL-Client-S-DN: CN=admin\r\n")
    assert head.startswith("HTTP/1.1 200"), head
    hdrs = {k.lower(): v for k, v in site["up"].requests[-1]["headers"]}
    assert hdrs["x-ssl-client-verify"] == "SUCCESS" and hdrs["x-ssl-client-s-dn"] == "CN=alice", hdrs
    head, *_ = get(site["r"], "m.test", "/anon", pki=pki,
                   headers=b"X-SSL-Client-Verify: SUCCESS\r\n")
    assert head.startswith("HTTP/1.1 200"), head
    hdrs = {k.lower(): v for k, v in site["up"].requests[-1]["headers"]}
    assert hdrs["x-ssl-client-verify"] == "NONE" and "x-ssl-client-s-dn" not in hdrs, hdrs


def test_mtls_with_openssl_s_client(site):
    pki, alice = site["pki"], site["alice"]
    req = b"GET /who HTTP/1.1\r\nHost: m.test\r\nConnection: close\r\n\r\n"
    for version in ["-tls1_3", "-tls1_2"]:
        out = s_client(site["q"], "-servername", "m.test", version, "-ign_eof", "-CAfile",
                       str(pki.ca_path), "-cert", str(alice[0]), "-key", str(alice[1]), stdin=req)
        assert "Verify return code: 0 (ok)" in out and "HTTP/1.1 200" in out, (version, out)
        hdrs = {k.lower(): v for k, v in site["up"].requests[-1]["headers"]}
        assert hdrs["x-ssl-client-s-dn"] == "CN=alice", hdrs
        # Without a certificate, verify = "required" refuses the handshake: no answer.
        out = s_client(site["q"], "-servername", "m.test", version, "-ign_eof", "-CAfile",
                       str(pki.ca_path), stdin=req)
        assert "HTTP/1.1" not in out, (version, out)
        assert "alert" in out.lower(), (version, out)


# -- bad input ------------------------------------------------------------------------------


def client_hello(host="b.test") -> bytes:
    """A real ClientHello, from Python's ssl over memory BIOs."""
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ssl.create_default_context().wrap_bio(inc, out, server_hostname=host)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def read_until_closed(s: socket.socket, limit: float) -> tuple[bytes, float]:
    t0, got = time.monotonic(), b""
    s.settimeout(limit)
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except ConnectionResetError:
        pass
    return got, time.monotonic() - t0


def test_plain_http_on_the_tls_port_gets_nginx_400(site):
    with socket.create_connection(("127.0.0.1", site["p"]), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
        got, took = read_until_closed(s, 5)
    assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got
    assert b"The plain HTTP request was sent to HTTPS port" in got and took < 4


def test_garbage_and_a_truncated_hello_are_closed(site):
    with socket.create_connection(("127.0.0.1", site["p"]), timeout=5) as s:
        s.sendall(b"\x16\x03\x01\x00\x10" + os.urandom(16))
        got, took = read_until_closed(s, 5)
    assert took < 4 and (got == b"" or got[0] == 0x15), got  # nothing, or an alert record
    hello = client_hello()
    with socket.create_connection(("127.0.0.1", site["p"]), timeout=5) as s:
        s.sendall(hello[: len(hello) // 2])
        got, took = read_until_closed(s, 8)
    # client_header_timeout (2 s) ends a handshake that stopped.
    assert got == b"" and 1.5 < took < 6, (got, took)


def test_a_client_hello_byte_by_byte(site):
    hello = client_hello()
    with socket.create_connection(("127.0.0.1", site["p"]), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(hello)):
            s.send(hello[i:i + 1])
            if i % 64 == 0:
                time.sleep(0.001)
        s.settimeout(5)
        first = s.recv(5)
    assert first[:1] == b"\x16" and first[1:3] == b"\x03\x03", first  # a ServerHello record


def metric_values(admin: int, name: str) -> dict:
    """`name`'s samples on the admin listener's /metrics, by their labels (summed over zones)."""
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    got: dict = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == name:
                key = tuple(sorted((k, v) for k, v in smp.labels.items() if k != "zone"))
                got[key] = got.get(key, 0) + smp.value
    return got


def test_a_client_that_stops_mid_handshake_is_timed_out(ringx, tmp_path):
    """The client sends its ClientHello, reads the server's whole flight and never sends its
    Finished: the handshake timeout (client_header_timeout, as nginx) closes the connection,
    counts a failed handshake, and the connection is gone from the active count."""
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("site", ["s.test"])
    p, a = free_port(), free_port()
    ringx.make(runtime_section(None) + f"""
[admin]
listen = "127.0.0.1:{a}"
[http]
client_header_timeout = "1s"
[[server]]
listen = ["127.0.0.1:{p}"]
tls = {{ cert = "{cert}", key = "{key}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
""")
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx(pki).wrap_bio(inc, out, server_hostname="s.test")
    with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
        with pytest.raises(ssl.SSLWantReadError):
            obj.do_handshake()
        s.sendall(out.read())
        t0 = time.monotonic()
        # The server's flight, up to its Finished: the client's side of the handshake then
        # completes (TLS 1.3), and what it would send next (its Finished) is never sent.
        s.settimeout(5)
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                chunk = s.recv(65536)
                assert chunk, "the server closed before its flight"
                inc.write(chunk)
        assert obj.version() == "TLSv1.3" and out.pending > 0  # the unsent Finished
        assert metric_values(a, "ringx_connections_active") == {(): 1}
        got, _ = read_until_closed(s, 6)
        took = time.monotonic() - t0
    assert got == b"" and 0.8 < took < 4, (got, took)
    assert metric_values(a, "ringx_tls_handshakes_total").get((("result", "failed"),)) == 1
    assert metric_values(a, "ringx_connections_active") == {(): 0}


def test_tls_on_a_plain_http_port_gets_an_answer_not_a_hang(ringx, tmp_path):
    """A ClientHello sent to a plain HTTP listener is a bad request line: nginx's 400 and a
    close, at once; curl's https:// against it fails fast with a TLS error."""
    p = free_port()
    ringx.make(runtime_section(None) + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "plain\\n" }}
""")
    with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
        s.sendall(client_hello("s.test"))
        got, took = read_until_closed(s, 5)
    assert got.startswith(b"HTTP/1.1 400 "), got
    assert took < 2, took
    t0 = time.monotonic()
    r = curl("-k", f"https://127.0.0.1:{p}/")
    assert r.returncode == 35 and time.monotonic() - t0 < 5, r  # CURLE_SSL_CONNECT_ERROR
    assert curl(f"http://127.0.0.1:{p}/").stdout == b"plain\n"


def test_ten_thousand_client_hellos_from_one_source(site):
    """Each connection sends a ClientHello and closes at once; the zone keeps serving and its
    memory stays bounded."""
    hello = client_hello()
    pid = site["srv"].pid
    rss0 = rss_kb(pid)
    sent = 0
    for _ in range(50):
        socks = []
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", site["p"]), timeout=5)
            s.sendall(hello)
            socks.append(s)
        for s in socks:
            s.close()
        sent += len(socks)
    assert sent == 10_000
    head, body, *_ = get(site["p"], "b.test", pki=site["pki"])
    assert head.startswith("HTTP/1.1 200") and body == b"site b\n"
    time.sleep(0.5)
    grown = rss_kb(pid) - rss0
    assert grown < 64 * 1024, f"RSS grew by {grown} KiB over 10k ClientHellos"


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# -- reload and check -----------------------------------------------------------------------


def test_reload_swaps_the_certificate_while_a_download_runs(ringx, tmp_path):
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("site", ["s.test"], cn="s.test old")
    www = tmp_path / "www"
    www.mkdir()
    data = os.urandom(BIG)
    (www / "big.bin").write_bytes(data)
    p = free_port()
    srv = ringx.make(runtime_section(None) + f"""
[[server]]
listen = ["127.0.0.1:{p}"]
tls = {{ cert = "{cert}", key = "{key}" }}
  [[server.location]]
  path = "/"
  alias = "{www}/"
""")
    c = ctx(pki)
    raw = socket.create_connection(("127.0.0.1", p), timeout=10)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    s = c.wrap_socket(raw, server_hostname="s.test")
    assert cn_of(s.getpeercert()) == "s.test old"
    s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: s.test\r\nConnection: close\r\n\r\n")
    got = s.recv(65536)
    # New certificate and key under the same names, then SIGHUP.
    pki.leaf("site", ["s.test"], cn="s.test new")
    srv.signal(signal.SIGHUP)
    srv.wait_log("reload", timeout=10)
    deadline = time.monotonic() + 10
    while True:
        _, _, _, cert_now = get(p, "s.test", "/big.bin", context=ctx(pki))
        if cn_of(cert_now) == "s.test new" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert cn_of(cert_now) == "s.test new"
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    s.close()
    body = got.partition(b"\r\n\r\n")[2]
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(data).hexdigest()


def check(ringx_bin, path: Path) -> tuple[int, str]:
    r = subprocess.run([ringx_bin, "check", "-c", str(path)], capture_output=True, timeout=60)
    return r.returncode, (r.stdout + r.stderr).decode()


def test_check_names_the_entry_and_the_file(ringx_bin, tmp_path):
    pki = Pki(tmp_path / "pki")
    good = pki.leaf("good", ["g.test"])
    other = pki.leaf("other", ["o.test"])
    old = pki.leaf("old", ["old.test"], days=(-30, -1))
    future = pki.leaf("future", ["f.test"], days=(2, 30))
    swapped = pki.swapped(good[0])
    cases = [
        ((good[0], other[1]), other[1], "does not match"),
        ((old[0], old[1]), old[0], "has expired"),
        ((future[0], future[1]), future[0], "not valid yet"),
        ((tmp_path / "missing.pem", good[1]), tmp_path / "missing.pem", "cannot read"),
        ((swapped, good[1]), swapped, "out of order"),
    ]
    for (c, k), named, what in cases:
        cfg = tmp_path / "c.toml"
        cfg.write_text(f"""[[server]]
listen = ["127.0.0.1:{free_port()}"]
tls = {{ cert = "{c}", key = "{k}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
""")
        rc, out = check(ringx_bin, cfg)
        assert rc == 1, out
        assert f"{cfg}:3:" in out and str(named) in out and what in out, out
    cfg = tmp_path / "mixed.toml"
    port = free_port()
    cfg.write_text(f"""[[server]]
listen = ["127.0.0.1:{port}"]
tls = {{ cert = "{good[0]}", key = "{good[1]}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
[[server]]
listen = ["127.0.0.1:{port}"]
server_name = ["plain.test"]
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
""")
    rc, out = check(ringx_bin, cfg)
    assert rc == 1 and "disagree about TLS" in out and f"{cfg}:8:" in out, out


def test_keep_alive_after_a_large_file(site):
    """The next request on a connection that just received 10 MB over TLS is answered (the
    file's last piece re-arms the role's flush notification)."""
    c = ctx(site["pki"])
    with socket.create_connection(("127.0.0.1", site["p"]), timeout=10) as raw:
        with c.wrap_socket(raw, server_hostname="a.test") as s:
            for _ in range(2):
                s.sendall(b"GET /f/big.bin HTTP/1.1\r\nHost: a.test\r\n\r\n")
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += s.recv(65536)
                head, _, body = buf.partition(b"\r\n\r\n")
                n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
                while len(body) < n:
                    chunk = s.recv(1 << 20)
                    assert chunk, "closed mid-body"
                    body += chunk
                assert hashlib.sha256(body).hexdigest() == site["sha"]


def test_access_log_has_the_tls_fields_and_plaintext_bytes(ringx, tmp_path):
    import json
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("site", ["s.test"])
    log = tmp_path / "access.log"
    p = free_port()
    srv = ringx.make(runtime_section(None) + f"""
[http]
access_log = "{log}"
access_log_format = "json"
[[server]]
listen = ["127.0.0.1:{p}"]
tls = {{ cert = "{cert}", key = "{key}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "0123456789" }}
""")
    head, body, *_ = get(p, "s.test", "/x", pki=pki)
    assert body == b"0123456789"
    srv.signal(signal.SIGUSR1)  # reopen flushes what the zone holds
    deadline = time.monotonic() + 5
    while (not log.exists() or not log.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    line = json.loads(log.read_text().strip().splitlines()[-1])
    assert line["ssl_protocol"] == "TLSv1.3" and line["ssl_cipher"].startswith("TLS13_"), line
    assert line["ssl_server_name"] == "s.test" and line["ssl_session_reused"] == ".", line
    assert line["body_bytes_sent"] == 10, line


def test_metrics_count_handshakes_by_result(ringx, tmp_path):
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("site", ["s.test"])
    p, a = free_port(), free_port()
    ringx.make(runtime_section(None) + f"""
[admin]
listen = "127.0.0.1:{a}"
[[server]]
listen = ["127.0.0.1:{p}"]
tls = {{ cert = "{cert}", key = "{key}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
""")
    sess = tmp_path / "sess.pem"
    req = b"GET / HTTP/1.1\r\nHost: s.test\r\nConnection: close\r\n\r\n"
    s_client(p, "-servername", "s.test", "-ign_eof", "-sess_out", str(sess), stdin=req)
    out = s_client(p, "-servername", "s.test", "-ign_eof", "-sess_in", str(sess), stdin=req)
    assert "Reused" in out, out
    with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        read_until_closed(s, 5)
    with urllib.request.urlopen(f"http://127.0.0.1:{a}/metrics", timeout=5) as r:
        text = r.read().decode()
    got = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "ringx_tls_handshakes_total":
                got[smp.labels["result"]] = smp.value
    assert got == {"full": 1, "resumed": 1, "failed": 1}, got
    assert "ringx_tls_handshake_cpu_seconds_total" in text


class TlsBackend:
    """A Python TLS server answering each connection with its name and closing."""

    def __init__(self, name: str, cert, key):
        self.name = name
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(cert), str(key))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.served = 0
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.ctx.wrap_socket(raw, server_side=True) as s:
                    s.settimeout(5)
                    s.recv(100)
                    s.sendall(self.name.encode())
                    self.served += 1
            except (OSError, ssl.SSLError):
                pass

    def close(self):
        close_listener(self.sock)


def test_streams_route_tls_by_sni_without_terminating(ringx, tmp_path):
    pki = Pki(tmp_path / "pki")
    a = TlsBackend("backend-a", *pki.leaf("a", ["a.test"]))
    b = TlsBackend("backend-b", *pki.leaf("b", ["x.b.test", "d.test"]))
    p = free_port()
    try:
        ringx.make(runtime_section(None) + f"""
[http]
client_header_timeout = "2s"
[[stream]]
listen = ["127.0.0.1:{p}"]
proxy_pass = "dflt"
sni = {{ "a.test" = "A", "*.b.test" = "B" }}
[[upstream]]
name = "A"
servers = ["127.0.0.1:{a.port}"]
[[upstream]]
name = "B"
servers = ["127.0.0.1:{b.port}"]
[[upstream]]
name = "dflt"
servers = ["127.0.0.1:{b.port}"]
""")
        c = ctx(pki)
        for host, want in [("a.test", "backend-a"), ("x.b.test", "backend-b"), ("d.test", "backend-b")]:
            with socket.create_connection(("127.0.0.1", p), timeout=5) as raw:
                with c.wrap_socket(raw, server_hostname=host) as s:
                    # The certificate is the backend's own: TLS went through untouched.
                    assert host in [v for k, v in s.getpeercert()["subjectAltName"]]
                    s.sendall(b"hi")
                    assert s.recv(100).decode() == want
        assert a.served == 1 and b.served == 2
        # Not TLS: closed without reaching a backend; a ClientHello cut short: closed at the
        # header timeout.
        with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\n\r\n")
            got, took = read_until_closed(s, 5)
            assert got == b"" and took < 2
        hello = client_hello("a.test")
        with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
            s.sendall(hello[:-3])
            got, took = read_until_closed(s, 8)
            assert got == b"" and 1.5 < took < 6, took
        assert a.served == 1 and b.served == 2
    finally:
        a.close()
        b.close()


def test_a_stream_terminates_tls_and_forwards_plain_bytes(ringx, tmp_path):
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("s", ["db.test"])
    back = socket.socket()
    back.bind(("127.0.0.1", 0))
    back.listen(8)
    seen = []

    def echo():
        c, _ = back.accept()
        with c:
            data = c.recv(100)
            seen.append(data)
            c.sendall(b"plain:" + data)

    threading.Thread(target=echo, daemon=True).start()
    p = free_port()
    try:
        ringx.make(runtime_section(None) + f"""
[[stream]]
listen = ["127.0.0.1:{p}"]
proxy_pass = "127.0.0.1:{back.getsockname()[1]}"
tls = {{ cert = "{cert}", key = "{key}" }}
""")
        with socket.create_connection(("127.0.0.1", p), timeout=5) as raw:
            with ctx(pki).wrap_socket(raw, server_hostname="db.test") as s:
                s.sendall(b"hello")
                assert s.recv(100) == b"plain:hello"
        assert seen == [b"hello"], "the backend got the plaintext"
    finally:
        close_listener(back)  # its accept thread waits still if ringx never connected


class HttpsUpstream:
    """A Python HTTPS/1.1 server (keep-alive) answering `up:<path>`; counts TLS connections."""

    def __init__(self, cert, key):
        import http.server
        outer = self
        self.connections = 0
        self.requests = []

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                outer.connections += 1
                super().setup()

            def do_GET(self):
                outer.requests.append((self.path, dict(self.headers)))
                body = f"up:{self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        c.load_cert_chain(str(cert), str(key))
        self.httpd.socket = c.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def plain_get(port, path):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        got, _ = read_until_closed(s, 10)
    head, _, body = got.partition(b"\r\n\r\n")
    return head.decode(errors="replace"), body


def test_proxying_to_an_https_upstream(ringx, tmp_path):
    pki = Pki(tmp_path / "pki")
    other = Pki(tmp_path / "other", name="other CA")
    up = HttpsUpstream(*pki.leaf("up", ["up.test"]))
    p = free_port()
    try:
        srv = ringx.make(runtime_section(None) + f"""
[[upstream]]
name = "secure"
servers = ["127.0.0.1:{up.port}"]
tls = {{ sni = "up.test", ca = "{pki.ca_path}" }}
[[upstream]]
name = "wrong_ca"
servers = ["127.0.0.1:{up.port}"]
retries = 0
tls = {{ sni = "up.test", ca = "{other.ca_path}" }}
[[upstream]]
name = "unverified"
servers = ["127.0.0.1:{up.port}"]
tls = {{ sni = "up.test", verify = false }}
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/ok/"
  proxy_pass = "secure"
  [[server.location]]
  path = "/bad/"
  proxy_pass = "wrong_ca"
  [[server.location]]
  path = "/any/"
  proxy_pass = "unverified"
  [[server.location]]
  path = "/direct/"
  proxy_pass = "https://127.0.0.1:{up.port}"
""")
        for i in range(3):
            head, body = plain_get(p, f"/ok/{i}")
            assert head.startswith("HTTP/1.1 200"), head
            assert body == f"up:/ok/{i}".encode()
        assert up.connections == 1, "the upstream connection is kept and reused over TLS"
        head, _ = plain_get(p, "/bad/x")
        assert head.startswith("HTTP/1.1 502"), head
        srv.wait_log("TLS failed", timeout=5)
        assert "UnknownIssuer" in srv.log() or "certificate" in srv.log(), srv.log()
        head, body = plain_get(p, "/any/y")
        assert head.startswith("HTTP/1.1 200") and body == b"up:/any/y", head
        # https:// in proxy_pass verifies against the system CAs, which do not know the
        # test CA: 502.
        head, _ = plain_get(p, "/direct/z")
        assert head.startswith("HTTP/1.1 502"), head
        assert all(path != "/bad/x" and path != "/direct/z" for path, _ in up.requests)
    finally:
        up.close()


# -- kernel TLS -------------------------------------------------------------------------------


def ktls_unavailable() -> str | None:
    """Why the kernel cannot seal TLS records here (None: it can), after trying to load the
    module."""
    path = Path("/proc/sys/net/ipv4/tcp_available_ulp")
    ulps = path.read_text().split() if path.exists() else []
    if "tls" not in ulps and shutil.which("modprobe"):
        subprocess.run(["modprobe", "tls"], capture_output=True)
        ulps = path.read_text().split() if path.exists() else []
    if "tls" in ulps:
        return None
    how = "modprobe tls failed" if shutil.which("modprobe") else "no modprobe to load it"
    return f"the kernel has no tls ULP (tcp_available_ulp: {' '.join(ulps) or '-'}; {how})"


@pytest.mark.parametrize("engine", ["uring", "epoll"])
def test_kernel_tls_seals_what_the_zone_sends(ringx, tmp_path, engine):
    """Where the kernel has kTLS, connections hand their sending side over after the
    handshake: a 10 MB file (sendfile/splice under TLS) and a keep-alive response arrive
    intact, the metric counts the hand-overs, and the start-up line says so."""
    why = ktls_unavailable()
    if why:
        pytest.skip(f"kernel TLS path not tested: {why}")
    release = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2])
    if engine == "uring" and release < (6, 7):
        pytest.skip("io_uring socket commands need Linux 6.7")
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("site", ["s.test"])
    www = tmp_path / "www"
    www.mkdir()
    data = os.urandom(BIG)
    (www / "big.bin").write_bytes(data)
    p, a = free_port(), free_port()
    srv = ringx.make(runtime_section(engine) + f"""
log_level = "info"
[admin]
listen = "127.0.0.1:{a}"
[[server]]
listen = ["127.0.0.1:{p}"]
tls = {{ cert = "{cert}", key = "{key}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "small\\n" }}
  [[server.location]]
  path = "/f/"
  alias = "{www}/"
""")
    assert "kernel TLS seals records for" in srv.log(), srv.log()
    r = curl("--cacert", str(pki.ca_path), "--resolve", f"s.test:{p}:127.0.0.1",
             f"https://s.test:{p}/f/big.bin", "-o", str(tmp_path / "got.bin"),
             f"https://s.test:{p}/", timeout=60)
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256((tmp_path / "got.bin").read_bytes()).hexdigest() == \
        hashlib.sha256(data).hexdigest()
    assert r.stdout == b"small\n", r.stdout
    got = metric_values(a, "ringx_tls_kernel_total")
    assert sum(got.values()) >= 1, got
    # TLS 1.2 too, with close_notify at the end (s_client reports a clean close).
    out = s_client(p, "-servername", "s.test", "-tls1_2", "-ign_eof",
                   stdin=b"GET / HTTP/1.1\r\nHost: s.test\r\nConnection: close\r\n\r\n")
    assert "small" in out and "Protocol  : TLSv1.2" in out, out
