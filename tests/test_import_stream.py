"""`ringx import` (issue 40), the stream module side by side: nginx (its own file) and ringx
(the import of it) relay the same TCP connections, datagrams and TLS handshakes to the same
echoing upstreams, one after the other on the same ports, and a client sees the same thing
through each. What differs by design is listed in KNOWN with the reason (the import reports
each of them at its line); anything else fails."""

from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path

import pytest

from conftest import close_listener
from import_site import Site, handshake, read_or_empty, stop, tls_client
from tls_pki import Pki


class Echo:
    """Echoes each connection's bytes until the client's FIN; TCP on 127.0.0.1, or a UNIX
    socket at `path`. With `ctx` (a server SSLContext) it speaks TLS and prefixes the answer
    with `tag`, so a client can tell which upstream it reached."""

    def __init__(self, path: Path | None = None, ctx: ssl.SSLContext | None = None,
                 tag: bytes = b""):
        self.ctx, self.tag = ctx, tag
        self.sock = socket.socket(socket.AF_UNIX if path else socket.AF_INET)
        self.sock.bind(str(path) if path else ("127.0.0.1", 0))
        self.sock.listen(64)
        self.addr = f"unix:{path}" if path else "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            if self.ctx:
                c = self.ctx.wrap_socket(c, server_side=True)
                c.sendall(self.tag + b":" + c.recv(65536))
                return
            while d := c.recv(65536):
                c.sendall(d)
            c.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        close_listener(self.sock)


class UdpEcho:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                d, peer = self.sock.recvfrom(65536)
                if peer is None:
                    return  # shut down: close()
                self.sock.sendto(d, peer)
            except OSError:
                return

    def close(self):
        close_listener(self.sock)  # wakes the receive (conftest.close_listener)


def relay(addr: tuple, payload: bytes) -> bytes | str:
    """What comes back through a TCP relay for `payload` (read until as many bytes came, or
    the relay closed; nginx's proxy_half_close is off, so no FIN is sent first), or why none."""
    fam = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    try:
        with socket.socket(fam) as s:
            s.settimeout(5)
            s.connect(addr)
            s.sendall(payload)
            got = b""
            while len(got) < len(payload) and (d := s.recv(65536)):
                got += d
            return got
    except OSError as e:
        return type(e).__name__


