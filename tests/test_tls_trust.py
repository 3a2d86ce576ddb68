"""Which server a TLS request reaches when its names disagree (issue 35, point 1), and the
client-certificate fields an upstream may trust (points 1 and 5), each probe beside nginx.

One TLS listener with five servers:
  a.test          the default, no client certificate
  b.test          client certificate required (the protected one)
  *.w.test        a short wildcard, written before the long one
  *.api.w.test    a longer wildcard: it wins for x.api.w.test, by SNI and by Host alike
  c.test          no client certificate, `http2 = false`
  d.test          no client certificate, a certificate of its own

A request whose `Host` picks another server than the handshake's SNI (or, without SNI, the
default server) is refused with 421 Misdirected Request where that server verifies client
certificates, as nginx refuses it; a Host naming a server that does not offer HTTP/2 is
refused over h2. A server that differs only by its certificate serves the request: a client
coalescing connections across names (RFC 9113 §9.1.1) verified that certificate itself.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_tls_trust.py
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess

import pytest

from conftest import free_port, runtime_section
from nginx_peer import NginxPeer
from tls_pki import Pki
from upstream_server import UpstreamServer


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("trust")
    servers = Pki(d / "pki")
    clients = Pki(d / "clients", name="client CA")
    return dict(
        dir=d,
        servers=servers,
        clients=clients,
        a=servers.leaf("a", ["a.test"]),
        b=servers.leaf("b", ["b.test"]),
        w=servers.leaf("w", ["*.w.test", "*.api.w.test"]),
        c=servers.leaf("c", ["c.test"]),
        d=servers.leaf("d", ["d.test"]),
        alice=clients.leaf("alice", ["alice"], client=True, cn="alice"),
    )


@pytest.fixture(scope="module")
def site(ringx_module, pki):
    up = UpstreamServer("up")
    port = free_port()
    ca = pki["clients"].ca_path

    def srv(name, cert, body, extra=""):
        return f"""
[[server]]
listen = ["127.0.0.1:{port}"]
server_name = {json.dumps(name)}
tls = {{ cert = "{cert[0]}", key = "{cert[1]}"{extra} }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{body}\\n" }}
  [[server.location]]
  path = "/up/"
  proxy_pass = "http://{up.addr}"
  forwarded_headers = false
"""

    cfg = runtime_section(None, zones=1) + "".join([
        srv(["a.test"], pki["a"], "site a"),
        srv(["b.test"], pki["b"], "site b protected",
            f', client_ca = "{ca}", verify = "required"'),
        srv(["*.w.test"], pki["w"], "wild short"),
        srv(["*.api.w.test"], pki["w"], "wild long"),
        srv(["c.test"], pki["c"], "site c no h2").replace(
            'server_name = ["c.test"]', 'server_name = ["c.test"]\nhttp2 = false'),
        srv(["d.test"], pki["d"], "site d"),
    ])
    # A second listener whose only server verifies clients optionally (forwarded fields).
    q = free_port()
    cfg += f"""
[[server]]
listen = ["127.0.0.1:{q}"]
server_name = ["b.test"]
tls = {{ cert = "{pki['b'][0]}", key = "{pki['b'][1]}", client_ca = "{ca}", verify = "optional" }}
  [[server.location]]
  path = "/"
  proxy_pass = "http://{up.addr}"
"""
    r = ringx_module.make(cfg, name="trust")
    yield dict(port=port, q=q, up=up, srv=r)
    up.close()


def client_ctx(pki, cert=None) -> ssl.SSLContext:
    c = ssl.create_default_context(cafile=str(pki["servers"].ca_path))
    c.check_hostname = False
    if cert:
        c.load_cert_chain(str(cert[0]), str(cert[1]))
    return c


def tls_get(port, sni, request: bytes, context) -> tuple[int, bytes]:
    """One request with SNI `sni` (None: no SNI) and the request bytes as given; returns the
    status and the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=sni) as s:
            s.sendall(request)
            buf = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except (ConnectionResetError, ssl.SSLError):
                    break
                if not chunk:
                    break
                buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, body


