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
    if common::skip() {
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
