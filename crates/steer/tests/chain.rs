//! Software steering behind the XDP filter on one device: the filter (crate ringx-xdp, loaded
//! with `chain`) hands what it passes to the steering program in its chain slot; a blocked
//! source never reaches steering; dropping the steering empties the slot. Through
//! BPF_PROG_TEST_RUN on the filter, the head of the chain. Needs root.

use std::path::PathBuf;

use ringx_steer::xdp::{Steer, SteerSettings};
use ringx_xdp::packet::PacketBuilder;
use ringx_xdp::{Filter, List, Origin, Reason, Settings};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;

struct PinDir(PathBuf);

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn steering_behind_the_filter() {
    if !ringx_kerneltest::require(ringx_xdp::bpf_unavailable()) {
        return;
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    if ncpu < 2 {
        ringx_kerneltest::skip(format!("needs 2 CPUs, this process may use {ncpu}"));
        return;
    }
    // SAFETY: sched_getcpu has no preconditions.
    let here = unsafe { libc::sched_getcpu() };
    // Stay there: a test run executes on the calling CPU, which decides local or redirect.
    // SAFETY: sched_setaffinity reads a live cpu_set_t; it affects the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(here as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
    let cpus: Vec<u32> = (0..2).map(|_| here as u32).collect();
    let dir = PinDir(PathBuf::from(format!(
        "/sys/fs/bpf/ringx-steer-chain-{}",
        std::process::id()
    )));
    let filter = Filter::load(
        &Settings {
            chain: true,
            ..Settings::default()
        },
        &dir.0,
    )
    .unwrap();
    filter
        .maps()
        .add(List::Block, "192.0.2.66/32".parse().unwrap(), Origin::Cli)
        .unwrap();
    // Two zones; the one whose CPU is not this one gets its packets redirected (cpumap).
    let other = (here as u32 + 1) % ncpu as u32;
    let zone_cpus = vec![cpus[0], other];
    let mut steer = Steer::load(&SteerSettings {
        zone_cpus,
        mask: 1,
        port_range: (32768, 60999),
        listen_ports: vec![8080],
        qsize: 256,
    })
    .unwrap();
    steer
        .chain_behind(&ringx_xdp::ChainSlot::filter(&dir.0))
        .unwrap();

    // An upstream's reply to port 32769 (odd: zone 1, on the other CPU): steered, redirected.
    let reply = PacketBuilder::tcp(
        "198.51.100.5:80".parse().unwrap(),
        "192.0.2.1:32769".parse().unwrap(),
    )
    .build();
    let blocked = PacketBuilder::tcp(
        "192.0.2.66:80".parse().unwrap(),
        "192.0.2.1:32769".parse().unwrap(),
    )
    .build();
    let s0 = steer.stats().unwrap();
    let f0 = filter.maps().stats().unwrap();
    let r = filter.test_run(&reply, 1).unwrap().retval;
    let s1 = steer.stats().unwrap();
    assert_eq!(r, XDP_REDIRECT, "steering: {s0:?} -> {s1:?}");
    assert_eq!(filter.test_run(&blocked, 1).unwrap().retval, XDP_DROP);
    let s1 = steer.stats().unwrap();
    let f1 = filter.maps().stats().unwrap().since(&f0);
    assert_eq!(
        s1.active - s0.active,
        1,
        "only the passed packet reached steering"
    );
    assert_eq!(f1.get(Reason::Pass).packets, 1);
    assert_eq!(f1.get(Reason::DropBlock).packets, 1);

    // Dropped: the slot is empty again, and the filter's verdict stands.
    drop(steer);
    assert_eq!(ringx_xdp::chain_prog_id(&dir.0).unwrap(), None);
    assert_eq!(filter.test_run(&reply, 1).unwrap().retval, XDP_PASS);
}
