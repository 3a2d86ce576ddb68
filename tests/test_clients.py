"""Real clients against both engines: curl, http.client, ab, wrk."""

import http.client
import re
import shutil
import subprocess

import pytest

from conftest import free_port, runtime_section

BODY64 = "x" * 63 + "\n"
assert len(BODY64) == 64


@pytest.fixture(scope="module")
def srv(engine, ringx_module):
    p = free_port()
    cfg = runtime_section(engine, extra="cpus = [0]\n") + f"""
[http]
client_max_body_size = "64k"
[[server]]
listen = ["127.0.0.1:{p}"]
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{BODY64[:-1]}\\n", content_type = "text/plain" }}
  [[server.location]]
  path = "/post"
  return = {{ status = 201, body = "posted\\n" }}
"""
    r = ringx_module.make(cfg, engine=engine, name=f"clients-{engine}")
    r.port = p
    r.url = f"http://127.0.0.1:{p}"
    yield r
    r.stop()


def need(tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


def run(cmd, timeout=60):
    """Run a client; stdout/stderr decoded without newline translation (keeps \r\n)."""
    cp = subprocess.run(cmd, capture_output=True, timeout=timeout)
    cp.stdout = cp.stdout.decode("latin-1")
    cp.stderr = cp.stderr.decode("latin-1")
    return cp


# --------------------------------------------------------------------------- curl

def test_curl_get(srv):
    need("curl")
    cp = run(["curl", "-sS", "-i", srv.url + "/"])
    assert cp.returncode == 0, cp.stderr
    head, _, body = cp.stdout.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200 OK")
    assert body == BODY64
    assert re.search(r"(?im)^content-length: 64\r?$", head)


def test_curl_head(srv):
    need("curl")
    cp = run(["curl", "-sS", "-I", srv.url + "/"])
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith("HTTP/1.1 200")
    assert re.search(r"(?im)^content-length: 64\r?$", cp.stdout)
    assert cp.stdout.endswith("\r\n\r\n")  # no body


def test_curl_http10(srv):
    need("curl")
    cp = run(["curl", "-sS", "-i", "--http1.0", srv.url + "/"])
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith("HTTP/1.")
    assert cp.stdout.split(" ", 2)[1] == "200"
    assert cp.stdout.endswith(BODY64)


def test_curl_post_with_and_without_expect(srv):
    need("curl")
    data = "d" * 5000  # large enough that curl would send Expect: 100-continue
    for extra in (["-H", "Expect:"], ["-H", "Expect: 100-continue"], []):
        cp = run(["curl", "-sS", "-w", "%{http_code}", "--data-binary", data] + extra + [srv.url + "/post"])
        assert cp.returncode == 0, (extra, cp.stderr)
        assert cp.stdout == "posted\n201", (extra, cp.stdout)


def test_curl_keepalive_reuse(srv):
    need("curl")
    cp = run(["curl", "-sS", "-v", srv.url + "/a", srv.url + "/b", srv.url + "/c"])
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == BODY64 * 3
    assert re.search(r"Re-using existing|[Rr]eusing existing", cp.stderr), cp.stderr


def test_curl_chunked_upload(srv):
    need("curl")
    cp = run(["curl", "-sS", "-w", "%{http_code}", "-H", "Transfer-Encoding: chunked",
              "--data-binary", "c" * 3000, srv.url + "/post"])
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == "posted\n201"


# --------------------------------------------------------------------------- http.client

def test_http_client_mixed(srv):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        for i in range(20):
            if i % 3 == 0:
                conn.request("POST", "/post", body=b"b" * (i * 100))
                r = conn.getresponse()
                assert (r.status, r.read()) == (201, b"posted\n")
            elif i % 3 == 1:
                conn.request("HEAD", "/")
                r = conn.getresponse()
                assert (r.status, r.read(), r.getheader("Content-Length")) == (200, b"", "64")
            else:
                conn.request("GET", "/x", headers={"Accept": "*/*"})
                r = conn.getresponse()
                assert (r.status, r.read().decode()) == (200, BODY64)
    finally:
        conn.close()


# --------------------------------------------------------------------------- ab

def _ab(args, srv):
    need("ab")
    cp = run(["ab", "-q", "-s", "10"] + args + [srv.url + "/"], timeout=90)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    out = cp.stdout
    n = int(args[args.index("-n") + 1])
    assert re.search(rf"Complete requests:\s+{n}\b", out), out
    assert re.search(r"Failed requests:\s+0\b", out), out
    assert "Non-2xx responses" not in out, out
    assert re.search(r"Document Length:\s+64 bytes", out), out
    return out


def test_ab_keepalive(srv):
    out = _ab(["-n", "2000", "-c", "10", "-k"], srv)
    assert re.search(r"Keep-Alive requests:\s+2000\b", out), out


def test_ab_no_keepalive(srv):
    _ab(["-n", "500", "-c", "5"], srv)


# --------------------------------------------------------------------------- wrk

def test_wrk(srv):
    need("wrk")
    need("taskset")
    cp = run(["taskset", "-c", "1", "wrk", "-t1", "-c50", "-d3s", srv.url + "/"], timeout=30)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    out = cp.stdout
    assert "Non-2xx or 3xx responses" not in out, out
    assert "Socket errors" not in out, out
    m = re.search(r"(\d+) requests in", out)
    assert m and int(m.group(1)) > 0, out
    assert srv.proc.poll() is None, "ringx died under wrk:\n" + srv.log()
