#!/usr/bin/env bash
# Builds ringx_<version>_<arch>.deb from a staged tree with dpkg-deb (`make deb` runs it after
# the release build). Usage: scripts/build-deb.sh [--version V] [--out DIR]
#   --version: the package version (default: the workspace's, from Cargo.toml)
#   --out:     where the .deb goes (default: target/debian)
# Needs target/release/ringx and target/release/libringx_preload.so.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
out=target/debian
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "build-deb: unknown argument $1 (--version V, --out DIR)" >&2; exit 2 ;;
  esac
done
bin=${RINGX_BIN:-target/release/ringx}
lib=$(dirname "$bin")/libringx_preload.so
for f in "$bin" "$lib"; do
  [ -f "$f" ] || { echo "build-deb: $f is missing; run \`make release\` first" >&2; exit 1; }
done
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"

install -d "$root/DEBIAN" "$root/usr/sbin" "$root/usr/lib/ringx" "$root/etc/ringx" \
  "$root/lib/systemd/system" "$root/etc/logrotate.d" "$root/usr/share/man/man8" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d" "$root/usr/share/ringx/systemd" \
  "$root/usr/share/doc/ringx"
# Debug information stays out of the package (82 MB of it in the binary).
objcopy --strip-debug "$bin" "$root/usr/sbin/ringx"
objcopy --strip-debug "$lib" "$root/usr/lib/ringx/libringx_preload.so"
chmod 755 "$root/usr/sbin/ringx"
chmod 644 "$root/usr/lib/ringx/libringx_preload.so"
install -m 644 packaging/ringx.toml "$root/etc/ringx/ringx.toml"
install -m 644 packaging/systemd/ringx.service "$root/lib/systemd/system/ringx.service"
install -m 644 packaging/systemd/xdp.conf packaging/systemd/ringx.socket "$root/usr/share/ringx/systemd/"
install -m 644 packaging/ringx.logrotate "$root/etc/logrotate.d/ringx"
# The man page and completions come from the CLI definition (ringx gen).
"$bin" gen man | gzip -9n > "$root/usr/share/man/man8/ringx.8.gz"
"$bin" gen bash > "$root/usr/share/bash-completion/completions/ringx"
"$bin" gen zsh > "$root/usr/share/zsh/vendor-completions/_ringx"
"$bin" gen fish > "$root/usr/share/fish/vendor_completions.d/ringx.fish"
install -m 644 README.md "$root/usr/share/doc/ringx/README.md"
gzip -9n "$root/usr/share/doc/ringx/README.md"
cat > "$root/usr/share/doc/ringx/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ringx
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
COPY
chmod 644 "$root"/usr/share/*/*/* "$root"/usr/share/doc/ringx/* 2>/dev/null || true
install -m 755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
install -m 644 packaging/debian/conffiles "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CTRL
Package: ringx
Version: $version
Architecture: $arch
Maintainer: ringx developers <ringx@localhost>
Installed-Size: $size
Depends: libc6 (>= 2.34), libgcc-s1, adduser | passwd
Suggests: logrotate
Section: httpd
Priority: optional
Homepage: https://github.com/ringx/ringx
Description: web server, reverse proxy and TCP proxy on io_uring zones
 ringx serves HTTP/1.1, HTTP/2 and TLS, proxies HTTP, gRPC, TCP and UDP to
 upstream servers with health checks and a cache, and runs one pinned zone
 (thread, io_uring, connection table) per CPU core. It is configured like
 nginx (ringx import translates an nginx.conf) and runs under systemd
 (Type=notify, reload, socket activation), with a status page on its admin port.
CTRL
mkdir -p "$out"
deb="$out/ringx_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "build-deb: $deb"
