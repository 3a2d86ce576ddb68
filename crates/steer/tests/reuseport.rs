//! Reuseport steering by CPU, end to end over loopback: two listeners on one port (two
//! "zones"), connections from threads pinned to each CPU, and the listener that accepted each
//! one. On loopback the SYN is processed on the connecting thread's CPU, so with steering every
//! connection must come out of that CPU's listener; after a listener closes its CPU's
//! connections must still be accepted (by the other), none refused.
//!
//! The eBPF case needs root (or CAP_BPF + CAP_NET_ADMIN), the SO_INCOMING_CPU case Linux
//! 6.2+, every case two CPUs; without them a test skips (`ringx_kerneltest`: said, and a
//! failure under CI).

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ringx_engine::locality::incoming_cpu;
use ringx_engine::{bind_reuseport, ListenOptions};
use ringx_steer::reuseport::{self, CpuSteering, Method};

/// Connections per CPU and case: enough that hash selection would put some on the other
/// listener with probability 1 - 2^-N.
const N: usize = 24;

fn two_cpus() -> Option<[usize; 2]> {
    let cpus = ringx_engine::sys::allowed_cpus();
    if cpus.len() < 2 {
        ringx_kerneltest::skip(format!("needs 2 CPUs, this process may use {cpus:?}"));
        return None;
    }
    Some([cpus[0], cpus[1]])
}

/// Connects from a thread pinned to `cpu`; returns the client socket (kept open) and its
/// local address.
fn connect_from(cpu: usize, addr: SocketAddr) -> (TcpStream, SocketAddr) {
    std::thread::spawn(move || {
        ringx_engine::sys::pin_to_cpu(cpu).unwrap();
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect from CPU {cpu} refused or failed: {e}"));
        let local = s.local_addr().unwrap();
        (s, local)
    })
    .join()
    .unwrap()
}

