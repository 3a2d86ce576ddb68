"""Host-based virtual servers sharing one listen address."""

import pytest

from conftest import free_port, runtime_section
from util_http import request, roundtrip


def _server(name_list, body, default=False, port=0):
    names = ", ".join(f'"{n}"' for n in name_list)
    return f"""
[[server]]
listen = ["127.0.0.1:{port}"]
server_name = [{names}]
default = {"true" if default else "false"}
  [[server.location]]
  path = "/"
  return = {{ status = 200, body = "{body}" }}
"""


@pytest.fixture(scope="module")
def first_default(engine, ringx_module):
    p = free_port()
    cfg = (runtime_section(engine) + _server(["a.test"], "A", port=p)
           + _server(["b.test", "*.example.org"], "B", port=p)
           + _server(["example.org", "www.exact.org"], "C", port=p))
    r = ringx_module.make(cfg, engine=engine, name=f"vhost1-{engine}")
    r.port = p
    yield r
    r.stop()


@pytest.fixture(scope="module")
def second_default(engine, ringx_module):
    p = free_port()
    cfg = (runtime_section(engine) + _server(["a.test"], "A", port=p)
           + _server(["b.test"], "B", default=True, port=p))
    r = ringx_module.make(cfg, engine=engine, name=f"vhost2-{engine}")
    r.port = p
    yield r
    r.stop()


def body_for(port, host):
    resp, _ = roundtrip(port, request("GET", "/", host=host))
    assert resp.status == 200, resp
    return resp.body


@pytest.mark.parametrize("host,expected", [
    ("a.test", b"A"), ("b.test", b"B"), ("A.TEST", b"A"), ("b.test:1234", b"B"), ("a.test.", b"A"),
    ("unknown.test", b"A"), ("127.0.0.1", b"A"),
    ("www.example.org", b"B"), ("deep.sub.example.org", b"B"), ("example.org", b"C"),
    ("www.exact.org", b"C"), ("notexample.org", b"A"),
])
def test_host_selects_server(first_default, host, expected):
    assert body_for(first_default.port, host) == expected, host


@pytest.mark.parametrize("host,expected", [
    ("a.test", b"A"), ("b.test", b"B"), ("unknown.test", b"B"), ("127.0.0.1", b"B"),
])
def test_default_true_is_fallback(second_default, host, expected):
    assert body_for(second_default.port, host) == expected, host


def test_absolute_form_target_host_wins(first_default):
    raw = b"GET http://b.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n"
    resp, _ = roundtrip(first_default.port, raw)
    assert resp.status == 200 and resp.body == b"B", resp


def test_http10_without_host_uses_default(second_default):
    resp, _ = roundtrip(second_default.port, b"GET / HTTP/1.0\r\n\r\n")
    assert resp.status == 200 and resp.body == b"B", resp
