//! Listening sockets: one `SO_REUSEPORT` socket per zone and address, so the kernel spreads
//! connections over the zones and no accept queue is shared between cores.

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::own_sockets::udp_held_only_by_us;

/// Options for [`bind_reuseport`].
#[derive(Clone, Debug)]
pub struct ListenOptions {
    /// Accept queue length (`listen(2)` backlog); the kernel caps it at `net.core.somaxconn`.
    pub backlog: i32,
    /// `TCP_DEFER_ACCEPT` seconds (0 = off): wake the server only when data has arrived.
    pub defer_accept_secs: u32,
    /// `TCP_NODELAY` (no Nagle delay), set on the listener and inherited by every accepted
    /// connection — which matters for io_uring, whose direct descriptors take no setsockopt.
    /// Without it a small reply sent while an earlier one is unacknowledged waits for the
    /// peer's (delayed) ACK: milliseconds of tail latency.
    pub nodelay: bool,
    /// `IP_TRANSPARENT` (`IPV6_TRANSPARENT`): accept connections (receive datagrams) for
    /// addresses that are not local, which TPROXY rules steer to this socket. Needs
    /// CAP_NET_ADMIN.
    pub transparent: bool,
    /// UDP: the receive buffer to ask for (`SO_RCVBUFFORCE`, else `SO_RCVBUF` as the kernel
    /// caps it); 0 keeps the kernel's default.
    pub rcvbuf: u32,
    /// UDP: the send buffer to ask for (`SO_SNDBUFFORCE`, else `SO_SNDBUF`), for a sender
    /// of large segmented sends (GSO: up to 64 KiB each) that must not find it full; 0
    /// keeps the kernel's default.
    pub sndbuf: u32,
    /// UDP: take datagrams of one sender coalesced (`UDP_GRO`): one receive for up to 64 of
    /// them, handed over whole with their size ([`Datagram::segment`](crate::Datagram)). The
    /// zone's datagram buffers must hold 64 KiB then, or coalesced datagrams arrive cut
    /// short. A kernel without it: logged, and datagrams come one by one.
    pub gro: bool,
    /// UDP: report each datagram's ECN bits (`IP_RECVTOS` / `IPV6_RECVTCLASS`,
    /// [`Datagram::ecn`](crate::Datagram)).
    pub ecn: bool,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            backlog: 4096,
            defer_accept_secs: 0,
            nodelay: true,
            transparent: false,
            rcvbuf: 0,
            sndbuf: 0,
            gro: false,
            ecn: false,
        }
    }
}

/// Fails with `AddrInUse` when a socket is already bound to `addr`. Listeners are bound with
/// `SO_REUSEPORT` so that the zones of one process (and the two processes of a binary
/// upgrade) share a port; without this check an unrelated second server would silently share
/// it too and take part of the connections. The probe is bound without `SO_REUSEPORT` (with
/// `SO_REUSEADDR`, so connections in TIME_WAIT do not count) and closed at once: call it
/// before binding an address this process does not hold yet.
pub fn ensure_unclaimed(addr: SocketAddr) -> io::Result<()> {
    probe_unclaimed(addr, Kind::Tcp)
}

/// Fails with `AddrInUse` when a UDP socket of another process is already bound to `addr`:
/// the same check as [`ensure_unclaimed`], for datagram listeners. Sockets of this process's
/// own do not count: a QUIC listener a reload removed stays open while its connections drain,
/// and a reload that serves the address again binds beside it (`own_sockets.rs`). Start-up
/// ([`await_unclaimed_udp`]) holds none yet, and counts every holder.
pub fn ensure_unclaimed_udp(addr: SocketAddr) -> io::Result<()> {
    match probe_unclaimed(addr, Kind::Udp) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse && udp_held_only_by_us(addr) => Ok(()),
        r => r,
    }
}

