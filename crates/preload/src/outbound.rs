//! The active side: `connect` on a TCP socket to a destination of the steering tables is
//! bound first to a source port whose replies come back to the calling thread's CPU.
//!
//! The tables are `ringx_steer`'s, one per zone, built in the constructor exactly as ringx
//! builds its own (`software`: the zone is the local port's residue, which the XDP program
//! `ringx run` attached enforces; `rss`: the NIC's Toeplitz key, indirection table and queue
//! CPUs). A zone is a CPU of `RINGX_PRELOAD_CPUS`; a thread on CPU `c` takes ports from the
//! table of `c`'s zone, under that table's lock (threads of one CPU share it).
//!
//! What passes through untouched: other families and protocols, destinations without a
//! table, sockets the program bound itself, threads on a CPU that is no zone's. When the
//! table has no port, or the kernel refuses the ports tried (another socket holds them), the
//! kernel chooses, as without the library; each case is counted ([`crate::stats`]). The
//! binding is the only difference the program could observe: `getsockname` after `connect`
//! shows a port of the table, as it would show one of the kernel's.
//!
//! Nothing here allocates after the constructor: a table's ports are a fixed set handed out
//! and put back (`PortTable::take_id`, `release_id` on a complete table), and addresses live
//! on the stack.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ringx_steer::active::{self as steer_active, Mode, Request};
use ringx_steer::ports::{Dest, PortTable, PortTableBuilder, PortTableConfig};

use crate::fdstate::{self, FdState};
use crate::lock::SpinLock;
use crate::settings::Settings;
use crate::sock;
use crate::stats::{self, Counter};

/// Ports tried per connect before the kernel chooses.
const BIND_TRIES: usize = 4;

pub struct Outbound {
    pub mode: Mode,
    cpus: Vec<usize>,
    dests: Vec<Dest>,
    pub tables: Vec<SpinLock<PortTable>>,
}

