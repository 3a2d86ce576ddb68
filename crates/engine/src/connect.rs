//! Outbound connections (upstreams): the socket is created, configured and bound here, by
//! ordinary system calls, because the source port must be chosen by the caller (connection
//! locality) and `bind` with a chosen port has no io_uring operation before Linux 6.11. The
//! connect itself is asynchronous in both drivers.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Where and how to connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectTo {
    /// The peer.
    pub addr: SocketAddr,
    /// Bind to this local address (and port) first; `None` lets the kernel choose.
    pub local: Option<SocketAddr>,
    /// A connected UDP socket instead of a TCP connection: each [`Io::send_datagram`]
    /// is one datagram to the peer, each [`Handler::on_data`] one datagram from it, and an
    /// ICMP error from the peer (port unreachable: `ECONNREFUSED`) closes it with that error.
    ///
    /// [`Io::send_datagram`]: crate::Io::send_datagram
    /// [`Handler::on_data`]: crate::Handler::on_data
    pub datagram: bool,
    /// Bind to `local` even though it is not an address of this host (`IP_TRANSPARENT`,
    /// nginx's `proxy_bind ... transparent`): the peer sees the client's own address. With
    /// port 0 the port is chosen at connect time (`IP_BIND_ADDRESS_NO_PORT`), so many
    /// connections from one client address can share it. Needs CAP_NET_ADMIN, and routing
    /// that brings the peer's answers back to this host (`ringx tproxy rules`).
    pub transparent: bool,
}

impl ConnectTo {
    /// A TCP connect with the kernel's choice of source address and port.
    pub fn new(addr: SocketAddr) -> Self {
        ConnectTo {
            addr,
            local: None,
            datagram: false,
            transparent: false,
        }
    }

    /// A connected UDP socket to `addr` (see [`ConnectTo::datagram`](Self#structfield.datagram)).
    pub fn datagram(addr: SocketAddr) -> Self {
        ConnectTo {
            datagram: true,
            ..ConnectTo::new(addr)
        }
    }
}

/// A non-blocking TCP socket with `TCP_NODELAY` (or a UDP socket for a datagram connect),
/// bound if asked. Errors name the addresses.
pub(crate) fn socket_for(to: &ConnectTo) -> io::Result<OwnedFd> {
    let ctx = |what: &str, e: io::Error| {
        io::Error::new(e.kind(), format!("{what} (to {}): {e}", to.addr))
    };
    let (ty, proto) = match to.datagram {
        false => (Type::STREAM, Protocol::TCP),
        true => (Type::DGRAM, Protocol::UDP),
    };
    let s = Socket::new(
        Domain::for_address(to.addr),
        ty.nonblocking().cloexec(),
        Some(proto),
    )
    .map_err(|e| ctx("socket", e))?;
    if !to.datagram {
        s.set_tcp_nodelay(true).map_err(|e| ctx("TCP_NODELAY", e))?;
    }
    if let Some(local) = to.local {
        if to.transparent {
            crate::listen::set_transparent(&s, local)
                .map_err(|e| ctx(&format!("IP_TRANSPARENT to bind {}", local.ip()), e))?;
            if local.port() == 0 {
                // The port is picked at connect, for the 4-tuple: one client address can have
                // as many connections as ports, not one per local port range slot.
                crate::sys::setsockopt_int(
                    std::os::fd::AsRawFd::as_raw_fd(&s),
                    libc::IPPROTO_IP,
                    libc::IP_BIND_ADDRESS_NO_PORT,
                    1,
                )
                .map_err(|e| ctx("IP_BIND_ADDRESS_NO_PORT", e))?;
            }
        }
        if local.port() != 0 {
            // A port chosen for locality may still be in TIME_WAIT from an earlier
            // connection to another peer; SO_REUSEADDR lets the 4-tuple decide.
            s.set_reuse_address(true)
                .map_err(|e| ctx("SO_REUSEADDR", e))?;
        }
        s.bind(&SockAddr::from(local))
            .map_err(|e| ctx(&format!("bind {local}"), e))?;
    }
    Ok(s.into())
}

/// The peer address stored for a connect in flight (kept boxed so its address is stable
/// while the kernel reads it).
pub(crate) fn sockaddr(addr: SocketAddr) -> Box<SockAddr> {
    Box::new(SockAddr::from(addr))
}
