//! The zone builder: placement, per-zone configuration, handlers built on their own threads
//! (they may be `!Send`), wake-ups, and how zones end (an exit, a panic, a timeout).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringx_engine::{
    bind_reuseport, ConnId, EngineKind, Handler, Io, ListenOptions, ListenerId, Placement,
    ZoneConfig, ZonePoolBuilder,
};

/// Echoes; on a wake, exits, panics, or ignores it. Holds an `Rc`, so it is not `Send`: the
/// pool must build it on the zone's thread.
struct Zone {
    _not_send: Rc<()>,
    on_wake: &'static str,
}

impl Handler for Zone {
    fn on_accept(&mut self, _: &mut Io, _: ConnId, _: ListenerId) {}
    fn on_data(&mut self, io: &mut Io, c: ConnId, data: &[u8]) {
        io.write(c, data);
    }
    fn on_eof(&mut self, io: &mut Io, c: ConnId) {
        io.close_after_flush(c);
    }
    fn on_closed(&mut self, _: &mut Io, _: ConnId, _: Option<std::io::Error>) {}
    fn on_timer(&mut self, _: &mut Io) -> Option<Duration> {
        None
    }
    fn on_wake(&mut self, io: &mut Io) {
        match self.on_wake {
            "exit" => io.exit(),
            "panic" => panic!("zone told to panic"),
            _ => {}
        }
    }
}

/// One listener per zone on one port.
fn listeners(zones: usize) -> (SocketAddr, Vec<Vec<TcpListener>>) {
    let first = bind_reuseport("127.0.0.1:0".parse().unwrap(), &ListenOptions::default()).unwrap();
    let addr = first.local_addr().unwrap();
    let mut all = vec![vec![first]];
    for _ in 1..zones {
        all.push(vec![
            bind_reuseport(addr, &ListenOptions::default()).unwrap()
        ]);
    }
    (addr, all)
}

fn zones_run_and_exit(engine: EngineKind) {
    let allowed = ringx_engine::sys::allowed_cpus();
    let plan = ZonePoolBuilder::new(engine)
        .placement(Placement::Zones(3))
        .config(ZoneConfig {
            max_conns: 64,
            recv_buffers: 8,
            recv_buffer_size: 4096,
            ..ZoneConfig::default()
        })
        .plan()
        .unwrap();
    let want: Vec<usize> = (0..3).map(|i| allowed[i % allowed.len()]).collect();
    assert_eq!(plan.cpus(), want);
    assert_eq!(plan.wakers().len(), 3);
    let cfg = plan.config(2);
    assert_eq!((cfg.id, cfg.cpu, cfg.max_conns), (2, Some(want[2]), 64));
    assert_eq!(cfg.engine, plan.engine());
    let (addr, ls) = listeners(3);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut prepared = Vec::new();
    let mut pool = plan
        .spawn(ls, |z| {
            assert_eq!(z.listeners.len(), 1);
            prepared.push((z.id, z.cpu));
            let seen = seen.clone();
            move || {
                let t = std::thread::current();
                let cpu = ringx_engine::sys::current_cpu();
                seen.lock()
                    .unwrap()
                    .push((t.name().unwrap().to_string(), cpu));
                Zone {
                    _not_send: Rc::new(()),
                    on_wake: "exit",
                }
            }
        })
        .unwrap();
    assert_eq!(prepared, vec![(0, want[0]), (1, want[1]), (2, want[2])]);
    for i in 0..5u8 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&[i; 100]).unwrap();
        let mut got = [0u8; 100];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, [i; 100]);
    }
    assert!(
        pool.wait_exit(Duration::ZERO).is_none(),
        "no zone ended yet"
    );
    assert_eq!(pool.running(), 3);
    pool.wake_all();
    let exits = pool.join(Some(Duration::from_secs(5)));
    assert_eq!(exits.len(), 3);
    assert!(exits.iter().all(|e| e.result.is_ok()), "{exits:?}");
    assert_eq!(pool.running(), 0);
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    for (i, (name, cpu)) in seen.iter().enumerate() {
        assert_eq!(name, &format!("ringx-zone-{i}"));
        assert_eq!(*cpu, Some(want[i]), "zone {i} pinned");
    }
}

#[test]
fn uring_zones_run_and_exit() {
    // Falls back to epoll (with a warning) where io_uring is refused: the test still holds.
    zones_run_and_exit(EngineKind::Uring);
}

#[test]
fn epoll_zones_run_and_exit() {
    zones_run_and_exit(EngineKind::Epoll);
}

#[test]
fn a_panic_and_a_timeout_are_reported() {
    let cpu = ringx_engine::sys::allowed_cpus()[0];
    let plan = ZonePoolBuilder::new(EngineKind::Epoll)
        .placement(Placement::Cpus(vec![cpu, cpu]))
        .plan()
        .unwrap();
    let (_, ls) = listeners(2);
    let mut pool = plan
        .spawn(ls, |z| {
            let on_wake = if z.id == 0 { "panic" } else { "ignore" };
            move || Zone {
                _not_send: Rc::new(()),
                on_wake,
            }
        })
        .unwrap();
    pool.wake_all();
    // The panicking zone's end is awaited generously: printing a panic's backtrace on a
    // loaded machine can take longer than the join timeout tested below.
    let first = pool
        .wait_exit(Duration::from_secs(30))
        .expect("the zone that panics ends");
    assert_eq!(first.id, 0);
    let e = first.result.as_ref().unwrap_err().to_string();
    assert!(e.contains("panicked: zone told to panic"), "{e}");
    // A join with a timeout returns without the zone that ignores its wake-up.
    let exits = pool.join(Some(Duration::from_millis(300)));
    assert!(
        exits.is_empty(),
        "the zone that ignores its wake-up still runs: {exits:?}"
    );
    assert_eq!(pool.running(), 1);
}

#[test]
fn listeners_must_match_the_zones() {
    let plan = ZonePoolBuilder::new(EngineKind::Epoll)
        .placement(Placement::Zones(2))
        .plan()
        .unwrap();
    let (_, mut ls) = listeners(2);
    ls.pop();
    let e = plan
        .spawn(ls, |_| {
            || Zone {
                _not_send: Rc::new(()),
                on_wake: "exit",
            }
        })
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("1 sets of listeners for 2 zones"),
        "{e}"
    );
}

#[test]
fn an_empty_placement_is_refused() {
    let e = ZonePoolBuilder::new(EngineKind::Epoll)
        .placement(Placement::Cpus(Vec::new()))
        .plan()
        .err()
        .unwrap();
    assert!(e.to_string().contains("no zones"), "{e}");
    assert_eq!(
        Placement::new(Some(vec![3]), Some(2)),
        Placement::Cpus(vec![3])
    );
    assert_eq!(Placement::new(None, Some(2)), Placement::Zones(2));
    assert_eq!(Placement::new(None, None), Placement::EveryCpu);
}
