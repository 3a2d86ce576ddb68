//! Outbound connections (upstreams): the socket is created, configured and bound here, by
//! ordinary system calls, because the source port must be chosen by the caller (connection
//! locality) and `bind` with a chosen port has no io_uring operation before Linux 6.11. The
//! connect itself is asynchronous in both drivers.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Where and how to connect.
#[derive(Clone, Copy, Debug)]
pub struct ConnectTo {
    /// The peer.
    pub addr: SocketAddr,
    /// Bind to this local address (and port) first; `None` lets the kernel choose.
    pub local: Option<SocketAddr>,
}

impl ConnectTo {
    /// A connect with the kernel's choice of source address and port.
    pub fn new(addr: SocketAddr) -> Self {
        ConnectTo { addr, local: None }
    }
}

/// A non-blocking TCP socket with `TCP_NODELAY`, bound if asked. Errors name the addresses.
pub(crate) fn socket_for(to: &ConnectTo) -> io::Result<OwnedFd> {
    let ctx = |what: &str, e: io::Error| {
        io::Error::new(e.kind(), format!("{what} (to {}): {e}", to.addr))
    };
    let s = Socket::new(
        Domain::for_address(to.addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )
    .map_err(|e| ctx("socket", e))?;
    s.set_tcp_nodelay(true).map_err(|e| ctx("TCP_NODELAY", e))?;
    if let Some(local) = to.local {
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
