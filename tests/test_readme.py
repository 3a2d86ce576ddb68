"""The README's configuration example is a configuration `ringx check` accepts.

The README shows a TOML block with every section, one for HTTPS, one for [http2], one for
compression and one for rewriting. Each is checked as written,
except for what depends on the machine (the HTTPS block's certificate paths become
certificates made for the test), and for the first: the CPUs named (`cpus`, `sqpoll_cpu`) become CPUs this process
may use, and the paths that must exist (the static `root`, the access log's directory) move
into a temporary directory. Each of these substitutions must still find its text, so a README
change that drops one shows up here rather than passing unchecked.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def all_blocks() -> list[str]:
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 9, f"expected nine ```toml blocks in README.md, found {len(blocks)}"
    return blocks


def readme_blocks() -> list[str]:
    """The blocks checked by position: every one but the automatic HTTPS example."""
    return [b for b in all_blocks() if "acme = true" not in b]


def acme_block() -> str:
    [b] = [b for b in all_blocks() if "acme = true" in b]
    return b


def readme_toml() -> str:
    return readme_blocks()[0]


def localise(text: str, tmp: Path) -> str:
    """The README's block with its machine-dependent values replaced (see the module doc)."""
    cpus = sorted(os.sched_getaffinity(0))
    zones = cpus[:2]
    www = tmp / "www"
    www.mkdir()
    logs = tmp / "log"
    logs.mkdir()
    subs = [
        (r"(?m)^zones = \d+", f"zones = {len(zones)}"),
        (r"(?m)^cpus = \[[^\]]*\]", f"cpus = {zones}"),
        (r"(?m)^sqpoll_cpu = \d+", f"sqpoll_cpu = {cpus[-1]}"),
        (r'root = "/srv/www"', f'root = "{www}"'),
        (r'access_log = "/var/log/ringx/access.log"', f'access_log = "{logs}/access.log"'),
    ]
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text)
        assert n == 1, f"README's TOML block: {pattern!r} matched {n} times, not once"
    return text


def test_readme_config_passes_check(ringx_bin, tmp_path):
    cfg = tmp_path / "readme.toml"
    cfg.write_text(localise(readme_toml(), tmp_path))
    r = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, f"ringx check rejects the README's example:\n{r.stderr}"
    assert "is valid" in r.stderr + r.stdout


def test_an_undefined_upstream_is_still_caught(ringx_bin, tmp_path):
    """The check above can fail: the README's [[stream]] without its upstream is rejected."""
    text = localise(readme_toml(), tmp_path)
    broken, n = re.subn(r'(?m)^name = "db"$', 'name = "db-other"', text)
    assert n == 1
    cfg = tmp_path / "broken.toml"
    cfg.write_text(broken)
    r = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "db" in r.stderr, r.stderr


def test_readme_https_example_passes_check(ringx_bin, tmp_path):
    from tls_pki import Pki
    pki = Pki(tmp_path / "pki")
    text = readme_blocks()[1]
    for kind in ("ec", "rsa"):
        cert, key = pki.leaf(kind, ["example.com", "*.example.com"], kind=kind)
        for old, new in ((f"/etc/ringx/{kind}.pem", cert), (f"/etc/ringx/{kind}.key", key)):
            text, n = re.subn(re.escape(old), str(new), text)
            assert n == 1, f"README's HTTPS block: {old} found {n} times, not once"
    text, n = re.subn(r'"0\.0\.0\.0:443"', '"127.0.0.1:0"', text)
    assert n == 1
    cfg = tmp_path / "https.toml"
    cfg.write_text(text)
    r = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, f"ringx check rejects the README's HTTPS example:\n{r.stderr}"
    # And the check can fail: a key that is not the certificate's.
    cfg.write_text(text.replace(str(pki.dir / "ec.key"), str(pki.dir / "rsa.key")))
    r = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "does not match" in r.stderr, r.stderr


def check(ringx_bin, tmp_path, name, text):
    cfg = tmp_path / name
    cfg.write_text(text)
    return subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True,
                          timeout=30)