def req(host: str, target: str = "/", extra: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n".encode()


def curl_h2(port, sni, host, pki, path="/", cert=None) -> tuple[int, str, str]:
    """curl over h2 with SNI `sni` and `Host` (h2's :authority) `host`: status, HTTP version,
    body."""
    args = ["curl", "-sS", "--max-time", "10", "--http2", "--cacert",
            str(pki["servers"].ca_path), "--resolve", f"{sni}:{port}:127.0.0.1",
            "-H", f"Host: {host}", "-w", "\n%{http_code} %{http_version}"]
    if cert:
        args += ["--cert", str(cert[0]), "--key", str(cert[1])]
    r = subprocess.run(args + [f"https://{sni}:{port}{path}"], capture_output=True, timeout=20)
    out = r.stdout.decode(errors="replace")
    body, _, tail = out.rpartition("\n")
    code, version = tail.split()
    return int(code), version, body


# The probes of the bypass, in the forms a client may write the names: (SNI, request bytes).
def bypass_probes(port):
    return [
        ("a.test", req("b.test")),
        ("a.test", req("B.TEST")),
        ("a.test", req("b.test.")),
        ("a.test", req(f"b.test:{port}")),
        ("a.test", req(f"B.Test.:{port}")),
        # absolute-form: its authority is the request's host (RFC 9112 §3.2.2).
        ("a.test", req("a.test", "https://b.test/")),
        ("x.w.test", req("b.test")),
        (None, req("b.test")),
    ]


def test_sni_and_host_naming_a_client_certificate_server_get_421(site, pki):
    ctx = client_ctx(pki)
    for sni, request in bypass_probes(site["port"]):
        status, body = tls_get(site["port"], sni, request, ctx)
        assert status == 421, (sni, request, status, body)
        assert b"protected" not in body
    # The honest client: SNI and Host b.test with its certificate.
    status, body = tls_get(site["port"], "b.test", req("b.test"), client_ctx(pki, pki["alice"]))
    assert (status, body) == (200, b"site b protected\n")
    # Verified for b.test, asking for the open a.test: nothing is protected there.
    status, body = tls_get(site["port"], "b.test", req("a.test"), client_ctx(pki, pki["alice"]))
    assert (status, body) == (200, b"site a\n")
    assert "421: the client requested a server name different" in site["srv"].log()


def test_the_bypass_over_h2_is_421_on_the_stream(site, pki):
    code, version, body = curl_h2(site["port"], "a.test", "b.test", pki)
    assert (code, version) == (421, "2"), body
    assert "protected" not in body
    code, version, body = curl_h2(site["port"], "b.test", "b.test", pki, cert=pki["alice"])
    assert (code, version, body) == (200, "2", "site b protected\n")


def test_wildcards_pick_the_same_server_by_sni_and_by_host(site, pki):
    """The longest wildcard wins for both names, whatever order the servers are written in
    (nginx's rule); before, Host took the first written and SNI the longest."""
    ctx = client_ctx(pki)
    for name, body in [("x.api.w.test", b"wild long\n"), ("x.w.test", b"wild short\n")]:
        assert tls_get(site["port"], name, req(name), ctx) == (200, body)
        assert tls_get(site["port"], name, req(name.upper() + "."), ctx) == (200, body)


def test_servers_differing_otherwise_are_decided_deliberately(site, pki):
    ctx = client_ctx(pki)
    # Only the certificate differs: served (a coalescing client verified it for the name).
    assert tls_get(site["port"], "a.test", req("d.test"), ctx) == (200, b"site d\n")
    code, version, body = curl_h2(site["port"], "a.test", "d.test", pki)
    assert (code, version, body) == (200, "2", "site d\n")
    # A server without HTTP/2: over HTTP/1.1 served, over h2 refused with 421 (the client
    # retries on a connection of its own, where ALPN gives it HTTP/1.1).
    assert tls_get(site["port"], "a.test", req("c.test"), ctx) == (200, b"site c no h2\n")
    code, version, body = curl_h2(site["port"], "a.test", "c.test", pki)
    assert (code, version) == (421, "2"), body
    code, version, body = curl_h2(site["port"], "c.test", "c.test", pki)
    assert (code, version, body) == (200, "1.1", "site c no h2\n")


def test_a_clients_own_client_certificate_fields_never_reach_the_upstream(site, pki):
    """`forwarded_headers = false` at /up/: the proxy writes no X-SSL-Client-* of its own,
    and drops the client's (any name under that prefix), over HTTP/1.1 and h2."""
    forged = "X-SSL-Client-Verify: SUCCESS\r\nX-SSL-Client-S-DN: CN=admin\r\nX-Ssl-Client-Cert: x\r\n"
    status, _ = tls_get(site["port"], "a.test", req("a.test", "/up/echo", forged),
                        client_ctx(pki))
    assert status == 200
    names = {k.lower() for k, _ in site["up"].requests[-1]["headers"]}
    assert not {n for n in names if n.startswith("x-ssl-client-")}, names
    args = ["curl", "-sS", "--max-time", "10", "--http2", "--cacert", str(pki["servers"].ca_path),
            "--resolve", f"a.test:{site['port']}:127.0.0.1", "-H", "X-SSL-Client-Verify: SUCCESS",
            "-H", "X-SSL-Client-S-DN: CN=admin", f"https://a.test:{site['port']}/up/echo"]
    assert subprocess.run(args, capture_output=True, timeout=20).returncode == 0
    names = {k.lower() for k, _ in site["up"].requests[-1]["headers"]}
    assert not {n for n in names if n.startswith("x-ssl-client-")}, names


def test_a_subject_with_cr_lf_cannot_add_a_header_upstream(site, pki, tmp_path):
    """Point 5: a client certificate whose subject holds CR LF (a CA may sign anything it is
    asked to) goes upstream escaped, on one line."""
    evil = pki["clients"].leaf("evil", ["evil"], client=True,
                               cn="mallory\r\nX-Injected: yes")
    status, _ = tls_get(site["q"], "b.test", req("b.test", "/echo"), client_ctx(pki, evil))
    assert status == 200
    hdrs = site["up"].requests[-1]["headers"]
    names = {k.lower() for k, _ in hdrs}
    assert "x-injected" not in names, hdrs
    dn = [v for k, v in hdrs if k.lower() == "x-ssl-client-s-dn"]
    assert dn == ["CN=mallory\\x0D\\x0AX-Injected: yes"], hdrs


# -- beside nginx --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nginx(pki, tmp_path_factory):
    port = free_port()
    ca = pki["clients"].ca_path

    def srv(name, cert, body, extra=""):
        return f"""
server {{
    listen 127.0.0.1:{port} ssl http2;
    server_name {name};
    ssl_certificate {cert[0]};
    ssl_certificate_key {cert[1]};
    {extra}
    location / {{ return 200 "{body}\\n"; }}
}}"""

    block = "".join([
        srv("a.test", pki["a"], "site a"),
        srv("b.test", pki["b"], "site b protected",
            f"ssl_client_certificate {ca}; ssl_verify_client on;"),
        srv("*.w.test", pki["w"], "wild short"),
        srv("*.api.w.test", pki["w"], "wild long"),
        srv("d.test", pki["d"], "site d"),
    ])
    peer = NginxPeer(tmp_path_factory.mktemp("nginx-trust"), block, port)
    yield port
    peer.stop()


def test_nginx_refuses_the_same_probes(nginx, pki):
    """nginx answers 421 where SNI names a server; without SNI it checks the Host's server's
    verification itself (400, no required certificate). Either way, never the protected
    page: ringx's 421 is the same refusal, and the same for both."""
    ctx = client_ctx(pki)
    for sni, request in bypass_probes(nginx):
        status, body = tls_get(nginx, sni, request, ctx)
        assert status in (421, 400), (sni, request, status, body)
        assert b"protected" not in body
        if sni is not None:
            assert status == 421, (sni, request, status)
    for name, body in [("x.api.w.test", b"wild long\n"), ("x.w.test", b"wild short\n")]:
        assert tls_get(nginx, name, req(name), ctx) == (200, body)
    assert tls_get(nginx, "a.test", req("d.test"), ctx) == (200, b"site d\n")


# -- upstream TLS names (point 6) ------------------------------------------------------------


def test_an_upstream_tls_name_tls_cannot_carry_is_refused_at_its_line(ringx_bin, tmp_path):
    """A wildcard `sni`, an IPv6 zone, a label ending in '-': `ringx check` refuses them at
    the upstream's `tls` (before, the connection went out in clear); `verify = false` is
    accepted with a warning."""
    def check(tls: str, server: str = "127.0.0.1:9") -> tuple[int, str]:
        cfg = tmp_path / "up.toml"
        cfg.write_text(f"""
[[upstream]]
name = "app"
servers = ["{server}"]
tls = {tls}

[[server]]
listen = ["127.0.0.1:{free_port()}"]
  [[server.location]]
  path = "/"
  proxy_pass = "http://app"
""")
        r = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, timeout=60)
        return r.returncode, (r.stdout + r.stderr).decode()

    for tls, needle in [('{ sni = "*.app.test" }', '"*.app.test"'),
                        ('{ sni = "bad-.test" }', '"bad-.test"'),
                        ('{ sni = "fe80::1%eth0" }', "IPv6 zone")]:
        rc, out = check(tls)
        assert rc != 0, (tls, out)
        assert "up.toml:5:" in out and needle in out and "TLS server name" in out, (tls, out)
    rc, out = check('{ sni = "app.test" }')
    assert rc == 0, out
    rc, out = check('{ sni = "app.test", verify = false }')
    assert rc == 0 and "verify = false" in out and "up.toml:5:" in out, out
