"""The admin listener's status page (GET /, /status.json, POST /action) in headless Chromium:
a screenshot, the numbers on the page checked against /metrics under load, and the actions
(drain clicked, enable, weight, purge) with their effect on traffic; a wrong token changes
nothing, answers 403 and is logged."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from conftest import free_port
from tls_pki import Pki
from upstream_server import UpstreamServer

TOKEN = "s3cret-token"


def fetch(url: str, data: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics(admin: int) -> dict[str, float]:
    """/metrics as {'name{labels}': value}."""
    _, text = fetch(f"http://127.0.0.1:{admin}/metrics")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def total(m: dict[str, float], name: str, **labels) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in m.items()
               if (k == name or k.startswith(name + "{")) and all(w in k for w in want))


class Load:
    """Clients on keep-alive connections asking /name, counting which server answered."""

    def __init__(self, port: int, threads: int = 3):
        self.port = port
        self.by_server: Counter[str] = Counter()
        self.errors = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stop.is_set():
            try:
                c.request("GET", "/name")
                r = c.getresponse()
                body = r.read().decode()
                with self.lock:
                    self.by_server[body] += 1
            except (OSError, http.client.HTTPException):
                with self.lock:
                    self.errors += 1
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            time.sleep(0.002)
        c.close()

    def window(self, n: int) -> Counter[str]:
        """Which servers answered the next `n` requests."""
        with self.lock:
            start = Counter(self.by_server)
        deadline = time.monotonic() + 60
        while True:
            with self.lock:
                now = Counter(self.by_server)
            got = now - start
            if sum(got.values()) >= n:
                return got
            assert time.monotonic() < deadline, f"load stalled: {got}"
            time.sleep(0.01)

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


def until(what: str, fn, timeout: float = 20.0):
    """Waits until fn() is true (a click's page load is not waited for by the driver);
    elements of the page being replaced may go stale meanwhile."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    deadline = time.monotonic() + timeout
    while True:
        try:
            if fn():
                return
        except (StaleElementReferenceException, NoSuchElementException):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def state(drv, addr: str) -> str:
    row = drv.find_element("css selector", f'tr[data-server="{addr}"]')
    return row.find_element("css selector", "td.state").text


def chrome():
    """A headless Chromium driven through chromedriver, or a skip saying what is missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (scripts/install-deps.sh installs it)")
    binary = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("chromium or chromedriver is missing (scripts/install-deps.sh installs "
                    "Debian's chromium and chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1100"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=opts)


@pytest.fixture
def site(ringx, tmp_path):
    a, b = UpstreamServer("alpha"), UpstreamServer("beta")
    pki = Pki(tmp_path / "pki")
    cert, key = pki.leaf("site", ["localhost"], days=(-1, 30))
    port, tls_port, admin = free_port(), free_port(), free_port()
    cache = tmp_path / "cache"
    cfg = f"""
[runtime]
zones = 2
[admin]
listen = "127.0.0.1:{admin}"
token = "{TOKEN}"
[[upstream]]
name = "app"
servers = ["{a.addr}", "{b.addr}"]
keepalive = 8
[[proxy_cache_path]]
name = "pages"
path = "{cache}"
[[server]]
listen = ["127.0.0.1:{port}"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  [[server.location]]
  path = "/cached/"
  proxy_pass = "app"
  proxy_cache = {{ zone = "pages", key = "$uri", valid = {{ "200" = "10m" }} }}
[[server]]
listen = ["127.0.0.1:{tls_port}"]
tls = {{ cert = "{cert}", key = "{key}" }}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "tls" }}
"""
    r = ringx.make(cfg)
    yield r, port, admin, a, b
    a.close()
    b.close()


def test_status_page_in_chromium(site, tmp_path):
    r, port, admin, a, b = site
    base = f"http://127.0.0.1:{admin}"
    load = Load(port)
    drv = chrome()
    try:
        load.window(200)
        # The page's numbers against /metrics read just before and just after it.
        before = metrics(admin)
        drv.get(base + "/?refresh=0")
        after = metrics(admin)
        page_reqs = int(drv.find_element("id", "requests").text)
        assert total(before, "ringx_requests_total") <= page_reqs <= \
            total(after, "ringx_requests_total"), (before, page_reqs)
        for up in (a, b):
            row = drv.find_element("css selector", f'tr[data-server="{up.addr}"]')
            got = int(row.find_element("css selector", "td.responses").text)
            lo = total(before, "ringx_upstream_server_responses_total", server=up.addr)
            hi = total(after, "ringx_upstream_server_responses_total", server=up.addr)
            assert lo <= got <= hi, (up.addr, lo, got, hi)
            assert lo > 0, f"no traffic reached {up.addr}"
            assert row.find_element("css selector", "td.state").text == "UP"
        zones = drv.find_elements("css selector", "#zones tr[id^=zone-]")
        assert len(zones) == 2
        assert sum(int(z.find_element("css selector", "td.reqs").text) for z in zones) == page_reqs
        certs = drv.find_element("id", "certs").text
        assert "CN=localhost" in certs and (" 29" in certs or " 30" in certs), certs
        listeners = drv.find_element("id", "listeners").text
        assert "https" in listeners and "http" in listeners
        shot = tmp_path / "status-page.png"
        drv.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        print(f"\nscreenshot: {shot}")
        if os.environ.get("RINGX_SCREENSHOT_DIR"):
            shutil.copy(shot, Path(os.environ["RINGX_SCREENSHOT_DIR"]) / "status-page.png")

        # Drain without the token: 403, nothing changes, and it is logged.
        row = drv.find_element("css selector", f'tr[data-server="{a.addr}"]')
        row.find_element("css selector", "button[value=drain]").click()
        until("the 403 page", lambda: "forbidden" in drv.find_element("tag name", "body").text)
        assert total(metrics(admin), "ringx_upstream_server_drained", server=a.addr) == 0
        r.wait_log("refused action \"drain\"")
        assert load.window(100)[a.name] > 0

        # With the token: drained; new requests all go to the other server.
        drv.get(base + f"/?refresh=0&token={TOKEN}")
        row = drv.find_element("css selector", f'tr[data-server="{a.addr}"]')
        row.find_element("css selector", "button[value=drain]").click()
        until("DRAIN on the page", lambda: state(drv, a.addr) == "DRAIN")
        r.wait_log(f"drained server {a.addr} of upstream app")
        w = load.window(200)
        assert w[a.name] == 0 and w[b.name] >= 200, w
        assert total(metrics(admin), "ringx_upstream_server_drained", server=a.addr) == 1

        # Enable again (the button is now "enable"), then a weight of 3 for beta.
        row = drv.find_element("css selector", f'tr[data-server="{a.addr}"]')
        row.find_element("css selector", "button[value=enable]").click()
        until("UP on the page", lambda: state(drv, a.addr) == "UP")
        r.wait_log(f"enabled server {a.addr} of upstream app")
        w = load.window(100)
        assert w[a.name] > 0, w
        row = drv.find_element("css selector", f'tr[data-server="{b.addr}"]')
        field = row.find_element("css selector", "input[name=weight]")
        field.clear()
        field.send_keys("3")
        row.find_element("css selector", "button[value=weight]").click()
        r.wait_log(f"set the weight of server {b.addr} of upstream app to 3")
        until("weight 3 on the page", lambda: drv.find_element(
            "css selector", f'tr[data-server="{b.addr}"] td.weight').text == "3")
        w = load.window(400)
        share = w[b.name] / (w[a.name] + w[b.name])
        assert 0.6 < share < 0.9, w
        assert total(metrics(admin), "ringx_upstream_server_weight", server=b.addr) == 3
        assert load.errors == 0
    finally:
        drv.quit()
        load.close()


def test_actions_token_json_and_purge(site):
    r, port, admin, a, b = site
    base = f"http://127.0.0.1:{admin}"
    # status.json agrees with /metrics.
    for _ in range(20):
        fetch(f"http://127.0.0.1:{port}/name")
    m0 = metrics(admin)
    st, body = fetch(base + "/status.json")
    m1 = metrics(admin)
    assert st == 200
    j = json.loads(body)
    assert total(m0, "ringx_requests_total") <= j["requests"] <= total(m1, "ringx_requests_total")
    assert {s["addr"] for s in j["servers"]} == {a.addr, b.addr}
    assert all(s["healthy"] and not s["drained"] for s in j["servers"])
    assert j["certificates"][0]["subject"] == "CN=localhost"
    assert 28 < j["certificates"][0]["days_left"] <= 30
    assert len(j["zones"]) == 2
    assert j["servers"][0]["latency_ms"]["p50"] is not None

    # A wrong token: 403, nothing drained, logged.
    form = urllib.parse.urlencode({"action": "drain", "upstream": "app",
                                   "server": a.addr}).encode()
    st, msg = fetch(base + "/action", form, {"X-Ringx-Token": "wrong"})
    assert st == 403, msg
    r.wait_log("refused action \"drain\"")
    assert total(metrics(admin), "ringx_upstream_server_drained", server=a.addr) == 0
    # Bearer token: drained.
    st, msg = fetch(base + "/action", form, {"Authorization": f"Bearer {TOKEN}"})
    assert st == 200, msg
    assert total(metrics(admin), "ringx_upstream_server_drained", server=a.addr) == 1
    for _ in range(20):
        assert fetch(f"http://127.0.0.1:{port}/name")[1] == b.name
    # Bad requests say what to give.
    st, msg = fetch(base + "/action", b"action=weight&upstream=app&server=" +
                    a.addr.encode() + b"&weight=0&token=" + TOKEN.encode())
    assert st == 400 and "1 to 1000" in msg
    st, msg = fetch(base + "/action", b"action=drain&upstream=nope&token=" + TOKEN.encode())
    assert st == 404 and "nope" in msg

    # Purge a cache key from the page's form fields.
    url = f"http://127.0.0.1:{port}/cached/x"
    for want in ("MISS", "HIT"):
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.headers["X-Cache-Status"] == want
    key = "/cached/x"
    form = urllib.parse.urlencode({"action": "purge", "cache": "pages", "key": key,
                                   "token": TOKEN}).encode()
    st, msg = fetch(base + "/action", form)
    assert st == 200, msg
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["X-Cache-Status"] == "MISS"
    st, page = fetch(base + "/?refresh=2")
    assert '<meta http-equiv="refresh" content="2">' in page
    assert "hit ratio" in page and "<script" not in page
