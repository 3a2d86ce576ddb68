"""Automatic HTTPS (issue 41): certificates obtained from a real ACME server (pebble) through
http-01 and tls-alpn-01, served without a reload (checked with `openssl s_client` against
pebble's root), renewed under load, retried through the CA's failures, kept across a restart
without a new order; and `/.well-known/acme-challenge/` answered before any location."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509

from acme_pebble import Pebble, pebble_bins
from conftest import close_listener, free_port

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="openssl is not installed (the checks use s_client)")


@pytest.fixture
def pebble_env():
    """Skips (with the reason) where pebble cannot be had; yields a factory, stops them all."""
    pebble_bins()
    made: list[Pebble] = []

    def make(workdir: Path, **kw) -> Pebble:
        p = Pebble(workdir, **kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.stop()


def config(http_port: int, tls_port: int, admin: int, storage: Path, directory: str, ca: Path,
           challenge: str, names: list[str], extra: str = "", plain: bool = True) -> str:
    q = ", ".join(f'"{n}"' for n in names)
    plain_server = f"""
[[server]]
listen = ["127.0.0.1:{http_port}"]
server_name = [{q}]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "plain\\n" }}
""" if plain else ""
    return f"""
[runtime]
zones = 2
[admin]
listen = "127.0.0.1:{admin}"
[acme]
directory = "{directory}"
ca = "{ca}"
contact = "ops@example.com"
storage = "{storage}"
challenge = "{challenge}"
{extra}
{plain_server}
[[server]]
listen = ["127.0.0.1:{tls_port}"]
server_name = [{q}]
tls = {{ acme = true }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "secure\\n" }}
"""


def s_client(port: int, name: str, root: Path | None) -> tuple[int, x509.Certificate | None, str]:
    """openssl s_client's verdict (0: the chain verifies to `root` for `name`) and the leaf."""
    args = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", name,
            "-showcerts"]
    if root is not None:
        args += ["-CAfile", str(root), "-verify_return_error", "-verify_hostname", name]
    r = subprocess.run(args, input=b"", capture_output=True, timeout=20)
    out = r.stdout.decode(errors="replace")
    m = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", out, re.S)
    leaf = x509.load_pem_x509_certificate(m.group(0).encode()) if m else None
    return r.returncode, leaf, out + r.stderr.decode(errors="replace")


