"""L7 -> XDP escalation end to end, in network namespaces this test creates:

    rec (client 10.78.0.2) --+
                             +-- rew (bridge) -- res (ringx on 10.78.0.1:8080, XDP on xs0)
    rea (abuser 10.78.0.3 and .4) -+

ringx limits "/" to 2 r/s per address (429 beyond) and escalates an address refused 20
times to the XDP block list for 8 s. The abuser is first answered 429, then its SYNs are
dropped by XDP (the raw PREROUTING counter of its SYNs stops: they never reach the stack,
let alone the listener); a well-behaved client keeps getting 200 throughout; the block is
lifted when it runs out; both sides' counters are on /metrics. The abuser's second address
sends malformed requests: after 5 answered 400 (`escalate_malformed`), it is blocked too.

Commands enter the namespaces with `nsenter --net` (see test_xdp.py). Needs root, netns,
iptables, curl; skips with the reason otherwise.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ringx_path

TAG = f"{os.getpid() % 100000}"
NS = {k: f"re{k}{TAG}" for k in ("s", "c", "a", "w")}
SRV, CLI, ATK, GARBLER = "10.78.0.1", "10.78.0.2", "10.78.0.3", "10.78.0.4"
PORT, ADMIN = 8080, 9901
PIN = f"/sys/fs/bpf/ringx-escalate-{TAG}"
CLONE_NEWNET = 0x40000000
BLOCK_FOR = 8


def sh(*args, check=True, timeout=60, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, check=check,
                          timeout=timeout, **kw)


def ns(name, *args, **kw):
    return sh("nsenter", f"--net=/run/netns/{NS[name]}", *args, **kw)


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root (XDP and network namespaces need root)"
    for tool in ("ip", "nsenter", "curl", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-deps.sh installs it)"
    if not os.path.isdir("/sys/fs/bpf"):
        return "no /sys/fs/bpf"
    probe = subprocess.run(["ip", "netns", "add", f"reprobe{TAG}"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"reprobe{TAG}"], capture_output=True)
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
        # A second address of the abuser's, for the one that sends malformed requests.
        sh("ip", "-n", NS["a"], "addr", "add", f"{GARBLER}/24", "dev", "xa0")
        # Counts the abuser's SYNs that get past XDP into the stack.
        ns("s", "iptables", "-t", "raw", "-A", "PREROUTING", "-s", ATK, "-p", "tcp", "--syn")
        yield
    finally:
        teardown()


def setns_to(name):
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
[http]
escalate_malformed = {{ after = 5, block_for = "{BLOCK_FOR}s" }}
[admin]
listen = "{SRV}:{ADMIN}"
[[limit_req_zone]]
name = "per_ip"
key = "$remote_addr"
rate = "2r/s"
[[server]]
listen = ["{SRV}:{PORT}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok\\n" }}
  limit_req = {{ zone = "per_ip", nodelay = true, status = 429, escalate = {{ after = 20, block_for = "{BLOCK_FOR}s" }} }}
[xdp]
dev = "xs0"
mode = "native"
pin_dir = "{PIN}"
detach_on_exit = true
"""