/// Which of `listeners` holds the connection from `peer`, and the accepted socket's
/// SO_INCOMING_CPU.
fn accepted_by(listeners: &[Option<&TcpListener>], peer: SocketAddr) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for (i, l) in listeners.iter().enumerate() {
            let Some(l) = l else { continue };
            match l.accept() {
                Ok((s, from)) => {
                    assert_eq!(from, peer, "listener {i} accepted an unexpected connection");
                    let cpu = incoming_cpu(s.as_raw_fd()).unwrap();
                    return (i, cpu);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("accept on listener {i}: {e}"),
            }
        }
        assert!(Instant::now() < deadline, "no listener accepted {peer}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Two listeners on one port, for CPUs `cpus`.
fn group() -> (TcpListener, TcpListener, SocketAddr) {
    let opts = ListenOptions::default();
    let l0 = bind_reuseport("127.0.0.1:0".parse().unwrap(), &opts).unwrap();
    let addr = l0.local_addr().unwrap();
    let l1 = bind_reuseport(addr, &opts).unwrap();
    (l0, l1, addr)
}

/// Connections from each CPU land on that CPU's listener; then listener 1 closes and CPU 1's
/// connections go to listener 0.
fn steering_case(method: Method) {
    let Some(cpus) = two_cpus() else { return };
    let (l0, l1, addr) = group();
    let pairs = [(cpus[0], &l0), (cpus[1], &l1)];
    let steering = match method {
        Method::Ebpf => CpuSteering::attach_ebpf(&pairs),
        Method::IncomingCpu => CpuSteering::attach_incoming_cpu(&pairs),
    };
    let steering = match steering {
        Ok(s) => s,
        Err(e) => {
            ringx_kerneltest::skip(format!("no reuseport steering by {method:?}: {e}"));
            return;
        }
    };
    assert_eq!(steering.method(), method);

    for (zone, &cpu) in cpus.iter().enumerate() {
        for _ in 0..N {
            let (_c, local) = connect_from(cpu, addr);
            let (by, incoming) = accepted_by(&[Some(&l0), Some(&l1)], local);
            assert_eq!(
                by, zone,
                "{method:?}: a connection from CPU {cpu} was accepted by listener {by}"
            );
            assert_eq!(
                incoming, cpu,
                "the handshake was processed on CPU {incoming}"
            );
        }
    }

    // Zone 1's listener goes away: its CPU's connections take the kernel's selection.
    drop(l1);
    for _ in 0..N {
        let (_c, local) = connect_from(cpus[1], addr);
        let (by, _) = accepted_by(&[Some(&l0), None], local);
        assert_eq!(by, 0);
    }
    // Zone 0 is unaffected.
    for _ in 0..4 {
        let (_c, local) = connect_from(cpus[0], addr);
        assert_eq!(accepted_by(&[Some(&l0), None], local).0, 0);
    }
    eprintln!(
        "{method:?}: {N} connections per CPU on their CPU's listener; after closing listener 1, \
         {N} of CPU {}'s accepted by listener 0",
        cpus[1]
    );
}

#[test]
fn ebpf_steers_by_cpu_and_falls_back_when_a_listener_closes() {
    steering_case(Method::Ebpf);
}

#[test]
fn incoming_cpu_steers_by_cpu_and_falls_back_when_a_listener_closes() {
    steering_case(Method::IncomingCpu);
}

/// Without steering the kernel's hash spreads one CPU's connections over both listeners;
/// with eBPF steering, `clear` and `set` take a CPU off and back onto its listener, and
/// `detach` restores the hash.
#[test]
fn hash_baseline_and_map_updates() {
    let Some(cpus) = two_cpus() else { return };
    let (l0, l1, addr) = group();
    let ls = [Some(&l0), Some(&l1)];
    let spread = |what: &str| {
        let mut by = [0usize; 2];
        for _ in 0..N {
            let (_c, local) = connect_from(cpus[1], addr);
            by[accepted_by(&ls, local).0] += 1;
        }
        eprintln!("{what}: CPU {}'s connections per listener: {by:?}", cpus[1]);
        by
    };
    let by = spread("no steering");
    assert!(
        by[0] > 0 && by[1] > 0,
        "the kernel's hash used one listener only: {by:?}"
    );

    let steering = match CpuSteering::attach_ebpf(&[(cpus[0], &l0), (cpus[1], &l1)]) {
        Ok(s) => s,
        Err(e) => {
            ringx_kerneltest::skip(format!("no eBPF reuseport steering: {e}"));
            return;
        }
    };
    assert_eq!(spread("eBPF"), [0, N]);
    steering.clear(cpus[1]).unwrap();
    let by = spread("eBPF, CPU cleared");
    assert!(by[0] > 0 && by[1] > 0, "cleared CPU not hashed: {by:?}");
    // A listener sits in one CPU's slot at most.
    let busy = steering.set(cpus[1], &l0).unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::ResourceBusy, "{busy}");
    steering.set(cpus[1], &l1).unwrap();
    assert_eq!(spread("eBPF, CPU set again"), [0, N]);
    reuseport::detach(&l0).unwrap();
    let by = spread("detached");
    assert!(by[0] > 0 && by[1] > 0, "detached group not hashed: {by:?}");
}

/// `attach` picks eBPF when it can and says why not otherwise.
#[test]
fn attach_picks_a_method() {
    let Some(cpus) = two_cpus() else { return };
    let (l0, l1, _) = group();
    match CpuSteering::attach(&[(cpus[0], &l0), (cpus[1], &l1)]) {
        Ok(s) => {
            eprintln!(
                "attach: {:?} (fallback reason: {:?})",
                s.method(),
                s.fallback_reason()
            );
            assert_eq!(s.method() == Method::Ebpf, s.fallback_reason().is_none());
        }
        Err(e) => ringx_kerneltest::skip(format!("no reuseport steering here: {e}")),
    }
}

/// The API of programs ringx does not own (`libringx_preload.so`): a detached program and
/// empty map, attached to a group after the fact, opened again by id (as another process
/// would), slots filled only when empty, and listeners known by their socket cookies.
#[test]
fn detached_steering_is_shared_by_id() {
    let Some(cpus) = two_cpus() else { return };
    let (l0, l1, addr) = group();
    let a = match CpuSteering::ebpf_detached() {
        Ok(s) => s,
        Err(e) => {
            ringx_kerneltest::skip(format!("no detached eBPF steering: {e}"));
            return;
        }
    };
    assert_eq!(a.method(), Method::Ebpf);
    assert!(a.cpus() > cpus[1]);
    let (prog, map) = a.ids().expect("eBPF steering has ids");
    let b = CpuSteering::ebpf_by_ids(prog, map).expect("open by id (root)");
    assert_eq!(b.ids(), Some((prog, map)));
    use std::os::fd::AsFd;
    b.attach_group(l1.as_fd()).unwrap();
    // Nothing claimed yet: the kernel's hash, nothing refused.
    let (_c, local) = connect_from(cpus[0], addr);
    accepted_by(&[Some(&l0), Some(&l1)], local);
    // Filled through one handle, seen through the other.
    assert!(a.set_fd_if_empty(cpus[0], l0.as_fd()).unwrap());
    assert!(!b.set_fd_if_empty(cpus[0], l1.as_fd()).unwrap());
    assert!(b.set_fd_if_empty(cpus[1], l1.as_fd()).unwrap());
    let cookie = |l: &TcpListener| {
        let mut v = 0u64;
        let mut len = 8 as libc::socklen_t;
        // SAFETY: getsockopt writes at most 8 bytes into the live local.
        let r = unsafe {
            libc::getsockopt(
                l.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_COOKIE,
                (&mut v as *mut u64).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    };
    assert_eq!(b.cookie_at(cpus[0]).unwrap(), Some(cookie(&l0)));
    assert_eq!(a.cookie_at(cpus[1]).unwrap(), Some(cookie(&l1)));
    for (zone, &cpu) in cpus.iter().enumerate() {
        for _ in 0..N {
            let (_c, local) = connect_from(cpu, addr);
            assert_eq!(accepted_by(&[Some(&l0), Some(&l1)], local).0, zone);
        }
    }
    a.clear(cpus[1]).unwrap();
    assert_eq!(b.cookie_at(cpus[1]).unwrap(), None);
}
