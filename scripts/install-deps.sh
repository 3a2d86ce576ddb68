#!/usr/bin/env bash
# Installs what building and testing ringx needs, only what is missing. Idempotent; run as
# root on Debian (CI and `make` call it). Set RINGX_NO_INSTALL=1 to skip.
set -euo pipefail
[ "${RINGX_NO_INSTALL:-0}" = 1 ] && exit 0

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
have curl   || need_apt+=(curl)
have wrk    || need_apt+=(wrk)
have ab     || need_apt+=(apache2-utils)
have nginx  || [ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
have h2load || need_apt+=(nghttp2-client)
# nginx's stream module: the UDP stream benchmark's peer (bench/udp.py).
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need_apt+=(libnginx-mod-stream)
have haproxy || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
have cc     || need_apt+=(build-essential)
# libssl-dev: bench/tls_load.c, the HTTPS benchmark's flood and keep-alive clients (OpenSSL).
[ -f /usr/include/openssl/ssl.h ] || need_apt+=(libssl-dev)
have pkg-config || need_apt+=(pkg-config)
have ip     || need_apt+=(iproute2)
have taskset || need_apt+=(util-linux)
have python3 || need_apt+=(python3 python3-pip)
# XDP (crates/xdp): clang compiles bpf/*.bpf.c; the tests and `make bench` use the rest.
have clang   || need_apt+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need_apt+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] && [ -f "/usr/include/$(gcc -print-multiarch 2>/dev/null)/asm/types.h" ] \
  || need_apt+=(linux-libc-dev)
have bpftool || [ -x /usr/sbin/bpftool ] || need_apt+=(bpftool)
have hping3  || [ -x /usr/sbin/hping3 ] || need_apt+=(hping3)
have iptables || [ -x /usr/sbin/iptables ] || need_apt+=(iptables)
# nft: tests/test_tproxy.py sets up the transparent proxy's rules with iptables and with nft.
have nft || [ -x /usr/sbin/nft ] || need_apt+=(nftables)
have ethtool || [ -x /usr/sbin/ethtool ] || need_apt+=(ethtool)
# liburing: `make bench` builds the io_uring yardsticks (bench/yardstick/, bench/echo/yardstick/).
[ -f /usr/include/liburing.h ] || need_apt+=(liburing-dev)
# perf: syscall counts in the SQPOLL test and `make bench` (raw_syscalls:sys_enter).
have perf    || need_apt+=(linux-perf)
# valgrind: instructions per request in `make bench-ab` (bench/instructions.py).
have valgrind || need_apt+=(valgrind)
# testssl.sh: the TLS scan of tests/test_testssl.py and `make bench-testssl` (bench/testssl.py).
have testssl || have testssl.sh || need_apt+=(testssl.sh)
# Headless Chromium and its driver: the status page test (tests/test_status_page.py).
have chromium || need_apt+=(chromium)
have chromedriver || need_apt+=(chromium-driver)
# objcopy (binutils) and dpkg-deb: `make deb` (scripts/build-deb.sh).
have objcopy || need_apt+=(binutils)
have dpkg-deb || need_apt+=(dpkg-dev)
# Redis and Sentinel: [cluster]'s store (crates/cluster's tests, tests/test_cluster*.py).
have redis-server || need_apt+=(redis-server)
have redis-sentinel || need_apt+=(redis-sentinel)
# ngtcp2's HTTP/3 client (gtlsclient): tests/test_h3.py's interop with a client no one here
# wrote (aioquic, the other, is among the Python packages below).
have gtlsclient || need_apt+=(ngtcp2-client)
# caddy: the HTTP/3 benchmark's peer (bench/h3.py); its load client bench/h3load is built
# there with Go.
have caddy || need_apt+=(caddy)
# cmake: bench/quiche_transfer's quiche builds BoringSSL (bench/h3.py's lib-quiche row).
have cmake || need_apt+=(cmake)
# Go builds h2spec and pebble (below); ensure_go installs it when missing or too old.

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing ${need_apt[*]}; run as root or install them yourself" >&2
    exit 1
  fi
  echo "install-deps: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  # The Debian nginx package starts a service on port 80; ringx's tests run their own.
  # So do redis-server and redis-sentinel (6379, 26379).
  if have systemctl; then systemctl disable --now nginx haproxy redis-server redis-sentinel >/dev/null 2>&1 || true; fi
  pkill -x haproxy 2>/dev/null || true
  [ -f /run/nginx.pid ] && kill "$(cat /run/nginx.pid)" 2>/dev/null || true
