//! Socket addresses as the kernel writes them (`accept4` on epoll, `SO_PEERNAME` on
//! io_uring) into [`std::net::SocketAddr`]. A leaf both drivers use.

use std::net::SocketAddr;

/// Reads a kernel-filled `sockaddr_in`/`sockaddr_in6` of `len` bytes; `None` for another
/// family or a short address.
pub(crate) fn to_addr(s: &libc::sockaddr_storage, len: usize) -> Option<SocketAddr> {
    let p = s as *const libc::sockaddr_storage;
    match s.ss_family as i32 {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, fully written (len);
            // sockaddr_storage is aligned for every address type.
            let a = unsafe { &*p.cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_families_and_refuses_short_ones() {
        for want in ["192.0.2.1:80", "[2001:db8::1]:443"] {
            let want: SocketAddr = want.parse().unwrap();
            let sa = socket2::SockAddr::from(want);
            // SAFETY: sockaddr_storage is plain data (all-zero is valid), and SockAddr holds
            // at most a sockaddr_storage's worth of bytes, which are copied into it.
            let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            // SAFETY: as above: `sa.len()` bytes fit in `s` and both regions are live.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    sa.as_ptr().cast::<u8>(),
                    (&mut s as *mut libc::sockaddr_storage).cast::<u8>(),
                    sa.len() as usize,
                )
            };
            assert_eq!(to_addr(&s, sa.len() as usize), Some(want));
            assert_eq!(to_addr(&s, sa.len() as usize - 1), None);
        }
    }
}
