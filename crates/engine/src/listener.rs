//! What a zone listens on: a TCP listening socket, whose connections the driver accepts, or a
//! UDP socket, whose datagrams the driver hands to [`Handler::on_datagram`](crate::Handler::on_datagram)
//! and which answers them ([`Io::send_to`](crate::Io::send_to)). Both kinds share one
//! [`ListenerId`](crate::ListenerId) sequence, in registration order.

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// A listening socket handed to a zone ([`crate::run_zone`], [`crate::Driver::add_listener`],
/// [`crate::Io::add_listener`]). Bound, non-blocking; TCP ones listening.
#[derive(Debug)]
pub enum Listener {
    /// Connections are accepted ([`Handler::on_accept`](crate::Handler::on_accept)).
    Tcp(TcpListener),
    /// Datagrams are received ([`Handler::on_datagram`](crate::Handler::on_datagram)).
    Udp(UdpSocket),
}

impl Listener {
    /// The address it is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr(),
            Listener::Udp(u) => u.local_addr(),
        }
    }

    /// A UDP socket.
    pub fn is_udp(&self) -> bool {
        matches!(self, Listener::Udp(_))
    }

    /// The TCP listener, if it is one.
    pub fn as_tcp(&self) -> Option<&TcpListener> {
        match self {
            Listener::Tcp(l) => Some(l),
            Listener::Udp(_) => None,
        }
    }

    /// A second descriptor of the same socket.
    pub fn try_clone(&self) -> io::Result<Listener> {
        Ok(match self {
            Listener::Tcp(l) => Listener::Tcp(l.try_clone()?),
            Listener::Udp(u) => Listener::Udp(u.try_clone()?),
        })
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Udp(u) => u.as_raw_fd(),
        }
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Listener {
        Listener::Tcp(l)
    }
}

impl From<UdpSocket> for Listener {
    fn from(u: UdpSocket) -> Listener {
        Listener::Udp(u)
    }
}

impl From<Listener> for OwnedFd {
    fn from(l: Listener) -> OwnedFd {
        match l {
            Listener::Tcp(l) => l.into(),
            Listener::Udp(u) => u.into(),
        }
    }
}