def wait_issued(port: int, name: str, root: Path, timeout: float = 90.0, not_serial=None):
    """Waits until the listener serves a certificate that verifies to pebble's root (and is
    not the one with `not_serial`); returns its leaf."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        rc, leaf, out = s_client(port, name, root)
        if rc == 0 and leaf is not None and leaf.serial_number != not_serial:
            return leaf
        last = out
        time.sleep(0.2)
    raise AssertionError(f"no pebble certificate for {name} on {port}:\n{last[-2000:]}")


def sans(leaf: x509.Certificate) -> list[str]:
    ext = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return sorted(ext.value.get_values_for_type(x509.DNSName))


def metrics(admin: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        return r.read().decode()


def start_site(ringx, pebble_env, tmp_path, challenge: str, names: list[str], plain=True,
               extra: str = "", **kw):
    http_port, tls_port, admin = free_port(), free_port(), free_port()
    pb = pebble_env(tmp_path / "pebble", http_port=http_port, tls_port=tls_port, **kw).start()
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pb.root_pem())
    storage = tmp_path / "acme"
    if callable(extra):
        extra = extra(pb)
    cfg = config(http_port, tls_port, admin, storage, pb.directory, pb.listener_ca, challenge,
                 names, extra=extra, plain=plain)
    r = ringx.make(cfg)
    return r, pb, root, (http_port, tls_port, admin), storage


def test_http01_certificate_is_obtained_and_served(ringx, pebble_env, tmp_path):
    names = ["a.test", "www.a.test"]
    r, pb, root, (http_port, tls_port, admin), storage = start_site(
        ringx, pebble_env, tmp_path, "http-01", names)
    leaf = wait_issued(tls_port, "www.a.test", root)
    assert "Pebble Intermediate CA" in leaf.issuer.rfc4514_string(), leaf.issuer
    assert sans(leaf) == names
    # Served in every zone without a reload, to curl too.
    for _ in range(4):
        out = subprocess.run(
            ["curl", "-sS", "--cacert", str(root), "--resolve", f"a.test:{tls_port}:127.0.0.1",
             f"https://a.test:{tls_port}/"], capture_output=True, timeout=10)
        assert out.stdout == b"secure\n", out.stderr
    # The plain site is untouched by ACME.
    c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
    c.request("GET", "/", headers={"Host": "a.test"})
    assert c.getresponse().read() == b"plain\n"
    m = metrics(admin)
    days = re.search(r'ringx_acme_certificate_expiry_days\{names="a.test,www.a.test"\} ([0-9.]+)', m)
    assert days and 89 < float(days.group(1)) <= 90, m
    assert 'ringx_acme_orders_total{result="ok"} 1' in m
    assert 'ringx_acme_http01_requests_total{token="known"}' in m
    # In the served certificates' family too, which the expiry alert, the dashboard and the
    # status page read.
    ts = re.search(r'ringx_tls_certificate_expiry_timestamp_seconds\{cert="acme:a.test,www.a.test"'
                   r',subject="[^"]*"\} (\d+)', m)
    assert ts and abs(int(ts.group(1)) - leaf.not_valid_after_utc.timestamp()) < 2, m
    import json
    deadline = time.monotonic() + 15
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/status.json", timeout=5) as resp:
            certs = json.loads(resp.read())["certificates"]
        acme = [c for c in certs if c["file"] == "acme:a.test,www.a.test"]
        if acme or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert acme and 89 < acme[0]["days_left"] <= 90, certs
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/", timeout=5) as resp:
        page = resp.read().decode()
    assert "acme:a.test,www.a.test" in page, page[-3000:]
    # Keys are the owner's alone.
    keys = [p for p in storage.rglob("*") if p.name in ("key.pem", "account.json")]
    assert len(keys) == 2, list(storage.rglob("*"))
    for k in keys:
        assert stat.S_IMODE(k.stat().st_mode) == 0o600, k
    assert "ACME: certificate installed" in r.log()
    assert pb.orders() == 1


def test_tls_alpn01_certificate_is_obtained_and_served(ringx, pebble_env, tmp_path):
    """No plain listener at all: pebble's http-01 port has nothing on it, so only the TLS
    listener's answer to `acme-tls/1` can have validated the name."""
    r, pb, root, (http_port, tls_port, _), _ = start_site(
        ringx, pebble_env, tmp_path, "tls-alpn-01", ["b.test"], plain=False)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", http_port), timeout=2).close()
    leaf = wait_issued(tls_port, "b.test", root)
    assert "Pebble Intermediate CA" in leaf.issuer.rfc4514_string()
    assert sans(leaf) == ["b.test"]
    assert pb.orders() == 1


def test_dns01_wildcard_through_the_hook(ringx, pebble_env, tmp_path):
    """A wildcard, which only dns-01 validates: the operator's hook adds the TXT records
    (here to pebble's DNS helper) and removes them when the order ends."""
    hook = tmp_path / "dns-hook"
    r, pb, root, (_, tls_port, _), _ = start_site(
        ringx, pebble_env, tmp_path, "dns-01", ["w.test", "*.w.test"], plain=False,
        extra=lambda pb: f'dns_hook = "{pb.dns_hook(hook)}"\ndns_propagation = "0s"')
    leaf = wait_issued(tls_port, "any.w.test", root)
    assert sans(leaf) == ["*.w.test", "w.test"]
    calls = Path(f"{hook}.calls").read_text().splitlines()
    assert calls.count("add _acme-challenge.w.test") == 2, calls
    assert calls.count("remove _acme-challenge.w.test") == 2, calls