def test_readme_compression_and_rewriting_examples_pass_check(ringx_bin, tmp_path):
    server = ('[[server]]\nlisten = ["127.0.0.1:0"]\n[[server.location]]\npath = "/"\n'
              'return = { status = 200 }\n')
    r = check(ringx_bin, tmp_path, "compress.toml", readme_blocks()[3] + server)
    assert r.returncode == 0, f"ringx check rejects the README's compression example:\n{r.stderr}"
    spa = tmp_path / "spa"
    spa.mkdir()
    text, n = re.subn(r'root = "/srv/spa"', f'root = "{spa}"', readme_blocks()[4])
    assert n == 1
    r = check(ringx_bin, tmp_path, "rewrite.toml", text)
    assert r.returncode == 0, f"ringx check rejects the README's rewriting example:\n{r.stderr}"
    # And the check can fail: a regex that does not compile.
    broken, n = re.subn(re.escape("v([0-9]+)/"), "v([0-9]+/", text)
    assert n == 1
    r = check(ringx_bin, tmp_path, "broken.toml", broken)
    assert r.returncode != 0 and "invalid regex" in r.stderr, r.stderr


def test_readme_http2_example_passes_check(ringx_bin, tmp_path):
    server = ('[[server]]\nlisten = ["127.0.0.1:0"]\n[[server.location]]\npath = "/"\n'
              'return = { status = 200 }\n')
    text = readme_blocks()[2]
    assert text.startswith("[http2]")
    r = check(ringx_bin, tmp_path, "http2.toml", text + server)
    assert r.returncode == 0, f"ringx check rejects the README's [http2] example:\n{r.stderr}"
    # And the check can fail: a frame size HTTP/2 does not allow.
    broken, n = re.subn(r"max_frame_size = 16384", "max_frame_size = 100", text)
    assert n == 1
    r = check(ringx_bin, tmp_path, "broken.toml", broken + server)
    assert r.returncode != 0 and "max_frame_size" in r.stderr, r.stderr


def test_readme_access_limit_and_cache_examples_pass_check(ringx_bin, tmp_path):
    """The access-control, limits and cache blocks are fragments: checked together, on a
    server with the upstreams and the [xdp] section they name, their files made here."""
    users = tmp_path / "htpasswd"
    users.write_text("admin:$apr1$saltsalt$LrttParrLPdxvgutaSXWJ0\n")
    text = ('[xdp]\ndev = "eth0"\n'
            '[[upstream]]\nname = "app"\nservers = ["127.0.0.1:9"]\n'
            '[[upstream]]\nname = "auth"\nservers = ["127.0.0.1:9"]\n'
            '[[server]]\nlisten = ["127.0.0.1:0"]\n'
            '[[server.location]]\npath = "/base/"\nreturn = { status = 200 }\n')
    text += "\n".join(readme_blocks()[5:])
    for old, new in (("/etc/ringx/htpasswd", str(users)), ("/var/cache/ringx/pages", str(tmp_path / "pages"))):
        text, n = re.subn(re.escape(old), new, text)
        assert n == 1, f"README's fragments: {old} found {n} times, not once"
    cfg = tmp_path / "policy.toml"
    cfg.write_text(text)
    r = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, f"ringx check rejects the README's fragments:\n{r.stderr}\n{text}"
    # And the check can fail: the same without the [xdp] that escalation pushes to.
    cfg.write_text(text.replace('[xdp]\ndev = "eth0"\n', ""))
    r = subprocess.run([ringx_bin, "check", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "[xdp]" in r.stderr, r.stderr


def test_readme_automatic_https_example_is_two_lines_that_pass_check(ringx_bin, tmp_path):
    text = acme_block()
    assert len(text.strip().splitlines()) == 2, text
    www = tmp_path / "www"
    www.mkdir()
    text, n = re.subn(r'root = "/srv/www"', f'root = "{www}"', text)
    assert n == 1
    r = check(ringx_bin, tmp_path, "acme.toml", text)
    assert r.returncode == 0, f"ringx check rejects the README's automatic HTTPS example:\n{r.stderr}"
    # And the check can fail: a wildcard without a DNS hook.
    r = check(ringx_bin, tmp_path, "wild.toml", text.replace('"example.com"', '"*.example.com"'))
    assert r.returncode != 0 and "dns-01" in r.stderr, r.stderr
