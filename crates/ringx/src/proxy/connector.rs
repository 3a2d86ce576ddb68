//! The one place upstream connections are opened. A zone connects only for its own
//! downstream connections, and when connection steering is on it binds the source port its
//! [`PortTable`] hands out, so the upstream's replies arrive on this zone's CPU (F-Stack's
//! `ff_rss_check`, Fastsocket's active-side locality). Without a table the kernel chooses.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Instant;

use ringx_engine::{ConnId, ConnectTo, Io};
use ringx_steer::ports::{Dest, PortTable};

/// Connection counts, per zone.
#[derive(Default, Debug, Clone, Copy)]
pub struct ConnectCounters {
    pub connects: u64,
    /// Source port from the steering table (or its dynamic search).
    pub steered: u64,
    /// The kernel chose the source port (steering off, or no port fits).
    pub kernel_choice: u64,
    pub failures: u64,
}

pub struct Connector {
    ports: Option<PortTable>,
    /// The source address the kernel routes from, per upstream (looked up once).
    local_ip: HashMap<SocketAddr, IpAddr>,
    /// Ports taken from the table, by connection, to give back at close.
    taken: HashMap<u32, (Dest, u16)>,
    pub counters: ConnectCounters,
}

impl Connector {
    pub fn new(ports: Option<PortTable>) -> Connector {
        Connector {
            ports,
            local_ip: HashMap::new(),
            taken: HashMap::new(),
            counters: ConnectCounters::default(),
        }
    }

    /// Opens a connection to `addr` (completion arrives as `on_connected`/`on_closed`).
    pub fn connect(&mut self, io: &mut Io, addr: SocketAddr) -> io::Result<ConnId> {
        self.counters.connects += 1;
        let mut to = ConnectTo::new(addr);
        let mut taken = None;
        if self.ports.is_some() {
            if let Some(local) = self.local_ip(addr) {
                let dest = Dest::new(local, addr);
                let now = io.now();
                if let Some(port) = self.ports.as_mut().and_then(|t| t.take(&dest, now)) {
                    to.local = Some(SocketAddr::new(local, port));
                    taken = Some((dest, port));
                }
            }
        }
        match taken {
            Some(_) => self.counters.steered += 1,
            None => self.counters.kernel_choice += 1,
        }
        match io.connect(&to) {
            Ok(c) => {
                if let Some(t) = taken {
                    self.taken.insert(c.0, t);
                }
                Ok(c)
            }
            Err(e) => {
                self.counters.failures += 1;
                if let (Some((dest, port)), Some(t)) = (taken, self.ports.as_mut()) {
                    let _ = t.release(&dest, port, Instant::now());
                }
                Err(e)
            }
        }
    }

    /// The connection closed: its source port rests in TIME_WAIT before reuse.
    pub fn closed(&mut self, c: ConnId, now: Instant) {
        if let Some((dest, port)) = self.taken.remove(&c.0) {
            if let Some(t) = self.ports.as_mut() {
                let _ = t.release(&dest, port, now);
            }
        }
    }

    /// The source address the kernel would use towards `addr` (a connected UDP socket sends
    /// nothing and tells us the route's source).
    fn local_ip(&mut self, addr: SocketAddr) -> Option<IpAddr> {
        if let Some(ip) = self.local_ip.get(&addr) {
            return Some(*ip);
        }
        let bind: SocketAddr = if addr.is_ipv4() {
            "0.0.0.0:0".parse().ok()?
        } else {
            "[::]:0".parse().ok()?
        };
        let s = UdpSocket::bind(bind).ok()?;
        s.connect(addr).ok()?;
        let ip = s.local_addr().ok()?.ip();
        self.local_ip.insert(addr, ip);
        Some(ip)
    }
}
