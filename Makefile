# ringx — two commands do everything on a fresh Debian machine (as root):
#   make run    install what is missing, build (release), start ringx on its embedded default config
#   make test   install what is missing, build, run every test
CARGO ?= cargo
BIN := target/release/ringx
CONFIG ?=

.PHONY: all deps build release run deb test unit lint integration fuzz loom mutants bench bench-http bench-steer bench-ops bench-echo bench-proxy bench-xdp bench-lb bench-ab bench-preload bench-preload-proxy bench-tls bench-h2 bench-h3 bench-grpc bench-compress bench-cache bench-escalate bench-udp bench-auth bench-testssl bench-cluster clean fmt

all: release

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --workspace

release: deps
	$(CARGO) build --release --workspace

run: release
	$(BIN) serve $(if $(CONFIG),-c $(CONFIG))

# The Debian package: target/debian/ringx_<version>_<arch>.deb (scripts/build-deb.sh), for
# `apt install ./target/debian/ringx_*.deb`.
deb: release
	scripts/build-deb.sh

unit: deps
	$(CARGO) test --workspace

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 scripts/check_layout.py
	$(if $(PRUNE),rm -rf target/debug)

integration: release
	RINGX_BIN=$(CURDIR)/$(BIN) python3 -m pytest -q -rs tests/

# Parsers under libFuzzer (cargo-fuzz on stable through RUSTC_BOOTSTRAP), FUZZ_SECS per target.
FUZZ_SECS ?= 15
fuzz: deps
	@command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz
	cd crates/http/fuzz && for t in parse_request chunked proxy_protocol parse_response forward_request forward_response; do \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$(FUZZ_SECS) -dict=dict/http.dict || exit 1; \
	done
	cd crates/h2proto/fuzz && for t in conn client; do \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$(FUZZ_SECS) || exit 1; \
	done
	cd crates/h3proto/fuzz && for t in frame qpack conn; do \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$(FUZZ_SECS) || exit 1; \
	done
	cd crates/nginxconf/fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run parse -- -max_total_time=$(FUZZ_SECS) -max_len=4096
	$(if $(PRUNE),rm -rf crates/http/fuzz/target crates/h2proto/fuzz/target crates/h3proto/fuzz/target crates/nginxconf/fuzz/target)

# Model checking of the lock-free token queue (its own target dir: --cfg loom rebuilds all).
loom: deps
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test -p ringx-tokenq --release --test loom
	$(if $(PRUNE),rm -rf target/loom)

# PRUNE=1 (.ci/run sets it): each build folder goes once the steps that need it have run
# (target/debug after lint, target/loom after loom, the fuzz targets after fuzz), so that a
# machine with little disk holds about one at a time next to target/release.
test: deps release unit lint loom fuzz integration

# Each unit test of the server's roles and zone run against a mutation of the production code
# that breaks what it guards; every test must fail (scripts/mutation_check.py, about 5 minutes
# on 2 cores; ONLY=substring runs the entries whose test name has it). Not part of `make test`.
mutants: deps
	python3 scripts/mutation_check.py $(if $(ONLY),--only $(ONLY))

# Every benchmark, one after the other; each also runs alone (bench-http, bench-steer,
# bench-proxy, bench-echo, bench-xdp, bench-lb, bench-ops, bench-preload, bench-preload-proxy, bench-tls, bench-h2, bench-grpc, bench-compress, bench-cache, bench-escalate, bench-cluster,
# bench-udp, bench-auth, bench-testssl). How long each takes: bench/README.md.
bench: bench-http bench-steer bench-proxy bench-echo bench-xdp bench-lb bench-ops bench-preload bench-preload-proxy bench-tls bench-h2 bench-h3 bench-grpc bench-compress bench-cache bench-escalate bench-udp bench-auth bench-testssl bench-cluster

# An A/B of this tree against commit REV (bench/ab.py): instructions and system calls per
# request, and with TIMED=1 the timed HTTP and proxy runs too. Not part of `make bench`.
bench-ab: release
	python3 bench/ab.py --rev $(or $(REV),$(error give REV=<commit>)) $(if $(TIMED),--timed)

