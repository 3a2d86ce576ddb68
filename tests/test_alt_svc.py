"""Alt-Svc for HTTP/3 (issue 38, the configuration side): a TLS server with `quic = true`
advertises h3 on its port on every response over TCP, with curl over HTTP/1.1 and over h2
(ALPN) on each answer kind: a `return`, a static file, ringx's own error page, an
`error_page`, a proxied response and a proxied failure. An operator's own Alt-Svc goes out
instead of ringx's; a TLS server without quic sends none. `ringx check` places a misplaced
`quic = true` at FILE:LINE:COL.

Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_alt_svc.py
"""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import free_port, runtime_section
from tls_pki import Pki
from upstream_server import UpstreamServer

PROTOS = {"h1": ("--http1.1", "HTTP/1.1"), "h2": ("--http2", "HTTP/2")}

# (path, status, body or None) of each answer kind.
ANSWERS = [
    ("/", 200, b"hello\n"),
    ("/f/f.txt", 200, b"a file\n"),
    ("/f/missing", 404, None),
    ("/paged/missing", 404, b"our own page\n"),
    ("/up/x", 200, b"ok"),
    ("/down/x", 502, None),
]


def locations(www, up, dead) -> str:
    return f"""
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "hello\\n" }}
  [[server.location]]
  path = "/f/"
  alias = "{www}/"
  [[server.location]]
  path = "/paged/"
  alias = "{www}/"
  error_page = {{ "404" = "/404.html" }}
  [[server.location]]
  path = "= /404.html"
  root = "{www}"
  [[server.location]]
  path = "/up/"
  proxy_pass = "http://{up}"
  [[server.location]]
  path = "/down/"
  proxy_pass = "http://127.0.0.1:{dead}"
  [[server.location]]
  path = "/own"
  return = {{ status = 200, body = "own\\n" }}
  add_header = {{ "Alt-Svc" = 'h3=":1"; ma=60' }}
"""


@pytest.fixture(scope="module")
def site(ringx_module, tmp_path_factory):
    d = tmp_path_factory.mktemp("altsvc")
    pki = Pki(d / "pki")
    cert, key = pki.leaf("a", ["a.test"])
    www = d / "www"
    www.mkdir()
    (www / "f.txt").write_bytes(b"a file\n")
    (www / "404.html").write_bytes(b"our own page\n")
    up = UpstreamServer("up")
    quic, plain_tls, dead = free_port(), free_port(), free_port()
    tls = f'tls = {{ cert = "{cert}", key = "{key}" }}\n'
    cfg = runtime_section(None, zones=1) + f"""
[[server]]
listen = ["127.0.0.1:{quic}"]
server_name = ["a.test"]
{tls}quic = true
{locations(www, up.addr, dead)}
[[server]]
listen = ["127.0.0.1:{plain_tls}"]
server_name = ["a.test"]
{tls}{locations(www, up.addr, dead)}
"""
    srv = ringx_module.make(cfg, name="altsvc")
    yield dict(srv=srv, pki=pki, quic=quic, plain_tls=plain_tls)
    up.close()


def fetch(site, port: int, path: str, proto: str):
    """One request with curl over TLS; returns (protocol, status, [Alt-Svc values], body)."""
    flag, _ = PROTOS[proto]
    r = subprocess.run(
        ["curl", "-sS", "--max-time", "15", flag, "-D", "-", "--cacert", str(site["pki"].ca_path),
         "--resolve", f"a.test:{port}:127.0.0.1", f"https://a.test:{port}{path}"],
        capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    head, _, body = r.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    version, status = lines[0].split()[:2]
    alt = [v.strip() for n, _, v in (ln.partition(":") for ln in lines[1:])
           if n.strip().lower() == "alt-svc"]
    return version, int(status), alt, body


@pytest.mark.parametrize("proto", PROTOS)
def test_every_answer_of_a_quic_server_advertises_h3_once(site, proto):
    want = [f'h3=":{site["quic"]}"; ma=86400']
    for path, status, body in ANSWERS:
        version, got, alt, b = fetch(site, site["quic"], path, proto)
        assert (version, got) == (PROTOS[proto][1], status), path
        if body is not None:
            assert b == body, path
        assert alt == want, f"{proto} {path}: {alt}"


@pytest.mark.parametrize("proto", PROTOS)
def test_the_operators_own_alt_svc_goes_out_instead(site, proto):
    _, status, alt, _ = fetch(site, site["quic"], "/own", proto)
    assert (status, alt) == (200, ['h3=":1"; ma=60'])


@pytest.mark.parametrize("proto", PROTOS)
def test_a_server_without_quic_advertises_nothing(site, proto):
    for path, status, _ in ANSWERS:
        version, got, alt, _ = fetch(site, site["plain_tls"], path, proto)
        assert (version, got, alt) == (PROTOS[proto][1], status, []), path


@pytest.mark.parametrize("case, where, msg", [
    ('[[server]]\nlisten = ["127.0.0.1:{p}"]\nquic = true\n'
     '[[server.location]]\npath = "/"\nreturn = {{ status = 200 }}\n', "quic = true",
     "quic = true needs tls on this server"),
    ('[[stream]]\nlisten = ["127.0.0.1:{p}"]\nproxy_pass = "127.0.0.1:9"\nquic = true\n',
     "quic = true", "quic = true is for a [[server]] with tls"),
    ('[http]\nquic_retry = "sometimes"\n', "quic_retry", "unknown variant"),
])
def test_check_places_quic_mistakes(ringx_bin, tmp_path, case, where, msg):
    p = free_port()
    text = case.format(p=p) + (
        f'[[server]]\nlisten = ["127.0.0.1:{free_port()}"]\n'
        '[[server.location]]\npath = "/"\nreturn = { status = 200 }\n')
    f = tmp_path / "bad.toml"
    f.write_text(text)
    r = subprocess.run([ringx_bin, "check", "-c", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if where in ln)
    assert re.search(rf"bad\.toml:{line}:\d+: .*{re.escape(msg)}", r.stderr), r.stderr