def datagram(port: int, payload: bytes) -> bytes | str:
    """The answer to one datagram; retried while the proxy may still be starting."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        for _ in range(10):
            s.sendto(payload, ("127.0.0.1", port))
            try:
                return s.recvfrom(65536)[0]
            except TimeoutError:
                continue
    return "no answer"


def run_both(site: Site, ringx_bin, exchanges) -> dict[str, dict]:
    """`exchanges(site) -> {what: result}` run against nginx, then against ringx."""
    out = {}
    for who in ("nginx", "ringx"):
        proc = site.serve(who, ringx_bin)
        try:
            out[who] = exchanges(site)
        finally:
            stop(proc)
    return out


SIDE_BY_SIDE = ["nginx_org/stream.conf", "nginx_org/ssl_preread.conf", "fstack/stream_sni.conf"]
# What differs by design: configuration -> {exchange: reason}. The import reports each.
KNOWN = {
    "nginx_org/stream.conf": {
        # `proxy_pass unix:/tmp/stream.socket`: ringx does not connect to UNIX-domain
        # sockets, so the import refuses that server (refused server at stream.conf:36) and
        # ringx does not listen on [::1]:12345 at all.
        "[::1] tcp": "refused: UNIX-domain upstream",
    },
    "fstack/stream_sni.conf": {
        # The certificate chosen by `map $ssl_server_name`: ringx serves the map's default
        # for every name (approximated ssl_certificate at stream_sni.conf:26).
        "sni domain2.com": "ringx serves the map's default certificate",
    },
}


def compare(name: str, got: dict[str, dict], site: Site | None = None) -> None:
    known = KNOWN.get(name, {})
    diffs = [f"{k}: nginx {got['nginx'][k]!r}\n{' ' * (len(k) + 2)}ringx {got['ringx'][k]!r}"
             for k in got["nginx"] if k not in known and got["nginx"][k] != got["ringx"][k]]
    logs = "" if site is None else "\n- ringx's log -\n" + read_or_empty(site.tmp / "ringx.stderr")
    assert not diffs, "\n".join(diffs) + logs
    # A known difference that no longer is one is taken off the list.
    same = [k for k in known if got["nginx"][k] == got["ringx"][k]]
    assert not same, f"listed as known but alike: {same}"


def test_stream_tcp_udp(ringx_bin, tmp_path):
    """nginx.org's stream example: TCP to a hashed upstream, UDP (DNS) to another, and a
    server that proxies to a UNIX socket."""
    tcp = [Echo(), Echo(), Echo(tmp_path / "backend3")]
    unix = Echo(tmp_path / "stream.socket")
    udp = [UdpEcho(), UdpEcho()]
    name = "nginx_org/stream.conf"
    try:
        site = Site(tmp_path, name, {
            "backend1.example.com:12345": tcp[0].addr, "127.0.0.1:12345": tcp[1].addr,
            "unix:/tmp/": f"unix:{tmp_path}/", "192.168.0.1:53535": udp[0].addr,
            "dns.example.com:53": udp[1].addr})
        tcp_port, udp_port = site.ports["12345"], site.ports["53"]
        payload = os.urandom(300_000)

        def exchanges(site):
            return {
                "tcp": [relay(("127.0.0.1", tcp_port), payload) == payload for _ in range(4)],
                "udp": [datagram(udp_port, b"query %d" % i) for i in range(4)],
                "[::1] tcp": relay(("::1", tcp_port), b"over v6") if socket.has_ipv6 else "-",
            }

        got = run_both(site, ringx_bin, exchanges)
        assert got["nginx"]["tcp"] == [True] * 4, got
        assert got["nginx"]["udp"] == [b"query %d" % i for i in range(4)], got
        assert got["nginx"]["[::1] tcp"] == b"over v6", got
        compare(name, got, site)
    finally:
        for e in tcp + [unix] + udp:
            e.close()


def test_ssl_preread_routes_by_sni(ringx_bin, tmp_path):
    """nginx.org's ssl_preread example: the ClientHello's name picks the upstream through a
    map; TLS goes through untouched to upstreams that terminate it."""
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("up", ["backend.example.com", "other.example.org"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ups = {h: Echo(ctx=ctx, tag=tag) for h, tag in [
        ("192.168.0.1:12345", b"backend"), ("192.168.0.2:12345", b"backend"),
        ("192.168.0.3:12345", b"backend2"), ("192.168.0.4:12345", b"backend2")]}
    name = "nginx_org/ssl_preread.conf"
    try:
        site = Site(tmp_path, name, {h: e.addr for h, e in ups.items()})
        port = site.ports["12346"]
        client = tls_client(pki.ca_path)

        def exchanges(site):
            r = {f"sni {n}": [handshake(port, client, n) for _ in range(3)]
                 for n in ("backend.example.com", "other.example.org")}
            r["no sni"] = handshake(port, client, None)
            # Not a ClientHello: nginx passes it to the map's default (backend2, whose TLS
            # handshake fails on it), ringx closes at once: the client is closed on either.
            r["not tls"] = relay(("127.0.0.1", port), b"GET / HTTP/1.0\r\n\r\n")
            return r

        got = run_both(site, ringx_bin, exchanges)
        n = got["nginx"]
        assert all(x[3] == b"backend:ping" for x in n["sni backend.example.com"]), n
        assert all(x[3] == b"backend2:ping" for x in n["sni other.example.org"]), n
        compare(name, got, site)
    finally:
        for e in ups.values():
            e.close()


def test_stream_sni_terminates_tls(ringx_bin, tmp_path):
    """F-Stack's TLS-terminating stream proxy: certificates chosen by SNI through maps,
    TLS 1.2 and 1.3 only, the client's own address as the source toward the upstream."""
    pki = Pki(tmp_path / "pki")
    certs = tmp_path / "cert"
    certs.mkdir()
    for d in ("domain1", "domain2", "domain3"):
        c, k = pki.leaf(d, [f"{d}.com", f"*.{d}.com"])
        (certs / f"{d}.crt").write_bytes(c.read_bytes())
        (certs / f"{d}.key").write_bytes(k.read_bytes())
    up = Echo()
    name = "fstack/stream_sni.conf"
    try:
        site = Site(tmp_path, name, {"/usr/local/cert/": f"{certs}/",
                                              "192.168.1.3:8081": up.addr})
        port = site.ports["8080"]
        client = tls_client(pki.ca_path)

        def exchanges(site):
            r = {f"sni {n}": handshake(port, client, n)
                 for n in ("www.domain1.com", "domain2.com", "example.org")}
            r["no sni"] = handshake(port, client, None)
            for v in ("TLSv1_1", "TLSv1_2", "TLSv1_3"):
                r[v] = handshake(port, tls_client(pki.ca_path, ssl.TLSVersion[v]), "domain1.com")
            return r

        got = run_both(site, ringx_bin, exchanges)
        n = got["nginx"]
        assert n["sni domain2.com"][2] == ["*.domain2.com", "domain2.com"], n
        assert n["sni www.domain1.com"][3] == b"ping" and n["TLSv1_1"] == "refused", n
        assert n["TLSv1_2"][0] == "TLSv1.2" and n["TLSv1_3"][0] == "TLSv1.3", n
        compare(name, got, site)
    finally:
        up.close()
