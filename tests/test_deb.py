"""The Debian package (`make deb`, scripts/build-deb.sh): installed with apt, upgraded from the
previous version with dpkg while it serves, and purged, in a throwaway copy of this system
(an overlay of / in a private mount, network and pid namespace, entered with chroot), where
systemd is not the init, so the maintainer scripts must not need it. Where systemd is the
init, test_systemd.py runs the unit under systemd-run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, ringx_path

PREVIOUS = "0.0.1~prev"

INSIDE = r"""
set -eu
cd /tmp/debs
fail() { echo "FAIL: $*" >&2; cat /tmp/ringx.stderr >&2 2>/dev/null || true; exit 1; }
wait_for() { i=0; until eval "$1"; do i=$((i+1)); [ $i -lt 600 ] || fail "timed out: $1"; sleep 0.1; done; }
ip link set lo up

# Install the previous version with apt (no network: its dependencies are all here).
apt-get install -y -q --no-install-recommends ./ringx_prev.deb >/tmp/apt.log 2>&1 || { cat /tmp/apt.log; fail "apt install"; }
test -x /usr/sbin/ringx || fail "no binary"
test -f /usr/lib/ringx/libringx_preload.so || fail "no preload library"
getent passwd ringx >/dev/null || fail "no ringx user"
test -f /lib/systemd/system/ringx.service || fail "no unit"
test -f /etc/logrotate.d/ringx || fail "no logrotate file"
zcat /usr/share/man/man8/ringx.8.gz | grep -q '^.SH "RINGX SERVE"' || fail "man page"
grep -q ringx /usr/share/bash-completion/completions/ringx || fail "bash completion"
grep -q ringx /usr/share/zsh/vendor-completions/_ringx || fail "zsh completion"
grep -q ringx /usr/share/fish/vendor_completions.d/ringx.fish || fail "fish completion"
[ "$(stat -c %U /var/log/ringx)" = ringx ] || fail "log folder owner"
[ "$(stat -c %U:%a /var/lib/ringx)" = ringx:750 ] || fail "state folder /var/lib/ringx: $(stat -c %U:%a /var/lib/ringx 2>&1)"
/usr/sbin/ringx check -c /etc/ringx/ringx.toml
# The unit as installed, checked offline (systemd need not be the init for this).
if command -v systemd-analyze >/dev/null; then
  man=yes; command -v man >/dev/null || man=no
  systemd-analyze verify --man=$man /lib/systemd/system/ringx.service >/tmp/verify.log 2>&1 \
    || { cat /tmp/verify.log; fail "systemd-analyze verify ringx.service"; }
  ! grep ringx /tmp/verify.log || fail "systemd-analyze verify complains about ringx.service"
  echo "verify: ok"
else
  echo "verify: skipped, systemd-analyze is missing"
fi

# ACME as the package runs it: user = "ringx" and the default storage, /var/lib/ringx/acme,
# made at start-up (the CA is unreachable here: the order fails after the storage lock).
cat > /tmp/acme.toml <<TOML
[runtime]
zones = 1
user = "ringx"
[acme]
directory = "https://127.0.0.1:9/dir"
challenge = "tls-alpn-01"
[[server]]
listen = ["127.0.0.1:8443"]
server_name = ["acme.test"]
tls = { acme = true }
  [[server.location]]
  path = "/"
  return = { status = 200, body = "secure" }
TOML
/usr/sbin/ringx serve -c /tmp/acme.toml >/tmp/acme.stderr 2>&1 &
acme_pid=$!
wait_for 'grep -q "ACME: order failed" /tmp/acme.stderr'
kill "$acme_pid"; wait "$acme_pid" 2>/dev/null || true
! grep -q "storage lock\|cannot create the storage\|cannot enter" /tmp/acme.stderr || { cat /tmp/acme.stderr; fail "ACME storage not usable by the ringx user"; }
[ "$(stat -c %U:%a /var/lib/ringx/acme)" = ringx:700 ] || fail "ACME storage: $(stat -c %U:%a /var/lib/ringx/acme)"
test -f /var/lib/ringx/acme/locks/acme.test.lock || fail "no storage lock file: $(find /var/lib/ringx)"

# No systemd here: started by hand, as a container's entry point would.
/usr/sbin/ringx serve -c /etc/ringx/ringx.toml >/tmp/ringx.stderr 2>&1 &
wait_for 'curl -sf http://127.0.0.1/ 2>/dev/null | grep -q "ringx is running"'
wait_for 'test -s /run/ringx/ringx.pid'
old=$(cat /run/ringx/ringx.pid)
[ "$(ps -o user= -p "$old" | tr -d ' ')" = ringx ] || fail "not running as ringx"
echo "# edited by the operator" >> /etc/ringx/ringx.toml