/// How long start-up waits for an address to be released ([`await_unclaimed`]).
pub const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// [`ensure_unclaimed`] for start-up: an address that is in use is probed again every few
/// milliseconds, for up to `patience`, before it is refused. A process that has just died can
/// still hold its sockets: a ringx killed (or crashed) releases the sockets its io_uring holds
/// (registered descriptors, and a listener through its pending accept) only when the kernel
/// tears the ring down, after the process is gone (4 to 13 ms after `waitpid` returned, in
/// each of 40 restarts measured here). A supervisor that restarts it at once (a shell loop,
/// a container's restart policy, `RestartSec=0`) found its own port taken. nginx retries
/// its bind the same way (five times, 500 ms apart). A warning says what is waited for.
pub fn await_unclaimed(addr: SocketAddr, patience: Duration) -> io::Result<()> {
    await_probe(addr, Kind::Tcp, patience)
}

/// [`await_unclaimed`] for a UDP address (a QUIC listener's).
pub fn await_unclaimed_udp(addr: SocketAddr, patience: Duration) -> io::Result<()> {
    await_probe(addr, Kind::Udp, patience)
}

fn await_probe(addr: SocketAddr, kind: Kind, patience: Duration) -> io::Result<()> {
    let start = Instant::now();
    let mut waiting = false;
    loop {
        match probe_unclaimed(addr, kind) {
            Ok(()) => {
                if waiting {
                    tracing::info!(
                        "{}{addr} was released after {} ms",
                        kind.prefix(),
                        start.elapsed().as_millis()
                    );
                }
                return Ok(());
            }
            Err(e) if e.kind() != io::ErrorKind::AddrInUse || patience.is_zero() => return Err(e),
            // The deadline is read only after a wait: a first probe that was itself slow
            // still waits once (and says so) rather than refusing at once.
            Err(e) if waiting && start.elapsed() >= patience => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{e} (not released within {patience:?})"),
                ))
            }
            Err(_) => {
                if !waiting {
                    tracing::warn!(
                        "{}{addr} is in use; waiting up to {patience:?} for it to be released \
                         (a process that has just died may still hold it; if another server \
                         holds it, start-up fails after the wait)",
                        kind.prefix()
                    );
                    waiting = true;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Binds a non-blocking listener with `SO_REUSEADDR` and `SO_REUSEPORT`. Errors name the
/// address and what to check.
pub fn bind_reuseport(addr: SocketAddr, opts: &ListenOptions) -> io::Result<TcpListener> {
    let ctx = |what: &str, e| context(Kind::Tcp, addr, what, e);
    let sock = reuseport_socket(addr, Kind::Tcp, opts)?;
    if opts.nodelay {
        sock.set_tcp_nodelay(true)
            .map_err(|e| ctx("TCP_NODELAY on", e))?;
    }
    sock.bind(&addr.into()).map_err(|e| ctx("bind", e))?;
    if opts.defer_accept_secs > 0 {
        let secs = opts.defer_accept_secs as libc::c_int;
        crate::sys::setsockopt_int(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            secs,
        )
        .map_err(|e| ctx("TCP_DEFER_ACCEPT on", e))?;
    }
    sock.listen(opts.backlog).map_err(|e| ctx("listen", e))?;
    Ok(sock.into())
}

/// Binds a non-blocking UDP socket with `SO_REUSEADDR` and `SO_REUSEPORT`, one per zone: the
/// kernel spreads datagrams over the zones by a hash of their addresses, so every datagram of
/// one client reaches the same zone. A wildcard address asks for each datagram's destination
/// (`IP_PKTINFO` / `IPV6_RECVPKTINFO`), so that the answer leaves from the address the client
/// wrote to. Errors name the address and what to check.
pub fn bind_udp_reuseport(addr: SocketAddr, opts: &ListenOptions) -> io::Result<UdpSocket> {
    let ctx = |what: &str, e| context(Kind::Udp, addr, what, e);
    let sock = reuseport_socket(addr, Kind::Udp, opts)?;
    if addr.ip().is_unspecified() {
        let (level, name) = if addr.is_ipv6() {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO)
        } else {
            (libc::IPPROTO_IP, libc::IP_PKTINFO)
        };
        crate::sys::setsockopt_int(std::os::fd::AsRawFd::as_raw_fd(&sock), level, name, 1)
            .map_err(|e| ctx("IP_PKTINFO on", e))?;
    }
    if opts.rcvbuf > 0 {
        set_buffer(&sock, addr, Buffer::Receive, opts.rcvbuf as usize)
            .map_err(|e| ctx("SO_RCVBUF on", e))?;
    }
    if opts.sndbuf > 0 {
        set_buffer(&sock, addr, Buffer::Send, opts.sndbuf as usize)
            .map_err(|e| ctx("SO_SNDBUF on", e))?;
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    if opts.gro {
        if let Err(e) = crate::sys::setsockopt_int(fd, libc::SOL_UDP, crate::sys::UDP_GRO, 1) {
            tracing::warn!("udp {addr}: UDP_GRO on: {e}: datagrams are received one by one");
        }
    }
    if opts.ecn {
        // An IPv6 socket also takes IPv4 peers (mapped addresses): their TOS comes as IP_TOS.
        let mut asks = vec![(libc::IPPROTO_IP, libc::IP_RECVTOS)];
        if addr.is_ipv6() {
            asks.push((libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS));
        }
        for (level, name) in asks {
            let r = crate::sys::setsockopt_int(fd, level, name, 1);
            if let (Err(e), true) = (r, level == libc::IPPROTO_IPV6 || addr.is_ipv4()) {
                tracing::warn!("udp {addr}: ECN reporting on: {e}: ECN marks are not seen");
            }
        }
    }
    sock.bind(&addr.into()).map_err(|e| ctx("bind", e))?;
    Ok(sock.into())
}

/// A socket buffer [`set_buffer`] sizes.
#[derive(Clone, Copy)]
enum Buffer {
    Receive,
    Send,
}

/// Asks for a receive or send buffer of `bytes`: `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE`
/// (CAP_NET_ADMIN) go past `net.core.rmem_max` / `wmem_max`; without the capability
/// `SO_RCVBUF` / `SO_SNDBUF`, which the kernel caps there. A buffer smaller than asked for
/// is logged once per address with what to raise.
fn set_buffer(sock: &Socket, addr: SocketAddr, which: Buffer, bytes: usize) -> io::Result<()> {
    type Set = fn(&Socket, usize) -> io::Result<()>;
    type Get = fn(&Socket) -> io::Result<usize>;
    let (force, set, get, sysctl, what, short): (_, Set, Get, _, _, _) = match which {
        Buffer::Receive => (
            libc::SO_RCVBUFFORCE,
            Socket::set_recv_buffer_size,
            Socket::recv_buffer_size,
            "net.core.rmem_max",
            "receive",
            "bursts of datagrams beyond it are dropped by the kernel",
        ),
        Buffer::Send => (
            libc::SO_SNDBUFFORCE,
            Socket::set_send_buffer_size,
            Socket::send_buffer_size,
            "net.core.wmem_max",
            "send",
            "sends that find it full are dropped (epoll) or wait (io_uring)",
        ),
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(sock);
    let want = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    if crate::sys::setsockopt_int(fd, libc::SOL_SOCKET, force, want).is_err() {
        set(sock, bytes)?;
    }
    // The kernel reports twice what it was given (its bookkeeping share included).
    let got = get(sock)? / 2;
    if got < bytes {
        tracing::info!(
            "udp {addr}: {what} buffer {} KiB of the {} KiB asked for ({sysctl}); {short}: \
             raise {sysctl} or run with CAP_NET_ADMIN",
            got >> 10,
            bytes >> 10
        );
    }
    Ok(())
}

/// `IP_TRANSPARENT` or `IPV6_TRANSPARENT`, whichever family `addr` is. The error says what
/// the kernel wants for it.
pub(crate) fn set_transparent(sock: &Socket, addr: SocketAddr) -> io::Result<()> {
    let r = if addr.is_ipv6() {
        sock.set_ip_transparent_v6(true)
    } else {
        sock.set_ip_transparent_v4(true)
    };
    r.map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => io::Error::new(
            e.kind(),
            format!("{e} (transparent sockets need CAP_NET_ADMIN: run as root, or grant it with setcap cap_net_admin+ep)"),
        ),
        _ => e,
    })
}

/// The two kinds of listening socket: what differs in their set-up and their messages.
#[derive(Clone, Copy)]
enum Kind {
    Tcp,
    Udp,
}

impl Kind {
    fn socket(self, addr: SocketAddr) -> io::Result<Socket> {
        let (ty, proto) = match self {
            Kind::Tcp => (Type::STREAM, Protocol::TCP),
            Kind::Udp => (Type::DGRAM, Protocol::UDP),
        };
        Socket::new(Domain::for_address(addr), ty.cloexec(), Some(proto))
    }

    /// How an address is named in messages: "127.0.0.1:80", "udp 127.0.0.1:53".
    fn prefix(self) -> &'static str {
        match self {
            Kind::Tcp => "",
            Kind::Udp => "udp ",
        }
    }
}