def test_external_account_binding_and_an_rsa_key(ringx, pebble_env, tmp_path):
    """A CA that requires EAB (pebble refuses an account without it) and key_type rsa2048."""
    mac = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"
    r, pb, root, (_, tls_port, _), _ = start_site(
        ringx, pebble_env, tmp_path, "tls-alpn-01", ["k.test"], plain=False,
        eab={"kid-1": mac},
        extra=f'eab = {{ kid = "kid-1", hmac_key = "{mac}" }}\nkey_type = "rsa2048"')
    leaf = wait_issued(tls_port, "k.test", root)
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = leaf.public_key()
    assert isinstance(key, rsa.RSAPublicKey) and key.key_size == 2048


def test_reload_adds_a_server_and_keeps_the_certificates_it_had(ringx, pebble_env, tmp_path):
    r, pb, root, (_, tls_port, _), _ = start_site(ringx, pebble_env, tmp_path, "http-01",
                                                  ["h.test"])
    first = wait_issued(tls_port, "h.test", root)
    tls2 = free_port()
    r.config_path.write_text(r.config_text + f"""
[[server]]
listen = ["127.0.0.1:{tls2}"]
server_name = ["h2.test"]
tls = {{ acme = true }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "second\\n" }}
""")
    r.signal(signal.SIGHUP)
    r.wait_log("reload 2 sent", 20)
    second = wait_issued(tls2, "h2.test", root)
    assert sans(second) == ["h2.test"]
    rc, leaf, out = s_client(tls_port, "h.test", root)
    assert rc == 0 and leaf.serial_number == first.serial_number, out
    assert pb.orders() == 2


def test_a_ca_that_lost_the_account_gets_a_new_one(ringx, pebble_env, tmp_path):
    """pebble restarted keeps nothing: the stored account is unknown to it. The next order
    (a server added by reload) fails with accountDoesNotExist, and the retry registers anew."""
    r, pb, root, (_, tls_port, _), storage = start_site(ringx, pebble_env, tmp_path, "http-01",
                                                        ["n.test"])
    wait_issued(tls_port, "n.test", root)
    pb.stop()
    pb.start()
    root.write_bytes(pb.root_pem())
    tls2 = free_port()
    r.config_path.write_text(r.config_text + f"""
[[server]]
listen = ["127.0.0.1:{tls2}"]
server_name = ["n2.test"]
tls = {{ acme = true }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "second\\n" }}
""")
    r.signal(signal.SIGHUP)
    leaf = wait_issued(tls2, "n2.test", root, timeout=60)
    assert sans(leaf) == ["n2.test"]
    assert "accountDoesNotExist" in r.log()
    assert r.log().count("ACME: account registered") == 2


def test_a_failed_validation_is_retried_until_it_passes(ringx, pebble_env, tmp_path):
    """http-01 with nothing on pebble's port 80 stand-in: the CA's validation fails, the
    order is invalid, the log says why; once a reload adds the plain listener, the retry
    (backing off from 2 s) passes."""
    r, pb, root, (http_port, tls_port, admin), _ = start_site(
        ringx, pebble_env, tmp_path, "http-01", ["v.test"], plain=False)
    r.wait_log("the order is invalid", 30)
    assert "urn:ietf:params:acme:error:connection" in r.log(), r.log()[-2000:]
    r.config_path.write_text(r.config_text + f"""
[[server]]
listen = ["127.0.0.1:{http_port}"]
server_name = ["v.test"]
  [[server.location]]
  path = "/"
  return = {{ status = 200 }}
""")
    r.signal(signal.SIGHUP)
    leaf = wait_issued(tls_port, "v.test", root, timeout=60)
    assert sans(leaf) == ["v.test"]
    m = metrics(admin)
    assert re.search(r'ringx_acme_orders_total\{result="error"\} [1-9]', m), m
    assert 'ringx_acme_orders_total{result="ok"} 1' in m


def test_restart_loads_from_storage_and_orders_nothing(ringx, pebble_env, tmp_path):
    r, pb, root, (_, tls_port, admin), _ = start_site(ringx, pebble_env, tmp_path, "http-01",
                                                      ["c.test"])
    first = wait_issued(tls_port, "c.test", root)
    assert pb.orders() == 1
    r.stop()
    r2 = ringx.make(r.config_text, name="restarted")
    r2.wait_log("ACME: certificate loaded from storage", 20)
    rc, leaf, out = s_client(tls_port, "c.test", root)
    assert rc == 0 and leaf.serial_number == first.serial_number, out
    m = metrics(admin)
    assert 'ringx_acme_orders_total{result="ok"} 0' in m
    assert 'ringx_acme_certificate_pending{names="c.test"} 0' in m
    assert "ordering a certificate" not in r2.log()
    assert pb.orders() == 1


