"""The XDP filter end to end, in network namespaces this test creates:

    rxc (client 10.77.0.2) --+
                             +-- rxw (bridge) -- rxs (ringx on 10.77.0.1:8080, XDP on xs0)
    rxa (attacker 10.77.0.3)-+

A SYN flood (hping3, bounded in count and time) from a blocked or over-rate attacker is
dropped at XDP while curl from the client keeps getting 200 from ringx; block and unblock
take effect live, and replacing the program under the flood lets no packet through.

Commands enter the namespaces with `nsenter --net` rather than `ip netns exec`, which
remounts /sys and would hide the pins under /sys/fs/bpf. Needs root, netns, hping3 and curl;
skips with the reason otherwise.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from conftest import ringx_path

TAG = f"{os.getpid() % 100000}"
NS = {k: f"rx{k}{TAG}" for k in ("s", "c", "a", "w")}
SRV, CLI, ATK = "10.77.0.1", "10.77.0.2", "10.77.0.3"
PORT = 8080
PIN = f"/sys/fs/bpf/ringx-pytest-{TAG}"
CLONE_NEWNET = 0x40000000


def sh(*args, check=True, timeout=30, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, check=check,
                          timeout=timeout, **kw)


def ns(name, *args, **kw):
    """Runs a command in namespace `name` (network only; mounts are the host's)."""
    return sh("nsenter", f"--net=/run/netns/{NS[name]}", *args, **kw)


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root (XDP and network namespaces need root)"
    for tool in ("ip", "nsenter", "curl", "hping3", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-deps.sh installs it)"
    if not os.path.isdir("/sys/fs/bpf"):
        return "no /sys/fs/bpf"
    probe = subprocess.run(["ip", "netns", "add", f"rxprobe{TAG}"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"rxprobe{TAG}"], capture_output=True)
    return None


def teardown():
    for n in NS.values():
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
    shutil.rmtree(PIN, ignore_errors=True)


@pytest.fixture(scope="module")
def topo():
    why = skip_reason()
    if why:
        print(f"skipped: {why}")
        pytest.skip(why)
    teardown()
    try:
        for n in NS.values():
            sh("ip", "netns", "add", n)
        w = NS["w"]
        sh("ip", "-n", w, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", w, "link", "set", "br0", "up")
        for k, dev, addr in (("s", "xs", SRV), ("c", "xc", CLI), ("a", "xa", ATK)):
            sh("ip", "link", "add", f"{dev}0{TAG}", "type", "veth", "peer", "name", f"{dev}1{TAG}")
            sh("ip", "link", "set", f"{dev}0{TAG}", "netns", NS[k])
            sh("ip", "link", "set", f"{dev}1{TAG}", "netns", w)
            sh("ip", "-n", NS[k], "link", "set", f"{dev}0{TAG}", "name", f"{dev}0")
            sh("ip", "-n", NS[k], "addr", "add", f"{addr}/24", "dev", f"{dev}0")
            sh("ip", "-n", NS[k], "link", "set", f"{dev}0", "up")
            sh("ip", "-n", NS[k], "link", "set", "lo", "up")
            sh("ip", "-n", w, "link", "set", f"{dev}1{TAG}", "master", "br0")
            sh("ip", "-n", w, "link", "set", f"{dev}1{TAG}", "up")
        # Counts what gets past XDP from the attacker (raw PREROUTING sees every packet the
        # stack receives).
        ns("s", "iptables", "-t", "raw", "-A", "PREROUTING", "-s", ATK, "-p", "tcp")
        ns("s", "iptables", "-t", "raw", "-A", "PREROUTING", "-s", ATK, "-p", "tcp", "--syn")
        yield
    finally:
        teardown()


def setns_to(name):
    """A preexec_fn that moves the child into the network namespace `name` only."""
    path = f"/run/netns/{NS[name]}"

    def enter():
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        os.close(fd)
    return enter


CONFIG = f"""
[runtime]
zones = 1
[[server]]
listen = ["{SRV}:{PORT}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok\\n" }}
[xdp]
dev = "xs0"
mode = "native"
pin_dir = "{PIN}"
syn_rate = 20
syn_burst = 20
detach_on_exit = true
"""


@pytest.fixture(scope="module")
def server(topo, ringx_module):
    r = ringx_module.make(CONFIG, name="xdp", preexec_fn=setns_to("s"))
    log = r.wait_log("xdp: attached the filter to xs0", timeout=10)
    assert "native mode" in log, log
    yield r
    r.signal(signal.SIGTERM)
    r.wait_exit(10)


def xdp(*args, check=True):
    binary = ringx_path()
    return ns("s", binary, "xdp", "--pin-dir", PIN, *args, check=check)


def stats() -> dict:
    return json.loads(xdp("stats", "--json").stdout)


def reason(s: dict, name: str) -> int:
    return s["reasons"][name]["packets"]


def curl_ok() -> bool:
    r = ns("c", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--connect-timeout", "1",
           "-m", "3", f"http://{SRV}:{PORT}/", check=False)
    return r.stdout.strip() == "200"


def passed_from_attacker(syn_only=False) -> int:
    """Packets (or SYNs) from the attacker that reached the server's stack."""
    out = ns("s", "iptables", "-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n").stdout
    for line in out.splitlines():
        if ATK in line and ("flags:" in line) == syn_only:
            return int(line.split()[0])
    raise AssertionError(out)


def flood(count=20000, interval_us=20):
    """A bounded SYN flood from the attacker: at most `count` packets, at most 4 s."""
    return subprocess.Popen(
        ["timeout", "-s", "INT", "4", "nsenter", f"--net=/run/netns/{NS['a']}", "hping3", "-q",
         "-S", "-p", str(PORT), "-i", f"u{interval_us}", "-c", str(count), SRV],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def serve_during(proc, fn, every=0.1):
    """Calls fn() every `every` seconds while proc runs; returns the results. (The client
    is under the SYN limit too: one connection per request, at most 10 a second, stays
    below its 20 a second.)"""
    out = []
    while proc.poll() is None:
        t = time.monotonic()
        out.append(fn())
        time.sleep(max(0.0, every - (time.monotonic() - t)))
    proc.wait()
    return out


def test_block_flood_dropped_while_client_served(server):
    assert curl_ok()
    xdp("block", ATK)
    before, passed0 = stats(), passed_from_attacker()
    f = flood()
    codes = serve_during(f, curl_ok)
    after = stats()
    dropped = reason(after, "drop_block") - reason(before, "drop_block")
    assert dropped > 1000, (dropped, f.stdout.read() if f.stdout else "")
    assert passed_from_attacker() == passed0, "packets from the blocked attacker reached the stack"
    assert codes and all(codes), f"client requests during the flood: {codes}"
    xdp("unblock", ATK)


def test_syn_flood_over_rate_is_limited(server):
    before, syn0 = stats(), passed_from_attacker(syn_only=True)
    t0 = time.monotonic()
    f = flood()
    codes = serve_during(f, curl_ok)
    took = time.monotonic() - t0
    limited = reason(stats(), "drop_syn_rate") - reason(before, "drop_syn_rate")
    passed = passed_from_attacker(syn_only=True) - syn0
    assert limited > 1000, (limited, passed)
    # The bucket lets the burst of 20 through, then 20 a second.
    assert passed <= 20 + 20 * took + 5, (limited, passed, took)
    assert codes and all(codes), f"client requests during the flood: {codes}"


def test_block_and_unblock_live_without_reattach(server):
    ids = stats()["links"]
    assert len(ids) == 1 and ids[0]["dev"] == "xs0"
    assert curl_ok()
    xdp("block", f"{CLI}/32")
    assert not curl_ok(), "the blocked client still got an answer"
    xdp("unblock", f"{CLI}/32")
    assert curl_ok(), "unblocking did not take effect"
    assert stats()["links"] == ids, "block/unblock re-attached the program"


def test_replacing_the_program_under_a_flood_lets_nothing_through(server):
    link = stats()["links"][0]
    xdp("block", ATK)
    passed0 = passed_from_attacker()
    f = flood(count=40000)
    progs = set()
    while f.poll() is None and len(progs) < 4:
        r = xdp("attach", "--dev", "xs0", "--syn-rate", str(20 + len(progs)))
        assert "replaced the program" in r.stdout, r.stdout
        progs.add(stats()["links"][0]["prog_id"])
    f.wait()
    now = stats()["links"][0]
    assert now["link_id"] == link["link_id"] and len(progs) >= 2, (link, now, progs)
    assert passed_from_attacker() == passed0, "packets passed unfiltered during a replacement"
    assert curl_ok()
    xdp("unblock", ATK)


def test_counters_logged_and_detached_at_exit(topo, ringx):
    # A second server on the same device would find the link of the module's server; this
    # one runs alone on its own pin directory and device.
    sh("ip", "-n", NS["s"], "link", "add", "xt0", "type", "veth", "peer", "name", "xt1")
    try:
        cfg = CONFIG.replace('dev = "xs0"', 'dev = "xt0"').replace(PIN, PIN + "-2")
        r = ringx.make(cfg.replace(f"{SRV}:{PORT}", f"127.0.0.1:{PORT + 1}"), name="xdp2",
                       preexec_fn=setns_to("s"))
        r.wait_log("xdp: attached the filter to xt0")
        r.signal(signal.SIGTERM)
        assert r.wait_exit(10) == 0
        log = r.log()
        assert re.search(r"xdp counters: passed \d+ packets, dropped \d+", log), log
        assert "xdp: detached from xt0" in log, log
        assert "xdp" not in ns("s", "ip", "link", "show", "dev", "xt0").stdout
    finally:
        sh("ip", "-n", NS["s"], "link", "del", "xt0", check=False)
        shutil.rmtree(PIN + "-2", ignore_errors=True)


def test_bad_device_is_a_clear_start_error(topo, ringx, tmp_path):
    cfg = CONFIG.replace('dev = "xs0"', 'dev = "nosuch0"').replace(PIN, PIN + "-3")
    r = ringx.make(cfg.replace(f"{SRV}:{PORT}", f"127.0.0.1:{PORT + 2}"), name="xdp3",
                   preexec_fn=setns_to("s"), start=False)
    r.start(wait=False)
    assert r.wait_exit(10) == 1
    assert 'no network device "nosuch0"' in r.log(), r.log()
    shutil.rmtree(PIN + "-3", ignore_errors=True)