/// `e` from step `what` on `addr`, with the address and what to check.
fn context(kind: Kind, addr: SocketAddr, what: &str, e: io::Error) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EADDRINUSE) => match kind {
            Kind::Tcp => {
                " (another process listens there without SO_REUSEPORT, or as another user)"
            }
            Kind::Udp => {
                " (another process holds this UDP port without SO_REUSEPORT, or as another user)"
            }
        },
        Some(libc::EACCES) => " (ports below 1024 need root or CAP_NET_BIND_SERVICE)",
        Some(libc::EADDRNOTAVAIL) => " (no local interface has this address)",
        _ => "",
    };
    let prefix = kind.prefix();
    io::Error::new(e.kind(), format!("{what} {prefix}{addr}: {e}{hint}"))
}

/// A non-blocking socket for `addr` with `SO_REUSEADDR`, `SO_REUSEPORT`, `IPV6_V6ONLY` for an
/// IPv6 address and, if asked, `IP_TRANSPARENT`; not bound yet.
fn reuseport_socket(addr: SocketAddr, kind: Kind, opts: &ListenOptions) -> io::Result<Socket> {
    let ctx = |what: &str, e| context(kind, addr, what, e);
    let sock = kind.socket(addr).map_err(|e| ctx("socket for", e))?;
    sock.set_nonblocking(true)
        .map_err(|e| ctx("O_NONBLOCK on", e))?;
    sock.set_reuse_address(true)
        .map_err(|e| ctx("SO_REUSEADDR on", e))?;
    sock.set_reuse_port(true)
        .map_err(|e| ctx("SO_REUSEPORT on", e))?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)
            .map_err(|e| ctx("IPV6_V6ONLY on", e))?;
    }
    if opts.transparent {
        set_transparent(&sock, addr).map_err(|e| ctx("IP_TRANSPARENT on", e))?;
    }
    Ok(sock)
}

