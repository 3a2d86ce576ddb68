//! A zone's listening sockets: their addresses in registration order (the engine's
//! `ListenerId`s), and which address of the current routes each serves.

use std::net::SocketAddr;

use ringx_engine::ListenerId;

use crate::route::Routes;

/// A driver listener whose address is not (or no longer) served.
pub const NO_ROUTE: u32 = u32::MAX;

/// The zone's listeners: their addresses in registration order, and which address of the
/// routes each serves now.
pub struct Listeners {
    pub addrs: Vec<SocketAddr>,
    map: Vec<u32>,
    /// Closed by a reload (their address is gone).
    pub closed: Vec<bool>,
}

impl Listeners {
    pub fn new(addrs: Vec<SocketAddr>, routes: &Routes) -> Listeners {
        let mut l = Listeners {
            closed: vec![false; addrs.len()],
            addrs,
            map: Vec::new(),
        };
        l.remap(routes);
        l
    }

    pub fn remap(&mut self, routes: &Routes) {
        self.map = self
            .addrs
            .iter()
            .zip(&self.closed)
            .map(|(a, &closed)| match closed {
                true => NO_ROUTE,
                false => routes
                    .listen
                    .iter()
                    .position(|x| x == a)
                    .map_or(NO_ROUTE, |i| i as u32),
            })
            .collect();
    }

    /// The index in `routes.listen` of what `listener` serves (`u32::MAX`: nothing now).
    pub fn route(&self, listener: ListenerId) -> u32 {
        match self.map.get(listener.0 as usize) {
            Some(&i) => i,
            // Without addresses (tests), listeners are registered in routes order.
            None if self.addrs.is_empty() => listener.0,
            None => NO_ROUTE,
        }
    }
}