bench-tls: release
	python3 bench/tls.py --rt $(BENCH_ARGS)

# HTTP/2 against nginx's http2 with h2load: h2c and TLS, 64 B and 4 KB, 10x100 and 500x1.
bench-h2: release
	python3 bench/h2.py $(BENCH_ARGS)

# HTTP/3 against Caddy and ringx's own h2 and HTTPS, with bench/h3load (quic-go) and h2load;
# then 10 x 100 again with the QUIC client's GETs in h2load's shape (bench/h3.py --batch), and
# every workload again with each side's receive work on its own CPU and the transport floors
# across the veth pair (bench/h3.py --veth: over loopback the client's CPU receives for the
# server).
bench-h3: release
	python3 bench/h3.py $(BENCH_ARGS)
	python3 bench/h3.py --batch --only 64_10x100 $(BENCH_ARGS)
	python3 bench/h3.py --veth $(BENCH_ARGS)

# gRPC unary through ringx (grpc://) against nginx grpc_pass, CPU per call (bench/grpc_proxy.py).
bench-grpc: release
	python3 bench/grpc_proxy.py $(BENCH_ARGS)

# gzip of a 100 KB page against nginx at levels 1, 5, 6, and the cost of every level (bench/compress.py).
bench-compress: release
	python3 bench/compress.py $(BENCH_ARGS)

# UDP stream proxying in datagrams per CPU-second against nginx's stream UDP proxy (bench/udp.py),
# then new sessions: per CPU-second, the sustained rate, burst drops (bench/udp_sessions.py).
bench-udp: release
	python3 bench/udp.py $(BENCH_ARGS)
	python3 bench/udp_sessions.py $(BENCH_ARGS)

# testssl.sh's scan of ringx against nginx's on the same certificates; exits 1 if a ringx
# finding is rated worse than nginx's (bench/testssl.py).
bench-testssl: release
	python3 bench/testssl.py $(filter --quick,$(BENCH_ARGS))

bench-http: release
	python3 bench/http_bench.py $(BENCH_ARGS)

bench-steer: release
	python3 bench/steer.py $(filter --quick,$(BENCH_ARGS))

bench-ops: release
	python3 bench/ops.py $(filter --quick,$(BENCH_ARGS))

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean

bench-echo: release
	python3 bench/echo.py $(BENCH_ARGS)

bench-proxy: release
	python3 bench/proxy.py $(BENCH_ARGS)

bench-xdp: release
	python3 bench/xdp.py $(BENCH_ARGS)

# A cache hit of a 4 KB proxied object against nginx's proxy_cache (bench/cache.py).
bench-cache: release
	python3 bench/cache.py $(BENCH_ARGS)

# A neighbour's p99 on the same zone during a wrong-password (bcrypt) flood, against nginx
# (bench/auth_flood.py); BASE_BIN=<ringx of the commit before the auth pool> adds it.
bench-auth: release
	python3 bench/auth_flood.py $(if $(BASE_BIN),--base $(BASE_BIN)) $(BENCH_ARGS)

# CPU per abusive request before and after escalation to the XDP block list (bench/escalate.py).
bench-escalate: release
	python3 bench/escalate.py $(BENCH_ARGS)

# Cluster-wide limit_req against a local one, alternated; Redis commands per request (bench/cluster.py).
bench-cluster: release
	python3 bench/cluster.py $(BENCH_ARGS)

# libringx_preload.so: ns per connect and accept against the plain calls (bench/preload.py).
bench-preload: release
	python3 bench/preload.py $(filter --quick,$(BENCH_ARGS))

# An unmodified nginx reverse proxy, short connections, with and without the library
# (bench/preload_proxy.py; root: namespaces, veth, XDP).
bench-preload-proxy: release
	python3 bench/preload_proxy.py $(BENCH_ARGS)

bench-lb: release
	$(CARGO) build --release -p ringx-lb --example lb_bench
	python3 bench/lb.py $(BENCH_ARGS)