# Run in the abuser's namespace: up to `n` requests for up to `secs` seconds, each on a new
# connection (as a flood of clients does), as fast as they go, stopping after 3 timeouts in a
# row (blocked); prints each outcome (status or "timeout") and when. The block lands when the
# escalation thread has run, which a loaded machine delays: the flood goes on until then.
ABUSER = r"""
import json, socket, sys, time
n, host, port, src, what = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
secs = float(sys.argv[6])
req = (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" if what == "get"
       else b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n")
out, t0 = [], time.monotonic()
while len(out) < n and time.monotonic() - t0 < secs:
    try:
        s = socket.create_connection((host, port), timeout=0.5, source_address=(src, 0))
        s.sendall(req)
        data = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            data += d
        s.close()
        out.append([data[9:12].decode() or "empty", round(time.monotonic() - t0, 3)])
    except OSError:
        out.append(["timeout", round(time.monotonic() - t0, 3)])
        if len(out) >= 3 and all(o[0] == "timeout" for o in out[-3:]):
            break
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def server(topo, ringx_module):
    r = ringx_module.make(CONFIG, name="escalate", preexec_fn=setns_to("s"))
    r.wait_log("xdp: attached the filter to xs0", timeout=10)
    yield r
    r.signal(signal.SIGTERM)
    r.wait_exit(10)


def abuse(n, src=ATK, what="get", secs=30.0):
    out = ns("a", sys.executable, "-c", ABUSER, str(n), SRV, str(PORT), src, what, str(secs),
             timeout=120).stdout
    return json.loads(out)


def client_ok() -> bool:
    r = ns("c", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--connect-timeout", "1",
           "-m", "3", f"http://{SRV}:{PORT}/", check=False)
    return r.stdout.strip() == "200"


def syns_from_abuser() -> int:
    out = ns("s", "iptables", "-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n").stdout
    for line in out.splitlines():
        if ATK in line and "flags:" in line:
            return int(line.split()[0])
    raise AssertionError(out)


def metrics() -> str:
    return ns("s", "curl", "-s", f"http://{SRV}:{ADMIN}/metrics").stdout


def metric(m: str, pattern: str) -> int:
    found = re.search(pattern, m)
    assert found, (pattern, m)
    return int(found.group(1))


def test_an_abusive_client_is_refused_then_dropped_by_xdp(server):
    assert client_ok()
    outcomes = abuse(20000)
    kinds = [o[0] for o in outcomes]
    # 200s within the rate, then 429s, then (escalated) nothing answers.
    assert "timeout" in kinds, (len(kinds), outcomes[-5:])
    first_timeout = kinds.index("timeout")
    assert kinds.count("429") >= 20, outcomes
    assert all(k in ("200", "429") for k in kinds[:first_timeout]), outcomes
    assert kinds[:first_timeout].count("429") >= 20, outcomes
    assert all(k == "timeout" for k in kinds[first_timeout:]), " ".join(kinds)
    # Its SYNs stop reaching the stack: XDP drops them in the driver.
    syn0 = syns_from_abuser()
    assert all(o[0] == "timeout" for o in abuse(3))
    assert syns_from_abuser() == syn0, "SYNs from the blocked abuser reached the stack"
    # The well-behaved client (under the rate: one request every 600 ms) is not affected.
    for _ in range(4):
        assert client_ok()
        time.sleep(0.6)
    m = metrics()
    assert metric(m, r'ringx_escalations_total\{result="blocked"\} (\d+)') == 1, m
    assert metric(m, r"ringx_escalated_clients (\d+)") == 1, m
    assert metric(m, r'ringx_xdp_packets_total\{verdict="drop",reason="drop_block"\} (\d+)') > 0, m
    assert metric(m, r'ringx_limit_req_total\{zone="0",result="refused"\} (\d+)') >= 20, m
    lst = ns("s", ringx_path(), "xdp", "--pin-dir", PIN, "list").stdout
    assert ATK in lst and "api" in lst, lst


def test_the_block_is_lifted_when_it_runs_out(server):
    # After the previous test's block has run out the abuser is answered again.
    time.sleep(BLOCK_FOR + 1.5)
    kinds = [o[0] for o in abuse(2)]
    assert all(k in ("200", "429") for k in kinds), kinds
    m = metrics()
    assert metric(m, r"ringx_escalated_clients (\d+)") == 0, m
    assert metric(m, r'ringx_escalations_total\{result="expired"\} (\d+)') >= 1, m
    lst = ns("s", ringx_path(), "xdp", "--pin-dir", PIN, "list").stdout
    assert ATK not in lst, lst


def test_repeated_malformed_requests_are_escalated_too(server):
    outcomes = abuse(20000, src=GARBLER, what="garbage")
    kinds = [o[0] for o in outcomes]
    assert "timeout" in kinds, (len(kinds), outcomes[-5:])
    first_timeout = kinds.index("timeout")
    assert kinds[:first_timeout] == ["400"] * first_timeout and first_timeout >= 5, kinds
    assert all(k == "timeout" for k in kinds[first_timeout:]), kinds
    lst = ns("s", ringx_path(), "xdp", "--pin-dir", PIN, "list").stdout
    assert GARBLER in lst, lst
    assert client_ok(), "the well-behaved client is not affected"
