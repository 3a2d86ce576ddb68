//! A zone's listening sockets: their addresses in registration order (the engine's
//! `ListenerId`s), whether each is a UDP socket, and which address of the current routes each
//! serves (`routes.listen` for TCP ones, `routes.udp_listen` for UDP ones).

use std::net::SocketAddr;

use ringx_engine::ListenerId;

use crate::route::Routes;

/// A driver listener whose address is not (or no longer) served.
pub const NO_ROUTE: u32 = u32::MAX;

/// The zone's listeners: their addresses in registration order, and which address of the
/// routes each serves now.
pub struct Listeners {
    pub addrs: Vec<SocketAddr>,
    /// UDP sockets (the rest are TCP listeners).
    pub udp: Vec<bool>,
    map: Vec<u32>,
    /// Closed by a reload (their address is gone).
    pub closed: Vec<bool>,
    /// TCP listen addresses in the routes (for tests, which register no addresses: their
    /// listeners are the routes' TCP addresses in order, then the UDP ones).
    tcp_routes: u32,
}

impl Listeners {
    /// `addrs`: each listener's address and whether it is a UDP socket.
    pub fn new(addrs: Vec<(SocketAddr, bool)>, routes: &Routes) -> Listeners {
        let mut l = Listeners {
            closed: vec![false; addrs.len()],
            udp: addrs.iter().map(|a| a.1).collect(),
            addrs: addrs.into_iter().map(|a| a.0).collect(),
            map: Vec::new(),
            tcp_routes: 0,
        };
        l.remap(routes);
        l
    }

    pub fn remap(&mut self, routes: &Routes) {
        self.tcp_routes = routes.listen.len() as u32;
        self.map = self
            .addrs
            .iter()
            .zip(&self.closed)
            .zip(&self.udp)
            .map(|((a, &closed), &udp)| {
                let list = if udp {
                    &routes.udp_listen
                } else {
                    &routes.listen
                };
                match closed {
                    true => NO_ROUTE,
                    false => list
                        .iter()
                        .position(|x| x == a)
                        .map_or(NO_ROUTE, |i| i as u32),
                }
            })
            .collect();
    }

    /// Adds a listener a reload opened.
    pub fn push(&mut self, addr: SocketAddr, udp: bool) {
        self.addrs.push(addr);
        self.udp.push(udp);
        self.closed.push(false);
    }

    /// The index in `routes.listen` of what TCP listener `listener` serves (`NO_ROUTE`:
    /// nothing now, or a UDP socket).
    pub fn route(&self, listener: ListenerId) -> u32 {
        let i = listener.0 as usize;
        match self.map.get(i) {
            Some(_) if self.udp[i] => NO_ROUTE,
            Some(&r) => r,
            // Without addresses (tests), listeners are registered in routes order.
            None if self.addrs.is_empty() && listener.0 < self.tcp_routes => listener.0,
            None => NO_ROUTE,
        }
    }

    /// The index in `routes.udp_listen` of what UDP listener `listener` serves.
    pub fn udp_route(&self, listener: ListenerId) -> Option<u32> {
        let i = listener.0 as usize;
        match self.map.get(i) {
            Some(&r) if self.udp[i] && r != NO_ROUTE => Some(r),
            Some(_) => None,
            // Without addresses (tests): the UDP listeners follow the TCP ones.
            None if self.addrs.is_empty() => listener.0.checked_sub(self.tcp_routes),
            None => None,
        }
    }
}
