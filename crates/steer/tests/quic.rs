//! QUIC steering by connection ID, end to end over loopback: three UDP sockets on one port
//! (three "zones"), datagrams from many source ports, and the socket each one reached. A
//! packet whose connection ID names a zone must reach that zone's socket whatever port it
//! comes from (a migrated client); one with an ID of another layout goes to some zone by the
//! hash; once a zone's socket closes, its packets still arrive (at another). Then a binary
//! upgrade: three more sockets of a "new process" take the steering over; the old IDs still
//! reach the old sockets, the new generation's and new clients reach the new ones.
//!
//! With the zones' CPUs given, a new client's packets (an ID the client made up) reach the
//! zone on the CPU that received them: over loopback, the sender's.
//!
//! Needs root (or CAP_BPF + CAP_NET_ADMIN); without it the tests skip
//! (`ringx_kerneltest`: said, and a failure under CI).

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use ringx_engine::{bind_udp_reuseport, ListenOptions};
use ringx_steer::quic::{CidLayout, QuicSteering};

const LAYOUT: CidLayout = CidLayout {
    len: 12,
    rotation: 0,
    zone_byte: 2,
    epoch_bit: 0x10,
};
/// Source ports per zone and case: enough that the kernel's hash would put some elsewhere
/// with probability 1 - (2/3)^N.
const N: usize = 24;

/// A connection ID of the layout naming `zone` of generation 0 (then a nonce).
fn cid(zone: u8, nonce: u8) -> Vec<u8> {
    cid_of(0, zone, nonce)
}

fn cid_of(epoch: u8, zone: u8, nonce: u8) -> Vec<u8> {
    let mut c = vec![0x0f | epoch << 4, 0, zone];
    c.extend((0..9).map(|i| nonce.wrapping_add(i)));
    c
}

fn short_header(dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![0x40];
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[0xaa; 30]);
    p
}

fn long_header(dcid: &[u8]) -> Vec<u8> {
    let mut p = vec![0xc0, 0, 0, 0, 1, dcid.len() as u8];
    p.extend_from_slice(dcid);
    p.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8]);
    p.extend_from_slice(&[0xbb; 30]);
    p
}

/// Three nonblocking UDP sockets on one loopback port (one per "zone"), and the address.
fn three_zones(opts: &ListenOptions) -> (SocketAddr, Vec<UdpSocket>) {
    let first = bind_udp_reuseport("127.0.0.1:0".parse().unwrap(), opts).unwrap();
    let addr = first.local_addr().unwrap();
    let socks: Vec<UdpSocket> = std::iter::once(first)
        .chain((1..3).map(|_| bind_udp_reuseport(addr, opts).unwrap()))
        .collect();
    for s in &socks {
        s.set_nonblocking(true).unwrap();
    }
    (addr, socks)
}