fi

if ! have cargo; then
  echo "install-deps: cargo is missing; install Rust (stable, 1.80 or later) with rustup" >&2
  exit 1
fi

# Python packages the tests and the benchmark report use.
py_missing=$(python3 - <<'PY'
import importlib.util
mods = {"pytest": "pytest", "prometheus_client": "prometheus_client", "matplotlib": "matplotlib",
        "cryptography": "cryptography", "h2": "h2", "httpx": "httpx[http2]",
        "brotli": "brotli", "zstandard": "zstandard", "grpc": "grpcio",
        "selenium": "selenium", "yaml": "pyyaml", "aioquic": "aioquic"}
print(" ".join(p for m, p in mods.items() if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$py_missing" ]; then
  echo "install-deps: pip install $py_missing"
  python3 -m pip install -q $py_missing 2>/dev/null || python3 -m pip install -q --break-system-packages $py_missing
fi

# Go, for h2spec (tests/test_h2.py) and pebble (tests/test_acme.py), both Go modules. pebble
# 2.10 needs Go 1.25; a Go of 1.21 or later fetches that toolchain itself from the Go module
# proxy (golang.org/toolchain, GOTOOLCHAIN below). A Go on PATH that new (or any newer one)
# is used as it is. Otherwise: Debian's golang-go, and where that is older than 1.21 (Debian
# 12 has 1.19) the newest golang-1.2x of bookworm-backports (the source is added if missing).
GO_TOOLCHAIN=go1.25.14
go_minor() { "$1" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p' | grep . || echo 0; }
find_go() {
  local g
  for g in "$(command -v go || true)" /usr/local/go/bin/go $(ls -d /usr/lib/go-1.*/bin/go 2>/dev/null | sort -t. -k2 -n -r); do
    [ -n "$g" ] && [ -x "$g" ] && [ "$(go_minor "$g")" -ge 21 ] && { echo "$g"; return; }
  done
  command -v go || true
}
ensure_go() {
  GO=$(find_go)
  if [ -n "$GO" ] && [ "$(go_minor "$GO")" -ge 21 ]; then return; fi
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: Go 1.21 or later is missing (${GO:-no go} found); install it, or run as root" >&2
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$GO" ]; then
    echo "install-deps: apt-get install golang-go"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends golang-go >/dev/null || true
    GO=$(find_go)
    if [ -n "$GO" ] && [ "$(go_minor "$GO")" -ge 21 ]; then return; fi
  fi
  local codename
  codename=$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-}")
  if [ -n "$codename" ] && ! grep -rqs "$codename-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "install-deps: adding $codename-backports (for a Go of 1.21 or later)"
    echo "deb http://deb.debian.org/debian $codename-backports main" > /etc/apt/sources.list.d/ringx-backports.list
  fi
  apt-get update -qq || true
  local pkg
  pkg=$(apt-cache search --names-only '^golang-1\.[0-9]+-go$' | cut -d' ' -f1 \
        | sort -t. -k2 -n | tail -1)
  if [ -z "$pkg" ] || [ "$(echo "$pkg" | sed 's/golang-1\.\([0-9]*\)-go/\1/')" -lt 21 ]; then
    echo "install-deps: no Go of 1.21 or later in apt (${GO:-none} found): h2spec and pebble are not built; tests/test_acme.py fails under CI for want of pebble" >&2
    return
  fi
  echo "install-deps: apt-get install -t $codename-backports $pkg"
  apt-get install -y -qq --no-install-recommends -t "$codename-backports" "$pkg" >/dev/null \
    || apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null \
    || { echo "install-deps: apt-get install $pkg failed: h2spec and pebble are not built" >&2; return; }
  GO=$(find_go)
}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$ROOT/tools/bin/h2spec" ] || [ ! -x "$ROOT/tools/bin/pebble" ] || [ ! -x "$ROOT/tools/bin/pebble-challtestsrv" ]; then
  ensure_go
fi

# h2spec (HTTP/2 conformance, tests/test_h2.py): a Go module, built once into tools/bin. The
# module has no /v2 path, so the Go module proxy serves its 2.x line as +incompatible.
H2SPEC_VERSION=v2.2.1+incompatible
H2SPEC_TOOLCHAIN=go1.26.8
if [ ! -x "$ROOT/tools/bin/h2spec" ]; then
  if [ -n "${GO:-}" ] && [ -x "$GO" ]; then
    echo "install-deps: building h2spec $H2SPEC_VERSION"
    # No go.mod: its imports resolve to their newest versions (golang.org/x/net needs Go 1.26),
    # so an older Go builds it with that toolchain, fetched from the Go module proxy.
    toolchain=
    [ "$(go_minor "$GO")" -ge 26 ] || toolchain=$H2SPEC_TOOLCHAIN
    GOTOOLCHAIN=${toolchain:-${GOTOOLCHAIN:-auto}} GOBIN="$ROOT/tools/bin" "$GO" install "github.com/summerwind/h2spec/cmd/h2spec@$H2SPEC_VERSION" \
      || echo "install-deps: h2spec could not be built; tests/test_h2.py skips its conformance run" >&2
  fi
fi

# pebble and pebble-challtestsrv (Let's Encrypt's test ACME server and its DNS/challenge
# helper; tests/test_acme.py): Go modules, built once into tools/bin. pebble 2.10 needs Go
# 1.25: an older Go (1.21 or later, ensure_go) builds it with that toolchain, fetched from
# the Go module proxy. Without pebble the ACME tests skip, saying so, and fail under CI.
PEBBLE_VERSION=v2.10.3
if [ ! -x "$ROOT/tools/bin/pebble" ] || [ ! -x "$ROOT/tools/bin/pebble-challtestsrv" ]; then
  if [ -n "${GO:-}" ] && [ -x "$GO" ]; then
    toolchain=
    [ "$(go_minor "$GO")" -ge 25 ] || toolchain=$GO_TOOLCHAIN
    echo "install-deps: building pebble $PEBBLE_VERSION with $("$GO" env GOVERSION)${toolchain:+ (toolchain $toolchain)}"
    GOTOOLCHAIN=${toolchain:-${GOTOOLCHAIN:-auto}} GOBIN="$ROOT/tools/bin" "$GO" install \
      "github.com/letsencrypt/pebble/v2/cmd/pebble@$PEBBLE_VERSION" \
      "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@$PEBBLE_VERSION" \
      || echo "install-deps: pebble could not be built with $GO; tests/test_acme.py skips (fails under CI)" >&2
  else
    echo "install-deps: no Go of 1.21 or later: pebble is not built; tests/test_acme.py skips (fails under CI)" >&2
  fi
fi

# bench/h3load, quic-go's HTTP/3 client (tests/test_h3*.py and bench/h3.py build it where
# they run): its modules are fetched here, once, so that those builds need no network.
H3LOAD_GO=${GO:-$(find_go)}
if [ -n "$H3LOAD_GO" ] && [ -x "$H3LOAD_GO" ]; then
  (cd "$ROOT/bench/h3load" && "$H3LOAD_GO" mod download) \
    || echo "install-deps: the quic-go modules of bench/h3load could not be fetched; its first build fetches them" >&2
else
  echo "install-deps: no Go: bench/h3load (the quic-go client) is not built; its tests skip (fail under CI)" >&2
fi
