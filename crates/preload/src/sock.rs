//! Socket queries and addresses, on the stack: the few `getsockopt`/`getsockname` calls and
//! `sockaddr` conversions the hooks need, none of which allocates.

use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use libc::{c_int, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};

/// An integer socket option of `fd`; None when the call fails.
pub fn opt_int(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = size_of::<c_int>() as socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live local `v` and updates `len`.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
    (r == 0).then_some(v)
}

/// Sets an integer socket option; the result of setsockopt.
pub fn set_opt_int(fd: c_int, level: c_int, name: c_int, v: c_int) -> c_int {
    // SAFETY: setsockopt reads one live c_int of the size given.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const c_int).cast(),
            size_of::<c_int>() as socklen_t,
        )
    }
}

/// `SO_COOKIE`: the socket's identity, as the reuseport map reports it.
pub fn cookie(fd: c_int) -> Option<u64> {
    let mut v: u64 = 0;
    let mut len = size_of::<u64>() as socklen_t;
    // SAFETY: getsockopt writes at most `len` (8) bytes into the live local `v`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&mut v as *mut u64).cast(),
            &mut len,
        )
    };
    (r == 0 && len as usize == size_of::<u64>()).then_some(v)
}

/// Whether `fd` is a TCP socket.
pub fn is_tcp(fd: c_int) -> bool {
    opt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
}

/// The local address of an IPv4 or IPv6 socket.
pub fn local_addr(fd: c_int) -> Option<SocketAddr> {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut ss: sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<sockaddr_storage>() as socklen_t;
    // SAFETY: getsockname writes at most `len` bytes into the live storage and updates len.
    let r = unsafe { libc::getsockname(fd, (&mut ss as *mut sockaddr_storage).cast(), &mut len) };
    if r != 0 {
        return None;
    }
    // SAFETY: the storage is large enough for any address and `len` is what the kernel wrote.
    unsafe { from_raw((&ss as *const sockaddr_storage).cast(), len) }
}

/// The IPv4 or IPv6 address at `addr`; None for other families or a short length.
///
/// # Safety
/// `addr` is null, or valid for reads of `len` bytes.
pub unsafe fn from_raw(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if addr.is_null() || (len as usize) < size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: the caller guarantees `len` readable bytes, and len covers the family field;
    // read_unaligned because a program's buffer need not be aligned.
    let family = unsafe { std::ptr::addr_of!((*addr).sa_family).read_unaligned() };
    match c_int::from(family) {
        libc::AF_INET if len as usize >= size_of::<sockaddr_in>() => {
            // SAFETY: the length covers a sockaddr_in.
            let a = unsafe { addr.cast::<sockaddr_in>().read_unaligned() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 if len as usize >= size_of::<sockaddr_in6>() => {
            // SAFETY: the length covers a sockaddr_in6.
            let a = unsafe { addr.cast::<sockaddr_in6>().read_unaligned() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

/// `addr` as a sockaddr for bind/connect.
pub fn to_raw(addr: SocketAddr) -> (sockaddr_storage, socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut ss: sockaddr_storage = unsafe { zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut sockaddr_storage).cast::<sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            size_of::<sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut sockaddr_storage).cast::<sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            size_of::<sockaddr_in6>()
        }
    };
    (ss, len as socklen_t)
}

/// The CPUs the calling thread may run on.
pub fn thread_cpus() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: sched_getaffinity(0) fills the live set of the size given for this thread.
    unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    set
}

/// Whether `cpu` is in `set`.
pub fn cpu_in(set: &libc::cpu_set_t, cpu: usize) -> bool {
    // SAFETY: CPU_ISSET reads one bit of the live set; the range check keeps it inside.
    cpu < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(cpu, set) }
}

/// Pins the calling thread to `cpu`; true on success.
pub fn pin_thread(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: CPU_SET writes one bit of the live set; the check above keeps it inside.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: sched_setaffinity(0) reads the live set of the size given, for this thread.
    unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trip() {
        for a in ["10.1.2.3:8080", "[2001:db8::1]:443"] {
            let a: SocketAddr = a.parse().unwrap();
            let (ss, len) = to_raw(a);
            // SAFETY: `ss` holds `len` initialised bytes.
            let back = unsafe { from_raw((&ss as *const sockaddr_storage).cast(), len) };
            assert_eq!(back, Some(a));
            // SAFETY: as above; a shorter length is refused, not over-read.
            let short = unsafe { from_raw((&ss as *const sockaddr_storage).cast(), len - 1) };
            assert_eq!(short, None);
        }
        // SAFETY: null is allowed.
        assert_eq!(unsafe { from_raw(std::ptr::null(), 16) }, None);
    }

    #[test]
    fn queries_on_a_real_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        let fd = l.as_raw_fd();
        assert!(is_tcp(fd));
        assert_eq!(local_addr(fd), Some(l.local_addr().unwrap()));
        assert!(cookie(fd).is_some_and(|c| c != 0));
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!is_tcp(u.as_raw_fd()));
        let set = thread_cpus();
        assert!((0..1024).any(|c| cpu_in(&set, c)));
    }
}