def test_renewal_of_a_short_lived_certificate_under_load(ringx, pebble_env, tmp_path):
    """30-second certificates: renewed at 2/3 of their life (ARI's window, not before
    half), and installed while clients keep connecting, with no request failing."""
    r, pb, root, (_, tls_port, admin), _ = start_site(ringx, pebble_env, tmp_path, "http-01",
                                                      ["d.test"], validity=30)
    first = wait_issued(tls_port, "d.test", root)
    ctx = ssl.create_default_context(cafile=str(root))
    serials: set[int] = set()
    errors: list[str] = []
    done = threading.Event()
    counts = [0, 0]

    def fresh_connections():
        while not done.is_set():
            try:
                with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as s:
                    with ctx.wrap_socket(s, server_hostname="d.test") as t:
                        der = t.getpeercert(binary_form=True)
                        serials.add(x509.load_der_x509_certificate(der).serial_number)
                        t.sendall(b"GET / HTTP/1.1\r\nHost: d.test\r\nConnection: close\r\n\r\n")
                        data = b""
                        while chunk := t.recv(4096):
                            data += chunk
                        assert data.endswith(b"secure\n"), data
                counts[0] += 1
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                errors.append(f"new connection: {e!r}")

    def keep_alive():
        """Requests on one connection, opened again only where ringx says it closes it
        (keepalive_requests): a connection made before the swap keeps working across it."""
        c = None
        while not done.is_set():
            try:
                if c is None:
                    c = http.client.HTTPConnection("127.0.0.1", tls_port, timeout=10)
                    c.sock = ctx.wrap_socket(
                        socket.create_connection(("127.0.0.1", tls_port), timeout=10),
                        server_hostname="d.test")
                c.request("GET", "/", headers={"Host": "d.test"})
                resp = c.getresponse()
                body = resp.read()
                assert body == b"secure\n", body
                counts[1] += 1
                if (resp.getheader("Connection") or "").lower() == "close":
                    c.close()
                    c = None
            except Exception as e:  # noqa: BLE001
                errors.append(f"keep-alive: {e!r}")
                return

    threads = [threading.Thread(target=fresh_connections), threading.Thread(target=keep_alive)]
    for t in threads:
        t.start()
    try:
        renewed = wait_issued(tls_port, "d.test", root, timeout=60, not_serial=first.serial_number)
        # Load goes on across the swap until a client has seen the new certificate.
        deadline = time.monotonic() + 30
        while renewed.serial_number not in serials and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors[:5]
    assert {first.serial_number, renewed.serial_number} <= serials
    assert counts[0] > 10 and counts[1] > 10, counts
    lifetime = (first.not_valid_after_utc - first.not_valid_before_utc).total_seconds()
    assert lifetime < 31
    assert pb.orders() >= 2
    m = re.search(r'ringx_acme_orders_total\{result="ok"\} (\d+)', metrics(admin))
    assert m and int(m.group(1)) >= 2


def test_ca_down_at_start_then_nonce_rejections_retried(ringx, pebble_env, tmp_path):
    """Start-up does not wait for the CA: the name is served a temporary self-signed
    certificate while the directory is unreachable; once pebble runs, rejecting nonces at
    random, ringx's retries get the certificate."""
    http_port, tls_port, admin = free_port(), free_port(), free_port()
    pb = pebble_env(tmp_path / "pebble", http_port=http_port, tls_port=tls_port,
                    env={"PEBBLE_WFE_NONCEREJECT": "30"})
    cfg = config(http_port, tls_port, admin, tmp_path / "acme", pb.directory, pb.listener_ca,
                 "http-01", ["e.test"])
    r = ringx.make(cfg)
    r.wait_log("ACME: order failed", 30)
    rc, leaf, out = s_client(tls_port, "e.test", None)
    assert leaf is not None, out
    assert "ringx temporary certificate" in leaf.subject.rfc4514_string()
    assert 'ringx_acme_certificate_pending{names="e.test"} 1' in metrics(admin)
    pb.start()
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pb.root_pem())
    leaf = wait_issued(tls_port, "e.test", root, timeout=120)
    assert "Pebble Intermediate CA" in leaf.issuer.rfc4514_string()
    assert 'ringx_acme_certificate_pending{names="e.test"} 0' in metrics(admin)


