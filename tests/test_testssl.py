"""testssl.sh against ringx (issue 35), cheaply: its protocol scan and a set of vulnerability
checks against one `[[server]]` with an ECDSA and an RSA certificate, TLS settings at their
defaults. No finding may be rated HIGH or CRITICAL, and SSLv2, SSLv3, TLS 1.0 and TLS 1.1 must
not be offered. The full scan, compared with nginx's on the same certificates, is
bench/testssl.py (`make bench-testssl`).

testssl runs with no DNS (`--nodns none --ip 127.0.0.1`), nothing fetched (no
`--phone-out`); as root, ringx and testssl share a network namespace of their own with only
`lo` up, so that testssl's probes of the local openssl (`s_client -connect invalid.`, a DNS
lookup) cannot leave the machine. About 17 s on the 2-core VM.

Skipped when testssl.sh is not installed (scripts/install-deps.sh installs Debian's package).
Run: RINGX_BIN=target/release/ringx python3 -m pytest -q -rs tests/test_testssl.py
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import free_port, runtime_section
from tls_pki import Pki

HOST = "testssl.test"
# -p protocols; -U every vulnerability check: Heartbleed, CCS, Ticketbleed, ROBOT,
# renegotiation, CRIME, BREACH (the page at /), POODLE, TLS_FALLBACK_SCSV, SWEET32, FREAK,
# DROWN, LOGJAM, BEAST, LUCKY13, RC4. Not --fast: with it testssl checks RC4 with the local
# openssl, which has no RC4, and reports the check as failed (WARN).
CHECKS = ["-p", "-U"]
EXPECTED = ["SSLv2", "SSLv3", "TLS1", "TLS1_1", "TLS1_2", "TLS1_3", "heartbleed", "CCS",
            "ticketbleed", "ROBOT", "secure_renego", "secure_client_renego", "CRIME_TLS",
            "BREACH", "POODLE_SSL", "fallback_SCSV", "SWEET32", "FREAK", "DROWN", "LOGJAM",
            "BEAST", "LUCKY13", "RC4"]
CLONE_NEWNET = 0x40000000


def find_testssl() -> str:
    path = shutil.which("testssl") or shutil.which("testssl.sh")
    if not path:
        pytest.skip("testssl.sh is not installed (scripts/install-deps.sh installs Debian's "
                    "testssl.sh package)")
    return path


@pytest.fixture
def netns():
    """A network namespace of its own with `lo` up (root only; None elsewhere, and the test
    runs in the machine's)."""
    name = f"ringx-testssl-{os.getpid()}"
    if os.geteuid() != 0 or subprocess.run(["ip", "netns", "add", name],
                                           capture_output=True).returncode != 0:
        print("test_testssl: no network namespace (needs root): running in the machine's")
        yield None
        return
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def enter(ns):
    """A preexec_fn that moves the child into network namespace `ns`."""
    def go():
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        os.close(fd)
    return go


def test_testssl_finds_nothing_high(ringx, tmp_path, netns):
    binary = find_testssl()
    pki = Pki(tmp_path / "pki", name="testssl test CA")
    ec = pki.leaf("ec", [HOST], kind="ec", days=(-1, 365))
    rsa = pki.leaf("rsa", [HOST], kind="rsa", days=(-1, 365))
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("<!doctype html><p>testssl</p>\n")
    port = free_port()
    cfg = runtime_section(None, zones=1) + f"""
[[server]]
listen = ["127.0.0.1:{port}"]
server_name = ["{HOST}"]
tls = [{{ cert = "{ec[0]}", key = "{ec[1]}" }}, {{ cert = "{rsa[0]}", key = "{rsa[1]}" }}]
  [[server.location]]
  path = "/"
  root = "{www}"
  index = ["index.html"]
"""
    ringx.make(cfg, name="testssl", preexec_fn=enter(netns) if netns else None)
    out = tmp_path / "testssl.json"
    cmd = [binary, "--quiet", "--warnings", "off", "--color", "0", "--nodns", "none",
           "--ip", "127.0.0.1", "--connect-timeout", "10", "--openssl-timeout", "10",
           "--add-ca", str(pki.ca_path), "--jsonfile", str(out), *CHECKS, f"{HOST}:{port}"]
    if netns:
        cmd = ["nsenter", f"--net=/run/netns/{netns}", *cmd]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    took = time.monotonic() - t0
    print(f"test_testssl: testssl took {took:.1f} s")
    assert out.exists(), f"testssl wrote no JSON (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"
    found = {}
    for f in json.loads(out.read_text()):
        found.setdefault(f["id"], []).append(f)
    text = "\n".join(f"{f['id']}: {f['severity']} {f['finding']}" for fs in found.values() for f in fs)
    for f in (f for fs in found.values() for f in fs if f["severity"] in ("LOW", "MEDIUM")):
        print(f"test_testssl: {f['id']}: {f['severity']} {f['finding']}")
    missing = [i for i in EXPECTED if i not in found]
    assert not missing, f"testssl gave no result for {missing}:\n{text}"
    bad = [f for fs in found.values() for f in fs if f["severity"] in ("HIGH", "CRITICAL")]
    assert not bad, "findings rated HIGH or CRITICAL:\n" + "\n".join(
        f"{f['id']}: {f['severity']} {f['finding']}" for f in bad)
    for proto in ("SSLv2", "SSLv3", "TLS1", "TLS1_1"):
        assert found[proto][0]["finding"].startswith("not offered"), f"{proto} offered:\n{text}"
    for proto in ("TLS1_2", "TLS1_3"):
        assert found[proto][0]["finding"].startswith("offered"), f"{proto} not offered:\n{text}"
    unchecked = [f for i in EXPECTED for f in found[i] if f["severity"] == "WARN"]
    assert not unchecked, "checks that could not run:\n" + "\n".join(
        f"{f['id']}: {f['finding']}" for f in unchecked)