/// Sends `p` from a new port and returns the index of the socket that got it.
fn reached(socks: &[Option<&UdpSocket>], to: SocketAddr, p: &[u8]) -> usize {
    let from = UdpSocket::bind("127.0.0.1:0").unwrap();
    from.send_to(p, to).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 256];
    loop {
        for (i, s) in socks.iter().enumerate() {
            let Some(s) = s else { continue };
            if let Ok((n, src)) = s.recv_from(&mut buf) {
                assert_eq!((&buf[..n], src), (p, from.local_addr().unwrap()));
                return i;
            }
        }
        assert!(Instant::now() < deadline, "the datagram reached no socket");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn packets_reach_the_zone_their_connection_id_names() {
    let opts = ListenOptions::default();
    let (addr, socks) = three_zones(&opts);
    let refs: Vec<&UdpSocket> = socks.iter().collect();
    let steering = match QuicSteering::attach(&refs, &[], LAYOUT, 0) {
        Ok(s) => s,
        Err(e) => {
            ringx_kerneltest::skip(format!("no QUIC steering: {e}"));
            return;
        }
    };
    let all: Vec<Option<&UdpSocket>> = socks.iter().map(Some).collect();
    for zone in 0..3u8 {
        for i in 0..N as u8 {
            let c = cid(zone, i);
            assert_eq!(
                reached(&all, addr, &short_header(&c)),
                zone as usize,
                "short {i}"
            );
            assert_eq!(
                reached(&all, addr, &long_header(&c)),
                zone as usize,
                "long {i}"
            );
        }
    }
    // IDs ringx did not issue: a client's own (8 bytes), another rotation, a zone with no
    // socket. Each reaches some socket by the kernel's hash; over many ports, more than one.
    let mut by_hash = [0usize; 3];
    for i in 0..N as u8 {
        let mut other_rotation = cid(1, i);
        other_rotation[0] = 0xe0;
        for p in [
            long_header(&[i; 8]),
            short_header(&other_rotation),
            short_header(&cid(200, i)),
            vec![0x40, 0],
        ] {
            by_hash[reached(&all, addr, &p)] += 1;
        }
    }
    assert!(
        by_hash.iter().filter(|&&n| n > 0).count() > 1,
        "{by_hash:?}"
    );
    // Zone 1's socket closes: its packets take the hash, to the two that remain.
    let mut socks = socks;
    drop(socks.remove(1));
    let left: Vec<Option<&UdpSocket>> = vec![Some(&socks[0]), None, Some(&socks[1])];
    for i in 0..N as u8 {
        let at = reached(&left, addr, &short_header(&cid(1, i)));
        assert!(at == 0 || at == 2, "{at}");
        assert_eq!(reached(&left, addr, &short_header(&cid(2, i))), 2);
    }

    // The upgrade: a new process's three sockets join the group and take the steering over.
    let ids = steering.ids();
    drop(steering);
    let new: Vec<UdpSocket> = (0..3)
        .map(|_| bind_udp_reuseport(addr, &opts).unwrap())
        .collect();
    for s in &new {
        s.set_nonblocking(true).unwrap();
    }
    let next = QuicSteering::take_over(ids, &new.iter().collect::<Vec<_>>(), &[]).unwrap();
    assert_eq!(next.epoch(), 1);
    let both: Vec<Option<&UdpSocket>> = vec![
        Some(&socks[0]),
        None,
        Some(&socks[1]),
        Some(&new[0]),
        Some(&new[1]),
        Some(&new[2]),
    ];
    for i in 0..N as u8 {
        assert_eq!(
            reached(&both, addr, &short_header(&cid(0, i))),
            0,
            "old zone 0"
        );
        assert_eq!(
            reached(&both, addr, &short_header(&cid(2, i))),
            2,
            "old zone 2"
        );
        for zone in 0..3u8 {
            let c = cid_of(1, zone, i);
            assert_eq!(reached(&both, addr, &short_header(&c)), 3 + zone as usize);
        }
        // New clients, and the old process's zone that is gone: the new process.
        assert!(reached(&both, addr, &long_header(&[i; 8])) >= 3);
        assert!(reached(&both, addr, &short_header(&cid(1, i))) >= 3);
    }
}

/// The CPUs this thread may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most the size given into the live `set`.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(r, 0, "sched_getaffinity");
    // SAFETY: CPU_ISSET reads the set, in bounds for every c below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Runs this thread on `cpus` only.
fn pin(cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET writes within the set for c < CPU_SETSIZE (the CPUs come from
        // `allowed_cpus`).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: sched_setaffinity reads the size given of the live `set`.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    assert_eq!(r, 0, "sched_setaffinity to {cpus:?}");
}

#[test]
fn a_new_clients_packets_reach_the_zone_on_their_cpu() {
    let opts = ListenOptions::default();
    let (addr, socks) = three_zones(&opts);
    let refs: Vec<&UdpSocket> = socks.iter().collect();
    // Zones 0 and 1 on two of the CPUs this test may use (one, on a machine of one); zone 2
    // on none.
    let allowed = allowed_cpus();
    let cpus: Vec<usize> = allowed.iter().copied().take(2).collect();
    let _steering = match QuicSteering::attach(&refs, &cpus, LAYOUT, 0) {
        Ok(s) => s,
        Err(e) => {
            ringx_kerneltest::skip(format!("no QUIC steering: {e}"));
            return;
        }
    };
    let all: Vec<Option<&UdpSocket>> = socks.iter().map(Some).collect();
    for (zone, &cpu) in cpus.iter().enumerate() {
        pin(&[cpu]);
        for i in 0..N as u8 {
            // A first Initial (an ID the client made up), and an ID of another layout.
            let mut other_rotation = cid(2, i);
            other_rotation[0] = 0xe0;
            for p in [long_header(&[i; 8]), short_header(&other_rotation)] {
                assert_eq!(reached(&all, addr, &p), zone, "from CPU {cpu}, packet {i}");
            }
            // An ID of ours still names its zone, whichever CPU received it.
            assert_eq!(reached(&all, addr, &short_header(&cid(2, i))), 2);
        }
    }
    pin(&allowed);
}
