//! What every role needs of a client connection ([`Base`]: handle generation, listener,
//! client address, transport, deadline, input held back, pause and EOF).

use std::net::SocketAddr;
use std::time::Instant;

use crate::transport::Transport;

/// The part of a client connection that does not depend on its role.
pub struct Base {
    /// Bumped for each connection in this slot: timers and upstream records name a
    /// connection by (handle, generation), so nothing reaches a successor by mistake.
    pub gen: u32,
    /// Index of the listen address in `routes.listen` (it is re-indexed on reload).
    pub listener: u32,
    /// The client's address: the connection's peer, or what a PROXY header said.
    pub addr: Option<SocketAddr>,
    /// The listen address it was accepted on.
    pub local: Option<SocketAddr>,
    /// The current request's client address when `real_ip_from` made it another than
    /// `addr`'s (for the access log).
    pub real_ip: Option<std::net::IpAddr>,
    pub tr: Transport,
    pub deadline: Instant,
    /// When the connection's timer-wheel entry fires (None: it has none). An entry that
    /// fires before the deadline is filed again at the deadline; a deadline earlier than the
    /// entry gets an entry of its own.
    pub wheel_at: Option<Instant>,
    /// Input received and not consumed yet (a partial head, pipelined requests, bytes for a
    /// tunnel that is still connecting).
    pub inbuf: Vec<u8>,
    /// The role stopped reading (or holds input back): arriving bytes are buffered.
    pub paused: bool,
    /// The client closed its write side.
    pub eof: bool,
    /// Since when the connection waits for a request (accepted, or its last response
    /// queued): the oldest idle ones are closed first when the zone runs short of slots.
    pub idle_since: Instant,
    /// Output pending at the last send-timeout check: a deadline passes only when nothing
    /// moved for a whole `send_timeout`.
    pub last_out: u64,
}

impl Base {
    pub fn new(now: Instant) -> Base {
        Base {
            gen: 0,
            listener: 0,
            addr: None,
            local: None,
            real_ip: None,
            tr: Transport::Plain,
            deadline: now,
            wheel_at: None,
            inbuf: Vec::new(),
            paused: false,
            eof: false,
            last_out: 0,
            idle_since: now,
        }
    }

    /// Resets the slot for a new connection.
    pub fn open(
        &mut self,
        listener: u32,
        addr: Option<SocketAddr>,
        local: Option<SocketAddr>,
        tr: Transport,
        now: Instant,
    ) {
        self.idle_since = now;
        self.gen = self.gen.wrapping_add(1);
        self.listener = listener;
        self.addr = addr;
        self.local = local;
        self.real_ip = None;
        self.tr = tr;
        self.wheel_at = None;
        self.inbuf.clear();
        self.paused = false;
        self.eof = false;
        self.last_out = 0;
    }

    /// Drops buffered input when the connection closes (a large buffer is freed, not kept).
    pub fn release(&mut self) {
        // A TLS session's buffers and keys go with the connection, not with the next one
        // in this slot.
        self.tr = Transport::Plain;
        if self.inbuf.capacity() > 64 * 1024 {
            self.inbuf = Vec::new();
        } else {
            self.inbuf.clear();
        }
    }
}
