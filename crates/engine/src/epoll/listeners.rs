//! When the zone accepts: the listening sockets leave the epoll set while `max_conns`
//! accepted connections are open (until one closes) or while the process is out of
//! descriptors (for a moment); connections wait in the kernel's accept queue meanwhile.
//! UDP listeners stay in the set throughout: a datagram takes no connection slot.

use std::io;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;

use crate::listener::Listener;
use std::time::{Duration, Instant};

use super::set::{EpollSet, T_LISTENER};

/// The zone's listening sockets, indexed by listener id, and whether they are in the epoll
/// set.
pub(super) struct Listeners {
    socks: Vec<Option<Listener>>,
    /// The listeners are in the epoll set: not taken out by a full table or a lack of
    /// descriptors.
    armed: bool,
    /// `max_conns` reached: accepting resumes when an accepted connection closes.
    table_full: bool,
    /// Out of descriptors: accepting resumes at this time.
    paused_until: Option<Instant>,
}

impl Listeners {
    pub(super) fn new() -> Self {
        Listeners {
            socks: Vec::new(),
            armed: true,
            table_full: false,
            paused_until: None,
        }
    }

    /// How many ids have been given out (closed listeners keep theirs).
    pub(super) fn len(&self) -> usize {
        self.socks.len()
    }

    pub(super) fn get(&self, id: u32) -> Option<&TcpListener> {
        self.socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .and_then(Listener::as_tcp)
    }

    /// The UDP socket of listener `id`, if it is one and open.
    pub(super) fn udp(&self, id: u32) -> Option<&UdpSocket> {
        match self.socks.get(id as usize) {
            Some(Some(Listener::Udp(u))) => Some(u),
            _ => None,
        }
    }

    /// Adds a listener under the next id, in the epoll set unless accepting is stopped
    /// (`arm` adds it with the others then); a UDP one always.
    pub(super) fn add(&mut self, set: &EpollSet, listener: Listener) -> io::Result<u32> {
        let id = self.socks.len() as u32;
        if self.armed || listener.is_udp() {
            set.ctl(
                libc::EPOLL_CTL_ADD,
                listener.as_raw_fd(),
                libc::EPOLLIN as u32,
                T_LISTENER | id as u64,
            )?;
        }
        self.socks.push(Some(listener));
        Ok(id)
    }

    /// Takes an id for a listener that could not be added, so that the ids the handler was
    /// given stay valid.
    pub(super) fn add_none(&mut self) {
        self.socks.push(None);
    }

    /// Closes listener `id` (closing the socket also removes it from the epoll set).
    pub(super) fn close(&mut self, id: u32) {
        if let Some(l) = self.socks.get_mut(id as usize) {
            *l = None;
        }
    }

    /// Open stream listeners.
    pub(super) fn streams_open(&self) -> u32 {
        self.socks.iter().flatten().filter(|l| !l.is_udp()).count() as u32
    }

    /// Closes every listener.
    pub(super) fn close_all(&mut self) {
        for l in self.socks.iter_mut() {
            *l = None;
        }
    }

    /// When accepting resumes after a lack of descriptors, if it is paused.
    pub(super) fn paused_until(&self) -> Option<Instant> {
        self.paused_until
    }

    /// `max_conns` connections are open: stop accepting until one closes (`closed`).
    /// New connections wait in the kernel's accept queue meanwhile, as on io_uring.
    /// Whether `max_conns` connections are open (accepting waits for one to close).
    pub(super) fn is_full(&self) -> bool {
        self.table_full
    }

    pub(super) fn table_full(&mut self, set: &EpollSet, max_conns: u32) {
        if self.table_full {
            return;
        }
        self.table_full = true;
        tracing::warn!(
            "connection limit reached (max_conns {max_conns}): new connections wait in the listen queue until one closes"
        );
        self.disarm(set);
    }

    /// An accepted connection closed, leaving `accepted` of `max_conns`: accepting resumes
    /// if the table was full.
    pub(super) fn closed(&mut self, set: &EpollSet, accepted: u32, max_conns: u32) {
        if self.table_full && accepted < max_conns {
            self.table_full = false;
            self.arm(set);
        }
    }

    /// Out of descriptors: stop accepting for a while.
    pub(super) fn pause(&mut self, set: &EpollSet) {
        self.paused_until = Some(Instant::now() + Duration::from_millis(100));
        self.disarm(set);
    }

    pub(super) fn resume(&mut self, set: &EpollSet) {
        self.paused_until = None;
        self.arm(set);
    }

    /// Takes the listeners out of the epoll set.
    fn disarm(&mut self, set: &EpollSet) {
        if !self.armed {
            return;
        }
        self.armed = false;
        for l in self.socks.iter().flatten().filter(|l| !l.is_udp()) {
            set.remove(l.as_raw_fd());
        }
    }

    /// Puts the listeners back into the epoll set, unless the table is full or accepting is
    /// paused for lack of descriptors.
    fn arm(&mut self, set: &EpollSet) {
        if self.armed || self.table_full || self.paused_until.is_some() {
            return;
        }
        self.armed = true;
        for (id, l) in self.socks.iter().enumerate() {
            if let Some(l) = l.as_ref().filter(|l| !l.is_udp()) {
                let _ = set.ctl(
                    libc::EPOLL_CTL_ADD,
                    l.as_raw_fd(),
                    libc::EPOLLIN as u32,
                    T_LISTENER | id as u64,
                );
            }
        }
    }
}