/// The check of [`ensure_unclaimed`]: bind a plain socket to `addr`, and close it.
fn probe_unclaimed(addr: SocketAddr, kind: Kind) -> io::Result<()> {
    let sock = kind.socket(addr)?;
    if let Kind::Tcp = kind {
        sock.set_reuse_address(true)?;
    }
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    match sock.bind(&addr.into()) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
            let prefix = kind.prefix();
            let holder = match kind {
                Kind::Tcp => " (another ringx, or another server)",
                Kind::Udp => "",
            };
            let upgrade = match kind {
                Kind::Tcp => " and with the process it upgrades",
                Kind::Udp => "",
            };
            Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{prefix}{addr} is already in use by another process{holder}: stop it, or \
                     choose another address; ringx shares a port only among its own zones{upgrade}"
                ),
            ))
        }
        // Anything else (EACCES for a low port, EADDRNOTAVAIL) is reported by the real bind.
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;

    #[test]
    fn two_zones_share_a_port() {
        let a = bind_reuseport("127.0.0.1:0".parse().unwrap(), &ListenOptions::default()).unwrap();
        let addr = a.local_addr().unwrap();
        let b = bind_reuseport(addr, &ListenOptions::default()).unwrap();
        assert_eq!(b.local_addr().unwrap(), addr);
    }

    #[test]
    fn a_port_another_socket_holds_is_refused_one_we_share_is_not() {
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = other.local_addr().unwrap();
        let e = ensure_unclaimed(addr).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("another process"), "{e}");
        drop(other);
        ensure_unclaimed(addr).unwrap();
        let ours = bind_reuseport(addr, &ListenOptions::default()).unwrap();
        assert!(
            ensure_unclaimed(addr).is_err(),
            "our own listener counts too: probe first"
        );
        drop(ours);
    }

    /// A UDP address only this process holds (a QUIC listener that drains after a reload
    /// removed it) is not another process's: a reload that serves it again binds beside it.
    #[test]
    fn a_udp_port_only_we_hold_is_not_refused() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let ours = bind_udp_reuseport(any, &ListenOptions::default()).unwrap();
        let addr = ours.local_addr().unwrap();
        if std::fs::metadata("/proc/net/udp").is_err() {
            eprintln!("skipped: no /proc/net/udp here to tell whose sockets hold a port");
            return;
        }
        ensure_unclaimed_udp(addr).unwrap();
        drop(ours);
        ensure_unclaimed_udp(addr).unwrap();
    }

    /// A restart finds its port held by the sockets of the process it replaces for a few
    /// milliseconds after that process is gone: start-up waits for the release.
    #[test]
    fn start_up_waits_for_an_address_to_be_released() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        let (released, closer) = release_later(tcp);
        await_unclaimed(addr, Duration::from_secs(30)).unwrap();
        assert!(released.load(Ordering::SeqCst), "free only once released");
        closer.join().unwrap();

        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let (released, closer) = release_later(udp);
        await_unclaimed_udp(addr, Duration::from_secs(30)).unwrap();
        assert!(released.load(Ordering::SeqCst), "free only once released");
        closer.join().unwrap();
    }

    /// Drops the socket `held` after 100 ms on a thread of its own, setting the flag just
    /// before: an address found free while the flag is unset was free too early.
    fn release_later<S: Send + 'static>(held: S) -> (Arc<AtomicBool>, JoinHandle<()>) {
        let released = Arc::new(AtomicBool::new(false));
        let r = released.clone();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            r.store(true, Ordering::SeqCst);
            drop(held);
        });
        (released, closer)
    }

    /// An address another process goes on holding is refused once the wait is over, and the
    /// error says it waited.
    #[test]
    fn an_address_held_past_the_wait_is_refused() {
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = other.local_addr().unwrap();
        let t0 = Instant::now();
        let e = await_unclaimed(addr, Duration::from_millis(50)).unwrap_err();
        assert!(
            t0.elapsed() >= Duration::from_millis(50),
            "refused before the wait was over"
        );
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains("another process"), "{e}");
        assert!(e.to_string().contains("not released within 50ms"), "{e}");
        drop(other);
    }

    #[test]
    fn accepted_connections_inherit_nodelay() {
        let l = bind_reuseport("127.0.0.1:0".parse().unwrap(), &ListenOptions::default()).unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        l.set_nonblocking(false).unwrap();
        let (a, _) = l.accept().unwrap();
        assert!(a.nodelay().unwrap());
    }

    #[test]
    fn udp_buffers_are_sized_as_asked() {
        let opts = ListenOptions {
            rcvbuf: 3 << 20,
            sndbuf: 5 << 20,
            ..ListenOptions::default()
        };
        let u = Socket::from(bind_udp_reuseport("127.0.0.1:0".parse().unwrap(), &opts).unwrap());
        let (r, w) = (u.recv_buffer_size().unwrap(), u.send_buffer_size().unwrap());
        // Without CAP_NET_ADMIN the kernel caps both at net.core.[rw]mem_max.
        let cap = |f: &str| std::fs::read_to_string(f).map_or(0, |v| v.trim().parse().unwrap_or(0));
        // SAFETY: geteuid has no preconditions, touches no memory and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let want_r = if root {
            3 << 20
        } else {
            cap("/proc/sys/net/core/rmem_max").min(3 << 20)
        };
        let want_w = if root {
            5 << 20
        } else {
            cap("/proc/sys/net/core/wmem_max").min(5 << 20)
        };
        // The kernel reports twice what it granted.
        assert!(r / 2 >= want_r, "receive buffer {r} for {want_r}");
        assert!(w / 2 >= want_w, "send buffer {w} for {want_w}");
    }
}
