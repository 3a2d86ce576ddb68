//! Several XDP programs on one device: the filter (crate ringx-xdp) in front, the balancer
//! behind it in the filter's chain slot (a tail call), each replaceable on its own. Through
//! BPF_PROG_TEST_RUN on the filter, the head of the chain. Needs root.

mod common;

use common::{ipa, resolve, sa};
use ringx_lb::{control, BackendSpec, Balancer, Encap, Proto, Reason, Service};
use ringx_xdp::packet::PacketBuilder;
use ringx_xdp::{Filter, List, Origin, Reason as FReason, Settings};

fn deltas<R: Copy + PartialEq + std::fmt::Debug>(a: &[(R, u64)], b: &[(R, u64)]) -> Vec<(R, u64)> {
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.1 != y.1)
        .map(|(x, y)| (x.0, x.1 - y.1))
        .collect()
}

fn lb_counts(lb: &Balancer) -> Vec<(Reason, u64)> {
    lb.maps()
        .reasons()
        .unwrap()
        .into_iter()
        .map(|(r, c)| (r, c.packets))
        .collect()
}

fn filter_counts(f: &Filter) -> Vec<(FReason, u64)> {
    let s = f.maps().stats().unwrap();
    FReason::ALL
        .iter()
        .map(|r| (*r, s.get(*r).packets))
        .collect()
}

#[test]
fn filter_then_balancer_each_replaceable() {
    if !common::bpf() {
        return;
    }
    let fdir = common::PinDir::new("chainf");
    let ldir = common::PinDir::new("chainl");
    let chained = Settings {
        chain: true,
        ..Settings::default()
    };
    let filter = Filter::load(&chained, fdir.path()).unwrap();
    filter
        .maps()
        .add(List::Block, "192.0.2.66/32".parse().unwrap(), Origin::Cli)
        .unwrap();
    let lb = Balancer::load(&common::settings(Encap::Gue { port: 6080 }), ldir.path()).unwrap();
    let svc = Service {
        addr: sa("198.51.100.1:80"),
        proto: Proto::Tcp,
        backends: vec![BackendSpec {
            addr: ipa("10.0.0.11"),
            weight: 1,
            quic_host: None,
        }],
    };
    control::apply(lb.maps(), &[svc], &resolve).unwrap();

    let ok = PacketBuilder::tcp(sa("192.0.2.7:1000"), sa("198.51.100.1:80"))
        .syn()
        .build();
    let blocked = PacketBuilder::tcp(sa("192.0.2.66:1000"), sa("198.51.100.1:80"))
        .syn()
        .build();
    let other = PacketBuilder::tcp(sa("192.0.2.7:1000"), sa("198.51.100.9:80"))
        .syn()
        .build();
    // One frame through the chain: (action, outer protocol if forwarded, filter's reasons,
    // balancer's reasons).
    let run = |lb: &Balancer, pkt: &[u8]| {
        let (f0, l0) = (filter_counts(&filter), lb_counts(lb));
        let r = filter.test_run(pkt, 1).unwrap();
        let proto = (r.retval == 3).then(|| r.data_out[14 + 9]);
        (
            r.retval,
            proto,
            deltas(&filter_counts(&filter), &f0),
            deltas(&lb_counts(lb), &l0),
        )
    };

    // An empty slot: the filter's verdicts alone.
    assert!(ringx_xdp::chain_prog_id(fdir.path()).unwrap().is_none());
    assert_eq!(run(&lb, &ok), (2, None, vec![(FReason::Pass, 1)], vec![]));

    // The balancer behind the filter.
    ringx_xdp::chain_next(fdir.path(), lb.prog_fd().unwrap()).unwrap();
    assert!(ringx_xdp::chain_prog_id(fdir.path()).unwrap().is_some());
    assert_eq!(
        run(&lb, &ok),
        (
            3,
            Some(17),
            vec![(FReason::Pass, 1)],
            vec![(Reason::Fwd, 1)]
        ),
        "passed by the filter, balanced (GUE)"
    );
    assert_eq!(
        run(&lb, &blocked),
        (1, None, vec![(FReason::DropBlock, 1)], vec![]),
        "blocked: the balancer never sees it"
    );
    assert_eq!(
        run(&lb, &other),
        (
            2,
            None,
            vec![(FReason::Pass, 1)],
            vec![(Reason::PassNotVip, 1)]
        ),
        "not a service: passed by both"
    );

    // Replace the balancer stage (IP-in-IP now) in the slot: the next packet meets it.
    let lb2 = Balancer::load(&common::settings(Encap::Ipip), ldir.path()).unwrap();
    let id1 = ringx_xdp::chain_prog_id(fdir.path()).unwrap();
    ringx_xdp::chain_next(fdir.path(), lb2.prog_fd().unwrap()).unwrap();
    assert_ne!(ringx_xdp::chain_prog_id(fdir.path()).unwrap(), id1);
    drop(lb);
    let fresh = PacketBuilder::tcp(sa("192.0.2.8:1000"), sa("198.51.100.1:80"))
        .syn()
        .build();
    assert_eq!(
        run(&lb2, &fresh),
        (3, Some(4), vec![(FReason::Pass, 1)], vec![(Reason::Fwd, 1)])
    );

    // Replace the filter (its link would be updated the same way): the new program finds
    // the same pinned slot, so the balancer stays behind it.
    let filter2 = Filter::load(&chained, fdir.path()).unwrap();
    let r = filter2.test_run(&fresh, 1).unwrap();
    assert_eq!(r.retval, 3);
    // A filter loaded without chaining ignores the slot.
    let plain = Filter::load(&Settings::default(), fdir.path()).unwrap();
    assert_eq!(plain.test_run(&fresh, 1).unwrap().retval, 2);

    // Emptied: passed packets pass.
    assert!(ringx_xdp::chain_clear(fdir.path()).unwrap());
    assert_eq!(run(&lb2, &ok), (2, None, vec![(FReason::Pass, 1)], vec![]));
}

