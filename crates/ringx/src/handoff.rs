//! A full zone hands its CPU's new connections on. With `[steering] listen = "cpu"` every
//! new connection goes to the zone on the CPU that processed its SYN; a zone that holds
//! `max_conns` busy connections (idle ones it reclaims itself) would leave that CPU's clients
//! waiting in its listen queue while other zones have room. While a zone is full, its CPU's
//! slot in the steering map is cleared, so those connections take the kernel's reuseport
//! hash over every zone's listener; when the zone has room again, the slot is restored.
//!
//! (A socket can hold one slot of a reuseport socket array only, so the slot cannot point at
//! another zone's listener directly.) The control thread looks at the zones' `full` flags on
//! each of its ticks; nothing of this touches a zone's request path.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};

use ringx_engine::Waker;
use ringx_steer::reuseport::{CpuSteering, Method};

/// The CPU steering of every address, and what a full zone changed in it.
pub struct HandOff {
    /// Per address: its steering (eBPF only).
    groups: Vec<(SocketAddr, CpuSteering)>,
    cpus: Vec<usize>,
    /// Zones whose CPU slot is cleared now.
    cleared: Vec<bool>,
    /// The listeners were handed to a new process ([`HandOff::release`]): hands off.
    released: bool,
}

impl HandOff {
    /// `steering`: each address with its steering. Only steering by the eBPF program can be
    /// handed off (SO_INCOMING_CPU has no slot to clear).
    pub fn new(steering: Vec<(SocketAddr, CpuSteering)>, cpus: &[usize]) -> HandOff {
        HandOff {
            groups: steering
                .into_iter()
                .filter(|(_, s)| s.method() == Method::Ebpf)
                .collect(),
            cpus: cpus.to_vec(),
            cleared: vec![false; cpus.len()],
            released: false,
        }
    }

    /// Before a binary upgrade hands the listeners to a new process: takes them out of this
    /// process's steering maps. A socket can hold a slot of one reuseport socket array only,
    /// so the new process could not put them in its own map (`EBUSY`) and would be left with
    /// this process's program choosing for its zones by this process's map; emptied, the
    /// new process's program and map take over each group. Until they do, new connections
    /// take the kernel's reuseport hash (none is refused). Nothing changes here again until
    /// [`HandOff::resume`].
    pub fn release(&mut self) {
        self.released = true;
        for (addr, s) in &self.groups {
            for &cpu in &self.cpus {
                if let Err(e) = s.clear(cpu) {
                    tracing::warn!("binary upgrade: steering of CPU {cpu} on {addr}: {e}");
                }
            }
        }
    }

    /// The upgrade failed and this process keeps serving: every zone's listener gets its CPU
    /// back (a full zone's when it has room again). `sockets` as for [`HandOff::check`].
    pub fn resume(&mut self, sockets: &[(SocketAddr, Vec<OwnedFd>)]) {
        if !self.released {
            return;
        }
        self.released = false;
        for (z, &cpu) in self.cpus.iter().enumerate() {
            if self.cleared[z] {
                continue;
            }
            for (addr, s) in &self.groups {
                let mine = sockets
                    .iter()
                    .find(|(a, _)| a == addr)
                    .and_then(|(_, fds)| fds.get(z));
                if let Some(fd) = mine {
                    if let Err(e) = s.set_fd(cpu, fd.as_fd()) {
                        tracing::warn!("zone {z}: steering of CPU {cpu} on {addr}: {e}");
                    }
                }
            }
        }
    }

    /// Clears the slot of each zone that became full and restores the slot of each that has
    /// room again. `wakers`: by zone number; `sockets`: the zones' listeners by address, in
    /// zone order (the control thread's duplicates: an address a reload removed is gone from
    /// them, so its steering is left alone).
    pub fn check(&mut self, wakers: &[Waker], sockets: &[(SocketAddr, Vec<OwnedFd>)]) {
        if self.groups.is_empty() || self.released {
            return;
        }
        for (z, w) in wakers.iter().enumerate() {
            let full = w.is_full();
            if full == self.cleared[z] {
                continue;
            }
            let cpu = self.cpus[z];
            for (addr, s) in &self.groups {
                let mine = sockets
                    .iter()
                    .find(|(a, _)| a == addr)
                    .and_then(|(_, fds)| fds.get(z));
                let r = match (full, mine) {
                    (true, _) => s.clear(cpu),
                    (false, Some(fd)) => s.set_fd(cpu, fd.as_fd()),
                    (false, None) => Ok(()),
                };
                if let Err(e) = r {
                    tracing::warn!("zone {z}: steering of CPU {cpu} on {addr}: {e}");
                }
            }
            self.cleared[z] = full;
            if full {
                tracing::warn!(
                    "zone {z} is full: new connections on CPU {cpu} go to any zone (kernel hash) until it has room"
                );
            } else {
                tracing::info!("zone {z} has room again: CPU {cpu}'s connections are its own");
            }
        }
    }
}