@pytest.fixture
def open_dir():
    """A folder every user can enter (pytest's tmp_path is mode 0700 under a 0700 parent,
    which a ringx that dropped to nobody could not reach)."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="ringx-acme-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def nobody() -> tuple[int, int]:
    if os.geteuid() != 0:
        pytest.skip("dropping privileges (user = \"nobody\") needs root")
    import pwd
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user on this system")
    return pw.pw_uid, pw.pw_gid


def test_storage_in_new_folders_is_usable_by_the_dropped_user(ringx, open_dir):
    """user = "nobody" and a storage whose parents do not exist: ringx makes them (0755, as
    mkdir -p) and the storage (0700, nobody's) before dropping privileges, so the ACME thread
    takes the storage lock. No CA is reachable: the order fails after the lock."""
    uid, gid = nobody()
    storage = open_dir / "new" / "deeper" / "acme"
    r = ringx.make(f"""
[runtime]
zones = 1
user = "nobody"
[acme]
directory = "https://127.0.0.1:1/dir"
storage = "{storage}"
challenge = "tls-alpn-01"
[[server]]
listen = ["127.0.0.1:{free_port()}"]
server_name = ["s.test"]
tls = {{ acme = true }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "secure\\n" }}
""")
    log = r.wait_log("ACME: order failed", 30)
    assert "storage lock" not in log and "Permission denied" not in log, log
    assert "cannot create the storage" not in log and "cannot enter" not in log, log
    for d in (open_dir / "new", open_dir / "new" / "deeper"):
        st = d.stat()
        assert stat.S_IMODE(st.st_mode) == 0o755, d
    st = storage.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and (st.st_uid, st.st_gid) == (uid, gid)
    lock = storage / "locks" / "s.test.lock"
    assert lock.exists(), list(storage.rglob("*"))
    assert lock.stat().st_uid == uid


def test_http01_as_nobody_with_a_fresh_nested_storage(ringx, pebble_env, tmp_path, open_dir):
    """The whole way as a packaged ringx runs it: privileges dropped, storage made at
    start-up below folders that did not exist; the certificate is obtained, stored and
    served."""
    uid, _ = nobody()
    http_port, tls_port, admin = free_port(), free_port(), free_port()
    pb = pebble_env(tmp_path / "pebble", http_port=http_port, tls_port=tls_port).start()
    root = tmp_path / "pebble-root.pem"
    root.write_bytes(pb.root_pem())
    ca = open_dir / "listener-ca.pem"    # read by the ACME thread, after the drop
    shutil.copy(pb.listener_ca, ca)
    ca.chmod(0o644)
    storage = open_dir / "var" / "lib" / "ringx" / "acme"
    cfg = config(http_port, tls_port, admin, storage, pb.directory, ca, "http-01", ["u.test"])
    cfg = cfg.replace("[runtime]\n", '[runtime]\nuser = "nobody"\n', 1)
    r = ringx.make(cfg)
    leaf = wait_issued(tls_port, "u.test", root)
    assert sans(leaf) == ["u.test"]
    assert "storage lock" not in r.log(), r.log()
    keys = [p for p in storage.rglob("key.pem")]
    assert len(keys) == 1 and keys[0].stat().st_uid == uid, list(storage.rglob("*"))
    assert pb.orders() == 1


class Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):  # noqa: N802
        Recorder.seen.append(self.path)
        body = b"upstream\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *a):
        pass


def test_unknown_challenge_token_gets_404_before_any_location(ringx, tmp_path):
    """A hostile request under /.well-known/acme-challenge/ is answered 404 by ringx: not by
    the location that would take the path, not by an error_page that proxies, never
    upstream. No CA is needed: none is reachable here, and with pending = "refuse" the TLS
    listener refuses handshakes until a certificate comes."""
    up = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    Recorder.seen = []
    plain, tls = free_port(), free_port()
    try:
        r = ringx.make(f"""