/// Pins the calling thread to the CPU it runs on (a test run executes on the calling CPU,
/// which decides whether steering passes a packet locally or redirects it); returns it.
fn stay_here() -> u32 {
    // SAFETY: sched_getcpu has no preconditions.
    let here = unsafe { libc::sched_getcpu() };
    // SAFETY: sched_setaffinity reads a live cpu_set_t; it affects the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(here as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
    here as u32
}

/// Software steering with two zones, zone 1 on another CPU than this one.
fn steering(here: u32, ncpu: u32) -> ringx_steer::xdp::Steer {
    ringx_steer::xdp::Steer::load(&ringx_steer::xdp::SteerSettings {
        zone_cpus: vec![here, (here + 1) % ncpu],
        mask: 1,
        port_range: (32768, 60999),
        listen_ports: vec![8080],
        qsize: 256,
    })
    .unwrap()
}

/// Three stages on one device: filter -> balancer -> software steering -> the stack. Blocked
/// sources stop at the filter, service traffic is balanced, everything else the balancer
/// passes is steered; each stage is replaced on its own (the filter through its link's
/// program, here a reload that finds the pinned slot; the balancer and steering by one map
/// update of the slot in front of them), and the packet after a replacement meets the new
/// stage.
#[test]
fn filter_balancer_steering_each_replaceable() {
    if !common::bpf() {
        return;
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    if ncpu < 2 {
        ringx_kerneltest::skip("needs 2 CPUs (steering redirects to the other one)");
        return;
    }
    let here = stay_here();
    let fdir = common::PinDir::new("chain3f");
    let ldir = common::PinDir::new("chain3l");
    let chained = Settings {
        chain: true,
        ..Settings::default()
    };
    let filter = Filter::load(&chained, fdir.path()).unwrap();
    filter
        .maps()
        .add(List::Block, "192.0.2.66/32".parse().unwrap(), Origin::Cli)
        .unwrap();
    let lb_settings = |encap| ringx_lb::LbSettings {
        chain: true,
        ..common::settings(encap)
    };
    let lb = Balancer::load(&lb_settings(Encap::Gue { port: 6080 }), ldir.path()).unwrap();
    let svc = Service {
        addr: sa("198.51.100.1:80"),
        proto: Proto::Tcp,
        backends: vec![BackendSpec {
            addr: ipa("10.0.0.11"),
            weight: 1,
            quic_host: None,
        }],
    };
    control::apply(lb.maps(), &[svc], &resolve).unwrap();
    ringx_xdp::chain_next(fdir.path(), lb.prog_fd().unwrap()).unwrap();
    let mut steer = steering(here, ncpu);
    let slot = lb.chain_slot();
    assert_eq!(slot.path(), ldir.path().join("lb_chain"));
    assert_eq!(slot.prog_id().unwrap(), None);
    steer.chain_behind(&slot).unwrap();
    assert!(slot.prog_id().unwrap().is_some());

    let vip = PacketBuilder::tcp(sa("192.0.2.7:1000"), sa("198.51.100.1:80"))
        .syn()
        .build();
    let blocked = PacketBuilder::tcp(sa("192.0.2.66:1000"), sa("198.51.100.1:80"))
        .syn()
        .build();
    // An upstream's answer to ringx's port 32769: zone 1, the other CPU.
    let reply = PacketBuilder::tcp(sa("198.51.100.5:80"), sa("192.0.2.1:32769")).build();
    // An answer to port 32768: zone 0, this CPU: steering passes it here.
    let local = PacketBuilder::tcp(sa("198.51.100.5:80"), sa("192.0.2.1:32768")).build();
    let steered = |s: &ringx_steer::xdp::Steer| {
        let st = s.stats().unwrap();
        (st.active, st.redirected)
    };
    // One frame through the chain: (action, filter's reasons, balancer's reasons, steering's
    // (active, redirected) delta).
    let run = |lb: &Balancer, s: &ringx_steer::xdp::Steer, pkt: &[u8]| {
        let (f0, l0, s0) = (filter_counts(&filter), lb_counts(lb), steered(s));
        let r = filter.test_run(pkt, 1).unwrap().retval;
        let s1 = steered(s);
        (
            r,
            deltas(&filter_counts(&filter), &f0),
            deltas(&lb_counts(lb), &l0),
            (s1.0 - s0.0, s1.1 - s0.1),
        )
    };
    let passed = vec![(FReason::Pass, 1)];
    assert_eq!(
        run(&lb, &steer, &vip),
        (3, passed.clone(), vec![(Reason::Fwd, 1)], (0, 0)),
        "a service's packet: balanced, steering never sees it"
    );
    assert_eq!(
        run(&lb, &steer, &blocked),
        (1, vec![(FReason::DropBlock, 1)], vec![], (0, 0)),
        "blocked at the filter"
    );
    assert_eq!(
        run(&lb, &steer, &reply),
        (4, passed.clone(), vec![(Reason::PassNotVip, 1)], (1, 1)),
        "not a service: passed by the balancer, steered to the other CPU"
    );
    assert_eq!(
        run(&lb, &steer, &local),
        (2, passed.clone(), vec![(Reason::PassNotVip, 1)], (1, 0)),
        "steered to this CPU: passed to the stack"
    );

    // Replace steering: one update of the balancer's slot; the next packet meets the new one.
    let mut steer2 = steering(here, ncpu);
    let id1 = slot.prog_id().unwrap();
    steer2.chain_behind(&slot).unwrap();
    assert_ne!(slot.prog_id().unwrap(), id1);
    assert_eq!(run(&lb, &steer2, &reply).3, (1, 1), "the new steering");
    assert_eq!(run(&lb, &steer, &reply).3, (0, 0), "not the old one");
    // Dropping the old one leaves the slot alone: it holds another program now.
    drop(steer);
    assert_eq!(run(&lb, &steer2, &reply).3, (1, 1));

    // Replace the balancer (IP-in-IP now, the same maps): one update of the filter's slot.
    // The new balancer finds the pinned lb_chain, so steering stays behind it.
    let lb2 = Balancer::load(&lb_settings(Encap::Ipip), ldir.path()).unwrap();
    ringx_xdp::chain_next(fdir.path(), lb2.prog_fd().unwrap()).unwrap();
    drop(lb);
    let fresh = PacketBuilder::tcp(sa("192.0.2.8:1000"), sa("198.51.100.1:80"))
        .syn()
        .build();
    let r = filter.test_run(&fresh, 1).unwrap();
    assert_eq!(
        (r.retval, r.data_out[14 + 9]),
        (3, 4),
        "balanced by the new one"
    );
    assert_eq!(
        run(&lb2, &steer2, &reply),
        (4, passed.clone(), vec![(Reason::PassNotVip, 1)], (1, 1)),
        "steering is still behind the balancer"
    );

    // Replace the filter: a reload finds the same pinned slot (its link would swap the
    // program in place); the chain behind it stays.
    let filter2 = Filter::load(&chained, fdir.path()).unwrap();
    let (s0, r) = (
        steered(&steer2),
        filter2.test_run(&reply, 1).unwrap().retval,
    );
    assert_eq!((r, steered(&steer2).0 - s0.0), (4, 1));
    assert_eq!(filter2.test_run(&blocked, 1).unwrap().retval, 1);

    // A balancer loaded without `chain` ends the chain: what it passes, passes.
    let lb3 = Balancer::load(&common::settings(Encap::Ipip), ldir.path()).unwrap();
    ringx_xdp::chain_next(fdir.path(), lb3.prog_fd().unwrap()).unwrap();
    assert_eq!(
        run(&lb3, &steer2, &reply),
        (2, passed.clone(), vec![(Reason::PassNotVip, 1)], (0, 0)),
        "not steered"
    );
    // Steering dropped: the balancer's slot is empty again; with `chain`, passed packets
    // pass.
    ringx_xdp::chain_next(fdir.path(), lb2.prog_fd().unwrap()).unwrap();
    drop(steer2);
    assert_eq!(slot.prog_id().unwrap(), None);
    let r = filter.test_run(&reply, 1).unwrap().retval;
    assert_eq!(r, 2, "an empty slot: passed");
}
