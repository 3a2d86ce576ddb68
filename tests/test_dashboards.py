"""contrib/: every metric the Grafana dashboard and the Prometheus alert rules name exists on a
running ringx whose configuration uses each feature (upstreams, TLS, the proxy cache; the XDP
filter in a network namespace where root allows one)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import urllib.request

import pytest
import yaml

from conftest import REPO, free_port
from tls_pki import Pki
from upstream_server import UpstreamServer

DASHBOARD = REPO / "contrib" / "grafana" / "ringx-dashboard.json"
ALERTS = REPO / "contrib" / "prometheus" / "ringx-alerts.yml"
NAME = re.compile(r"\bringx_[a-z0-9_]+")


def exprs() -> list[str]:
    d = json.loads(DASHBOARD.read_text())
    out = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    out += [v["query"]["query"] for v in d["templating"]["list"] if v["type"] == "query"]
    rules = yaml.safe_load(ALERTS.read_text())
    for g in rules["groups"]:
        for r in g["rules"]:
            assert {"alert", "expr", "labels", "annotations"} <= r.keys(), r
            out.append(r["expr"])
    return out


def names() -> set[str]:
    return {n for e in exprs() for n in NAME.findall(e)}


def sampled(text: str) -> set[str]:
    """Names with at least one sample (not only HELP/TYPE)."""
    return {re.split(r"[{ ]", ln, 1)[0] for ln in text.splitlines()
            if ln and not ln.startswith("#")}


def test_files_are_well_formed():
    d = json.loads(DASHBOARD.read_text())
    assert d["uid"] == "ringx-overview" and d["panels"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
    # Requests, latency, errors, upstream health, zones, TLS, cache and XDP are covered.
    n = names()
    for want in ("ringx_requests_total", "ringx_upstream_server_response_seconds_bucket",
                 "ringx_responses_total", "ringx_upstream_server_healthy",
                 "ringx_zone_parked_seconds_total", "ringx_tls_handshakes_total",
                 "ringx_cache_requests_total", "ringx_xdp_packets_total"):
        assert want in n, want


def test_every_named_metric_exists(ringx, tmp_path):
    up = UpstreamServer("u")
    try:
        pki = Pki(tmp_path / "pki")
        cert, key = pki.leaf("site", ["localhost"])
        port, tls_port, admin = free_port(), free_port(), free_port()
        r = ringx.make(f"""
[runtime]
zones = 2
[http]
access_log = "{tmp_path}/access.log"
[admin]
listen = "127.0.0.1:{admin}"
[[upstream]]
name = "app"
servers = ["{up.addr}"]
[[proxy_cache_path]]
name = "c"
path = "{tmp_path}/cache"
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  proxy_cache = {{ zone = "c" }}
[[server]]
listen = ["127.0.0.1:{tls_port}"]
tls = {{ cert = "{cert}", key = "{key}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "t" }}
""")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=10) as resp:
            resp.read()
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10).read()
        have = sampled(text.decode())
        xdp = {n for n in names() if n.startswith("ringx_xdp_")}
        missing = sorted(names() - xdp - have)
        assert not missing, f"named in contrib/ but not on /metrics: {missing}"
        r.signal(signal.SIGTERM)
        r.wait_exit(15)
    finally:
        up.close()


def test_xdp_metrics_exist(ringx, tmp_path):
    """The XDP filter's families, from a ringx with [xdp] on a veth in its own namespace."""
    if os.geteuid() != 0:
        pytest.skip("not root: the XDP filter needs root and a network namespace")
    if shutil.which("ip") is None or not os.path.isdir("/sys/fs/bpf"):
        pytest.skip("no ip(8) or no /sys/fs/bpf")
    ns = f"rxdash{os.getpid() % 100000}"
    pin = f"/sys/fs/bpf/ringx-dash-{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {made.stderr.strip()}")
    try:
        for cmd in (["link", "add", "vd0", "type", "veth", "peer", "name", "vd1"],
                    ["addr", "add", "10.78.0.1/24", "dev", "vd0"],
                    ["link", "set", "vd0", "up"], ["link", "set", "vd1", "up"],
                    ["link", "set", "lo", "up"]):
            subprocess.run(["ip", "-n", ns, *cmd], check=True, capture_output=True)
        r = ringx.make(f"""
[runtime]
zones = 1
[admin]
listen = "127.0.0.1:9901"
[[server]]
listen = ["10.78.0.1:8080"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "ok" }}
[xdp]
dev = "vd0"
mode = "generic"
pin_dir = "{pin}"
detach_on_exit = true
""", preexec_fn=setns_to_path(f"/run/netns/{ns}"), start=False)
        r.start(wait=False)
        r.wait_log("listening on", timeout=15)
        got = subprocess.run(["ip", "netns", "exec", ns, "curl", "-sf",
                              "http://127.0.0.1:9901/metrics"], capture_output=True,
                             text=True, timeout=15)
        have = sampled(got.stdout)
        xdp = {n for n in names() if n.startswith("ringx_xdp_")}
        assert xdp and xdp <= have, f"missing: {sorted(xdp - have)}"
        r.signal(signal.SIGTERM)
        r.wait_exit(15)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(pin, ignore_errors=True)


def setns_to_path(path: str):
    """A preexec_fn that moves the child into the network namespace at `path` only."""
    def enter():
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        if libc.setns(fd, 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        os.close(fd)
    return enter

