//! Cost of choosing a source port per connect: the precomputed table, the dynamic search
//! (`ff_rss_check`), and the kernel's own choice (bind to port 0 + getsockname), then whole
//! loopback connects with the kernel's port against connects bound to the table's port.
//!
//! `cargo bench -p ringx-steer -- --warm-up-time 1 --measurement-time 3`
//! (`python3 bench/steer.py` runs it and writes `bench/results/steer-<date>.json`.)
//! Hash evaluations per connect are printed from the table's counters after each run, one
//! `counters {json}` line per benchmark.

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ringx_steer::ports::{Dest, PortTable, PortTableBuilder, PortTableConfig};
use ringx_steer::steering::{FlowSteering, Reta, ZoneMap};
use ringx_steer::toeplitz::DEFAULT_KEY;
use socket2::{Domain, Socket, Type};

fn steering(queues: u16) -> Arc<FlowSteering> {
    Arc::new(FlowSteering::rss(
        &DEFAULT_KEY,
        Reta::round_robin(128, queues).expect("power-of-two table"),
        ZoneMap::identity(queues),
        true,
    ))
}

fn config() -> PortTableConfig {
    PortTableConfig {
        // Released ports are ready again at once, so the loop never runs dry.
        time_wait: Duration::ZERO,
        ..PortTableConfig::default()
    }
}

/// Prints the table's counters as one `counters {json}` line for `bench/steer.py`.
fn report(name: &str, t: &PortTable) {
    let c = t.counters;
    let connects = c.table_hits + c.dynamic_hits;
    if connects == 0 {
        return; // filtered out
    }
    println!(
        "counters {{\"bench\": \"{name}\", \"connects\": {connects}, \
         \"hash_evals_per_connect\": {:.4}, \"table_hits\": {}, \"dynamic_searches\": {}, \
         \"kernel_fallbacks\": {}}}",
        c.hash_evals as f64 / connects.max(1) as f64,
        c.table_hits,
        c.dynamic_searches,
        c.kernel_fallbacks
    );
}

/// A loopback listener whose connections a background thread accepts and drops. The long
/// accept queue keeps a late acceptor from dropping SYNs (a 1 s retransmission per overflow).
fn sink() -> SocketAddr {
    let l = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    l.bind(&SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).into())
        .expect("bind");
    l.listen(4096).expect("listen");
    let l: std::net::TcpListener = l.into();
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for c in l.incoming() {
            drop(c);
        }
    });
    addr
}

/// A client socket that resets on close (SO_LINGER 0), so no TIME_WAIT holds its port.
fn client() -> Socket {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.set_linger(Some(Duration::ZERO)).expect("SO_LINGER");
    s
}

fn ports(c: &mut Criterion) {
    let dest: Dest = "10.0.0.1 10.0.0.2 8080".parse().expect("dest");
    let now = Instant::now();

    // (a) Table: take + release by handle, and by destination (one FxHash lookup each).
    let mut table = PortTableBuilder::new(steering(4), config())
        .dest(dest)
        .build(1)
        .expect("table");
    let id = table.dest_id(&dest).expect("configured");
    c.bench_function("table take+release (DestId)", |b| {
        b.iter(|| {
            let p = table.take_id(black_box(id), now).expect("port");
            table.release_id(id, black_box(p), now).expect("release");
        })
    });
    report("table (DestId)", &table);
    let mut table = PortTableBuilder::new(steering(4), config())
        .dest(dest)
        .build(1)
        .expect("table");
    c.bench_function("table take+release (Dest lookup)", |b| {
        b.iter(|| {
            let p = table.take(black_box(&dest), now).expect("port");
            table.release(black_box(&dest), p, now).expect("release");
        })
    });
    report("table (Dest lookup)", &table);

    // (b) Dynamic search: a destination not in the table, for 2, 4 and 16 queues.
    for queues in [2u16, 4, 16] {
        let mut table = PortTableBuilder::new(steering(queues), config())
            .build(1)
            .expect("table");
        let id = table.dest_id_or_insert(&dest);
        let name = format!("dynamic search take+release ({queues} queues)");
        c.bench_function(&name, |b| {
            b.iter(|| {
                let p = table.take_id(black_box(id), now).expect("port");
                table.release_id(id, black_box(p), now).expect("release");
            })
        });
        report(&name, &table);
    }

    // (c) The kernel's choice: socket + bind(127.0.0.1:0) + getsockname + close, and the
    // socket + close part alone.
    let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    c.bench_function("kernel socket+bind(0)+getsockname+close", |b| {
        b.iter(|| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
            s.bind(&any.into()).expect("bind");
            black_box(s.local_addr().expect("getsockname"));
        })
    });
    // How often the kernel's port would bring the replies home (zone 1 of 4): outside the
    // timing, on the same kind of socket.
    let st = steering(4);
    let probe = st.probe(dest.local, dest.remote).expect("one family");
    let samples = 4000;
    let home = (0..samples)
        .filter(|_| {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
            s.bind(&any.into()).expect("bind");
            let port = s
                .local_addr()
                .expect("addr")
                .as_socket()
                .expect("inet")
                .port();
            st.zone_of_port(probe, port) == Some(1)
        })
        .count();
    println!(
        "counters {{\"bench\": \"kernel socket+bind(0)+getsockname+close\", \
         \"connects\": {samples}, \"hash_evals_per_connect\": 0, \
         \"home_fraction\": {:.4}}}",
        home as f64 / f64::from(samples)
    );
    c.bench_function("kernel socket+close (baseline)", |b| {
        b.iter(|| black_box(Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket")))
    });

    // (d) Whole connects over loopback (socket, [bind], connect, close with a reset): the
    // kernel's port (its search runs inside connect) against a port from the table (bind to
    // it, then connect). The difference is what choosing the port ourselves costs in system
    // calls; the table's own share is (a).
    let to = sink();
    let sink_dest = Dest::new(Ipv4Addr::LOCALHOST.into(), to);
    c.bench_function("connect, kernel's port", |b| {
        b.iter(|| {
            let s = client();
            s.connect(&to.into()).expect("connect");
            black_box(&s);
        })
    });
    let mut table = PortTableBuilder::new(steering(4), config())
        .dest(sink_dest)
        .build(1)
        .expect("table");
    let id = table.dest_id(&sink_dest).expect("configured");
    // A port another program holds (EADDRINUSE) goes back and the next one is tried, as the
    // table's users do; counted, not hidden.
    let mut in_use = 0u64;
    c.bench_function("connect, table's port (take+bind+connect+release)", |b| {
        b.iter(|| loop {
            let p = table.take_id(id, now).expect("port");
            let s = client();
            s.set_reuse_address(true).expect("SO_REUSEADDR");
            let from = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p));
            match s.bind(&from.into()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    in_use += 1;
                    table.release_id(id, p, now).expect("release");
                    continue;
                }
                Err(e) => panic!("bind {from}: {e}"),
            }
            s.connect(&to.into()).expect("connect");
            black_box(&s);
            drop(s);
            table.release_id(id, p, now).expect("release");
            break;
        })
    });
    report("connect, table's port (take+bind+connect+release)", &table);
    println!("bind EADDRINUSE retries (ports held by other programs): {in_use}");
}

criterion_group!(benches, ports);
criterion_main!(benches);