[runtime]
zones = 1
[acme]
directory = "https://127.0.0.1:1/dir"
storage = "{tmp_path / 'acme'}"
challenge = "http-01"
pending = "refuse"
[[server]]
listen = ["127.0.0.1:{plain}"]
server_name = ["f.test"]
error_page = {{ "404" = "/err" }}
  [[server.location]]
  path = "/"
  proxy_pass = "http://127.0.0.1:{up.server_address[1]}"
  [[server.location]]
  path = "/.well-known/"
  proxy_pass = "http://127.0.0.1:{up.server_address[1]}"
  [[server.location]]
  path = "/err"
  proxy_pass = "http://127.0.0.1:{up.server_address[1]}"
[[server]]
listen = ["127.0.0.1:{tls}"]
server_name = ["f.test"]
tls = {{ acme = true }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "secure\\n" }}
""")
        for path in ["/.well-known/acme-challenge/unknown-token",
                     "/.well-known/acme-challenge/",
                     "/.well-known/acme-challenge/../../err",
                     "/.well-known/acme-challenge/%2e%2e/x"]:
            for method in ["GET", "HEAD"]:
                c = http.client.HTTPConnection("127.0.0.1", plain, timeout=5)
                c.request(method, path, headers={"Host": "f.test"})
                resp = c.getresponse()
                resp.read()
                assert resp.status == 404, (method, path, resp.status)
                c.close()
        assert Recorder.seen == []
        # The same server still proxies everything else.
        c = http.client.HTTPConnection("127.0.0.1", plain, timeout=5)
        c.request("GET", "/.well-known/other", headers={"Host": "f.test"})
        assert c.getresponse().read() == b"upstream\n"
        assert Recorder.seen == ["/.well-known/other"]
        rc, leaf, out = s_client(tls, "f.test", None)
        assert leaf is None and rc != 0, out
        assert r.proc.poll() is None
    finally:
        up.shutdown()
        close_listener(up.socket)


@pytest.mark.parametrize("body,where,msg", [
    ('server_name = ["*.g.test"]\ntls = { acme = true }', "*.g.test",
     "a wildcard certificate can only be validated through dns-01"),
    ('server_name = ["g.test"]\ntls = { acme = true, cert = "x.pem", key = "x.key" }', "acme",
     "the certificate comes from one or the other"),
    ('tls = { acme = true }', "tls", "needs server_name"),
])
def test_check_refuses_what_acme_cannot_order(ringx_bin, tmp_path, body, where, msg):
    text = f"""[acme]
storage = "{tmp_path}"

[[server]]
listen = ["127.0.0.1:{free_port()}"]
{body}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "x" }}
"""
    p = tmp_path / "bad.toml"
    p.write_text(text)
    r = subprocess.run([ringx_bin, "check", "-c", str(p)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if where in ln
                and not ln.startswith(("storage", "[")))
    assert re.search(rf"bad\.toml:{line}:\d+: .*{re.escape(msg)}", r.stderr), r.stderr


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_pebble_fails_under_ci_and_skips_elsewhere(monkeypatch, tmp_path, ci):
    """Where pebble cannot be had, a plain run skips with the reason, and CI (CI set, as
    .ci/run sets it) fails: `make test` must run the pebble tests."""
    import acme_pebble
    monkeypatch.setattr(acme_pebble, "TOOLS", tmp_path / "none")
    monkeypatch.setattr(acme_pebble.shutil, "which", lambda _name: None)
    monkeypatch.setattr(acme_pebble, "_go", lambda: None)
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected) as e:
        acme_pebble.pebble_bins()
    assert "no Go of 1.21 or later" in str(e.value)
    assert ("under CI" in str(e.value)) == bool(ci)