# Upgrade while two clients keep asking: none may fail, none may wait (10 s at most).
rm -f /tmp/fails /tmp/stop /tmp/count*
loads=
for k in 1 2; do
  ( n=0; while [ ! -f /tmp/stop ]; do curl -sSf --max-time 10 -o /dev/null http://127.0.0.1/ 2>>/tmp/fails || echo "curl exit $?" >> /tmp/fails; n=$((n+1)); done; echo $n > /tmp/count$k ) &
  loads="$loads $!"
done
sleep 0.3
dpkg -i ./ringx_cur.deb >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; fail "dpkg -i upgrade"; }
wait_for '[ -s /run/ringx/ringx.pid ] && [ "$(cat /run/ringx/ringx.pid)" != "$old" ]'
wait_for '! kill -0 "$old" 2>/dev/null'
sleep 0.3
touch /tmp/stop
wait $loads
new=$(cat /run/ringx/ringx.pid)
echo "upgrade: process $old -> $new, $(($(cat /tmp/count1) + $(cat /tmp/count2))) requests, $(cat /tmp/fails 2>/dev/null | grep -c "curl exit") failed"
[ ! -s /tmp/fails ] || fail "requests failed during the upgrade: $(cat /tmp/fails)"
grep -q "edited by the operator" /etc/ringx/ringx.toml || fail "the edited conffile was replaced"
dpkg-query -W -f '${Version}' ringx | grep -qx "$CUR" || fail "version after upgrade"
curl -sf http://127.0.0.1/ | grep -q "ringx is running" || fail "not serving after the upgrade"
curl -sf http://127.0.0.1:9901/status.json | grep -q '"zones"' || fail "no status page"
# What logrotate does: move the log away, then SIGUSR1 reopens it; the next request is
# written to a new file.
test -s /var/log/ringx/access.log || fail "no access log"
mv /var/log/ringx/access.log /var/log/ringx/access.log.1
kill -USR1 "$new"
wait_for 'curl -sf -o /dev/null http://127.0.0.1/ && test -s /var/log/ringx/access.log'

# Purge: everything goes but the logs; the server is stopped.
dpkg --purge ringx >/tmp/purge.log 2>&1 || { cat /tmp/purge.log; fail "dpkg --purge"; }
! kill -0 "$new" 2>/dev/null || fail "still running after purge"
for p in /usr/sbin/ringx /usr/lib/ringx /etc/ringx /lib/systemd/system/ringx.service \
         /etc/logrotate.d/ringx /var/cache/ringx /var/lib/ringx /usr/share/man/man8/ringx.8.gz; do
  ! test -e "$p" || fail "$p left after purge"
done
test -s /var/log/ringx/access.log || fail "purge removed the logs"
echo "OK"
"""

OUTSIDE = r"""
set -eu
w=$1
mount -t tmpfs tmpfs "$w/ovl"
mkdir -p "$w/ovl/upper" "$w/ovl/work" "$w/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$w/ovl/upper,workdir=$w/ovl/work" "$w/root"
r=$w/root
mount -t proc proc "$r/proc"
mount --rbind /dev "$r/dev"
mount -t sysfs sysfs "$r/sys" 2>/dev/null || true
mount -t tmpfs tmpfs "$r/run"
mount -t tmpfs tmpfs "$r/tmp"
mkdir -p "$r/tmp/debs"
cp "$w/prev.deb" "$r/tmp/debs/ringx_prev.deb"
cp "$w/cur.deb" "$r/tmp/debs/ringx_cur.deb"
cp "$w/inside.sh" "$r/tmp/inside.sh"
CUR=$2 chroot "$r" /bin/sh /tmp/inside.sh
"""


def build(out: Path, version: str | None) -> Path:
    args = [str(REPO / "scripts" / "build-deb.sh"), "--out", str(out)]
    if version:
        args += ["--version", version]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, RINGX_BIN=ringx_path()))
    assert p.returncode == 0, p.stderr
    return Path(p.stdout.strip().split("build-deb: ", 1)[1])


def test_deb_install_upgrade_purge(ringx_bin, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("installing a package needs root (mount namespace, overlay, chroot)")
    for tool in ("dpkg-deb", "unshare", "chroot", "apt-get", "curl"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is missing")
    if "overlay" not in Path("/proc/filesystems").read_text():
        pytest.skip("the kernel has no overlay filesystem (needed for a throwaway root)")
    prev = build(tmp_path / "prev", PREVIOUS)
    cur = build(tmp_path / "cur", None)
    version = re.search(r"ringx_(.+)_[^_]+\.deb$", cur.name).group(1)
    info = subprocess.run(["dpkg-deb", "--info", str(cur)], capture_output=True, text=True)
    assert "Package: ringx" in info.stdout and "conffiles" in info.stdout
    listing = subprocess.run(["dpkg-deb", "-c", str(cur)], capture_output=True, text=True).stdout
    for path in ("./usr/sbin/ringx", "./usr/lib/ringx/libringx_preload.so",
                 "./etc/ringx/ringx.toml", "./lib/systemd/system/ringx.service",
                 "./usr/share/ringx/systemd/xdp.conf", "./usr/share/ringx/systemd/ringx.socket"):
        assert path in listing, path
    w = tmp_path / "w"
    (w / "ovl").mkdir(parents=True)
    shutil.copy(prev, w / "prev.deb")
    shutil.copy(cur, w / "cur.deb")
    (w / "inside.sh").write_text(INSIDE)
    (w / "outside.sh").write_text(OUTSIDE)
    p = subprocess.run(["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc",
                        "/bin/sh", str(w / "outside.sh"), str(w), version],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0 and "unshare failed" in p.stderr:
        pytest.skip(f"cannot make namespaces here: {p.stderr.strip()}")
    print(p.stdout)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout + p.stderr
    if shutil.which("systemd-analyze"):
        assert "verify: ok" in p.stdout, p.stdout
    else:
        print("systemd-analyze is missing: the unit was not verified")