impl Outbound {
    /// The tables for `s` (None when the mode is off); the error says why they cannot be built.
    pub fn build(s: &Settings) -> Result<Option<Outbound>, String> {
        let zones = s.cpus.len();
        let range = s
            .ports
            .clone()
            .unwrap_or_else(steer_active::local_port_range);
        let tables = match s.mode {
            Mode::Off | Mode::Auto => return Ok(None),
            Mode::Software => {
                let config = PortTableConfig {
                    range,
                    time_wait: steer_active::default_time_wait(),
                    ..PortTableConfig::default()
                };
                let b =
                    PortTableBuilder::new(Arc::new(steer_active::software_function(zones)), config)
                        .dests(s.dests.iter().copied());
                (0..zones)
                    .map(|z| b.build(z as u16).map_err(|e| e.to_string()))
                    .collect::<Result<Vec<_>, _>>()?
            }
            Mode::Rss => {
                let devices: Vec<String> = s.device.iter().cloned().collect();
                let mut a = steer_active::setup(&Request {
                    mode: Mode::Rss,
                    cpus: &s.cpus,
                    dests: &s.dests,
                    devices: &devices,
                    port_range: Some(range),
                    ..Request::default()
                })
                .map_err(|e| e.to_string())?;
                (0..zones)
                    .map(|z| a.take_table(z).ok_or("no table for a zone".to_string()))
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        Ok(Some(Outbound {
            mode: s.mode,
            cpus: s.cpus.clone(),
            dests: s.dests.clone(),
            tables: tables.into_iter().map(SpinLock::new).collect(),
        }))
    }

    /// The zones' CPUs.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The destinations with tables.
    pub fn dests(&self) -> &[Dest] {
        &self.dests
    }

    /// Before `connect(fd, to)`: binds `fd` to a table port of the calling thread's zone when
    /// everything allows it, and returns what to remember of `fd`.
    pub fn bind_for(&self, fd: libc::c_int, to: SocketAddr) -> Option<FdState> {
        let dest_ix = self.dests.iter().position(|d| d.remote == to)?;
        let dest = self.dests[dest_ix];
        if fd < 0 || fd as usize >= fdstate::MAX_FDS {
            stats::add(Counter::FdTooHigh);
            return None;
        }
        if !sock::is_tcp(fd) {
            return None;
        }
        match sock::local_addr(fd) {
            Some(a) if a.port() == 0 && a.is_ipv4() == to.is_ipv4() => {}
            Some(_) => {
                stats::add(Counter::ConnectsPreBound);
                return None;
            }
            None => return None,
        }
        // SAFETY: sched_getcpu has no arguments; a negative answer is an error.
        let cpu = unsafe { libc::sched_getcpu() };
        let Some(zone) = usize::try_from(cpu)
            .ok()
            .and_then(|c| self.cpus.iter().position(|&z| z == c))
        else {
            stats::add(Counter::ConnectsOffZone);
            return None;
        };
        let table = self.tables.get(zone)?;
        for _ in 0..BIND_TRIES {
            let port = {
                let mut t = table.lock();
                let id = t.dest_id(&dest)?;
                match t.take_id(id, Instant::now()) {
                    Some(p) => p,
                    None => break,
                }
            };
            match bind(fd, SocketAddr::new(dest.local, port)) {
                Ok(()) => {
                    stats::add(Counter::ConnectsSteered);
                    return Some(FdState::Active {
                        zone: zone as u16,
                        dest: dest_ix as u16,
                        port,
                    });
                }
                Err(e) => {
                    self.release(zone as u16, dest_ix as u16, port);
                    if e != libc::EADDRINUSE {
                        break;
                    }
                    stats::add(Counter::BindRetries);
                }
            }
        }
        stats::add(Counter::ConnectsFallback);
        None
    }

    /// Gives back a port taken by [`Outbound::bind_for`] (its socket is closed): it rests
    /// for the table's TIME_WAIT before it is handed out again.
    pub fn release(&self, zone: u16, dest: u16, port: u16) {
        let (Some(table), Some(d)) = (
            self.tables.get(usize::from(zone)),
            self.dests.get(usize::from(dest)),
        ) else {
            return;
        };
        let mut t = table.lock();
        if let Some(id) = t.dest_id(d) {
            if t.release_id(id, port, Instant::now()).is_ok() {
                stats::add(Counter::PortsReleased);
            }
        }
    }
}

/// Binds `fd` to `local`; the errno of bind on failure. A port refused as in use may still be
/// in TIME_WAIT towards another peer: then, if the program had not set `SO_REUSEADDR`, the
/// bind is tried once more with it set for the call (the 4-tuple decides, as in ringx's own
/// connects) and the option is put back as it was.
fn bind(fd: libc::c_int, local: SocketAddr) -> Result<(), libc::c_int> {
    let (ss, len) = sock::to_raw(local);
    let once = || {
        // SAFETY: bind reads `len` bytes of the live, initialised storage.
        let r = unsafe { libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), len) };
        if r == 0 {
            Ok(())
        } else {
            Err(crate::errno::get())
        }
    };
    match once() {
        Err(libc::EADDRINUSE)
            if sock::opt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR) == Some(0) =>
        {
            sock::set_opt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1);
            let r = once();
            sock::set_opt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 0);
            r
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn settings(dest: &str, cpus: Vec<usize>) -> Settings {
        Settings {
            listen_cpu: false,
            pin: false,
            mode: Mode::Software,
            cpus,
            device: None,
            dests: vec![dest.parse().unwrap()],
            ports: Some(41000..=41999),
            stats: None,
        }
    }

    fn tcp() -> socket2::Socket {
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap()
    }

    #[test]
    fn binds_a_port_of_the_callers_zone_and_gives_it_back() {
        // One zone on every CPU this thread may use, so the caller is always in zone 0..n.
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| sock::cpu_in(&sock::thread_cpus(), c))
            .collect();
        let zones = cpus.len();
        let o = Outbound::build(&settings("127.0.0.1 127.0.0.1 9", cpus.clone()))
            .unwrap()
            .unwrap();
        let s = tcp();
        let st = o.bind_for(s.as_raw_fd(), "127.0.0.1:9".parse().unwrap());
        let Some(FdState::Active { zone, dest, port }) = st else {
            panic!("not steered: {st:?}");
        };
        assert_eq!(dest, 0);
        assert!((41000..=41999).contains(&port));
        // Software steering: the zone is the port's residue.
        assert_eq!(
            usize::from(port) % zones.next_power_of_two(),
            usize::from(zone)
        );
        let bound = sock::local_addr(s.as_raw_fd()).unwrap();
        assert_eq!(bound.port(), port);
        // SO_REUSEADDR is back as the program had it.
        assert_eq!(
            sock::opt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR),
            Some(0)
        );
        // One port is held. The table may have handed out more than one: a port another
        // socket of this machine holds (an ephemeral port of a test beside this one) is
        // refused by bind, given back and the next one tried.
        {
            let t = o.tables[usize::from(zone)].lock();
            let id = t.dest_id(&o.dests()[0]).unwrap();
            assert_eq!(t.in_use(id), 1);
            assert!(t.counters.table_hits >= 1);
        }
        o.release(zone, dest, port);
        let t = o.tables[usize::from(zone)].lock();
        let id = t.dest_id(&o.dests()[0]).unwrap();
        assert_eq!(t.in_use(id), 0);
    }

    #[test]
    fn a_port_in_use_is_bound_with_reuseaddr_for_the_call() {
        // Another socket holds the address with SO_REUSEADDR and does not listen (a connection
        // of the past, towards another peer): a plain bind is refused, the retry succeeds.
        let holder = tcp();
        holder.set_reuse_address(true).unwrap();
        holder
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let at = holder.local_addr().unwrap().as_socket().unwrap();
        let s = tcp();
        assert_eq!(bind(s.as_raw_fd(), at), Ok(()));
        assert_eq!(sock::local_addr(s.as_raw_fd()), Some(at));
        assert_eq!(
            sock::opt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR),
            Some(0)
        );
        // A listener holds it: refused, with bind's errno.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        assert_eq!(bind(tcp().as_raw_fd(), at), Err(libc::EADDRINUSE));
    }

    #[test]
    fn passes_through_what_it_must_not_touch() {
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| sock::cpu_in(&sock::thread_cpus(), c))
            .collect();
        let o = Outbound::build(&settings("127.0.0.1 127.0.0.1 9", cpus))
            .unwrap()
            .unwrap();
        // Another destination.
        assert_eq!(
            o.bind_for(tcp().as_raw_fd(), "127.0.0.1:10".parse().unwrap()),
            None
        );
        // A socket the program bound.
        let s = tcp();
        s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        assert_eq!(
            o.bind_for(s.as_raw_fd(), "127.0.0.1:9".parse().unwrap()),
            None
        );
        // UDP.
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(
            o.bind_for(u.as_raw_fd(), "127.0.0.1:9".parse().unwrap()),
            None
        );
        // A CPU that is no zone's.
        let off = Outbound::build(&settings("127.0.0.1 127.0.0.1 9", vec![100_000]))
            .unwrap()
            .unwrap();
        assert_eq!(
            off.bind_for(tcp().as_raw_fd(), "127.0.0.1:9".parse().unwrap()),
            None
        );
    }
}
