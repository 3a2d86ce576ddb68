//! Shared set-up for the balancer's kernel tests: private pin directories (removed after),
//! skipping where BPF cannot run (`ringx_kerneltest`: said, and a failure under CI), fixed
//! next hops, packet helpers.

#![allow(dead_code)] // each test binary uses a different part

pub mod frames;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use ringx_lb::{Balancer, Decap, Encap, LbSettings, NextHop};
use ringx_xdp::Error;

/// A pin directory under /sys/fs/bpf that only this test uses; removed on drop.
pub struct PinDir(pub PathBuf);

impl PinDir {
    pub fn new(tag: &str) -> PinDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        PinDir(PathBuf::from(format!(
            "/sys/fs/bpf/ringx-lbtest-{}-{tag}-{n}",
            std::process::id()
        )))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether BPF can be used here; if not, the test skips ([`ringx_kerneltest::require`]).
/// Loading mounts a bpffs on /sys/fs/bpf where none is (`ringx_xdp::ensure_pin_dir`).
pub fn bpf() -> bool {
    ringx_kerneltest::require(ringx_xdp::bpf_unavailable())
}

pub fn settings(encap: Encap) -> LbSettings {
    LbSettings {
        encap,
        source_v4: "10.255.0.1".parse().unwrap(),
        source_v6: "fd00:ff::1".parse().unwrap(),
        conn_table_size: 65536,
        ..LbSettings::default()
    }
}

/// Loads the balancer into a fresh pin directory, or skips and returns None.
pub fn load(tag: &str, encap: Encap) -> Option<(Balancer, PinDir)> {
    load_with(tag, &settings(encap))
}

/// As [`load`], with these settings.
pub fn load_with(tag: &str, settings: &LbSettings) -> Option<(Balancer, PinDir)> {
    if !bpf() {
        return None;
    }
    let dir = PinDir::new(tag);
    match Balancer::load(settings, dir.path()) {
        Ok(b) => Some((b, dir)),
        Err(e @ Error::Permission { .. }) => {
            ringx_kerneltest::skip(e);
            None
        }
        Err(e) => panic!("loading the balancer failed: {e}"),
    }
}

pub fn load_decap(tag: &str, gue_port: u16) -> Option<(Decap, PinDir)> {
    if !bpf() {
        return None;
    }
    let dir = PinDir::new(tag);
    Some((Decap::load(gue_port, dir.path()).expect("load decap"), dir))
}

/// A backend's MAC in the fixtures: 02:be:00:00:00:<last byte of its address>.
pub fn mac_of(a: IpAddr) -> [u8; 6] {
    let last = match a {
        IpAddr::V4(v) => v.octets()[3],
        IpAddr::V6(v) => v.octets()[15],
    };
    [0x02, 0xbe, 0, 0, 0, last]
}

/// Every backend reachable out of the arriving device (XDP_TX) at `mac_of`, MTU 1500.
pub fn resolve(a: IpAddr) -> Option<NextHop> {
    Some(NextHop {
        ifindex: 0,
        mtu: 1500,
        dmac: mac_of(a),
        smac: [0; 6],
    })
}

pub fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn ipa(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// RFC 1071 checksum of `b`.
pub fn csum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in b.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
