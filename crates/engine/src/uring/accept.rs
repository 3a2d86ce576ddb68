//! Multishot accept into direct descriptors (`IORING_OP_ACCEPT` with
//! `IORING_ACCEPT_MULTISHOT` and `IORING_FILE_INDEX_ALLOC`, Linux 5.19): one submission
//! accepts connection after connection, each straight into a free slot of the zone's
//! registered-file table. The slot number is the connection's handle.

use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, types};

use super::userdata::{pack, Kind};
use super::UringDriver;
use crate::handler::Handler;
use crate::io::{ConnId, ListenerId};

/// At or below this many free slots, accepts are single-shot: a multishot accept takes every
/// connection queued on the listener in one go (the kernel loops until the queue is empty),
/// and past the last free slot it would accept a connection only to close it (ENFILE). One
/// at a time, a connection is accepted only into a free slot; at none, connections wait in
/// the listener's queue until one closes. The margin covers a burst of queued connections
/// arriving while the table fills; beyond it, multishot accepts keep their batching.
fn single_below(max_conns: u32) -> u32 {
    (max_conns / 8).max(64)
}

impl UringDriver {
    pub(super) fn arm_accept(&mut self, id: u32) {
        let free = self.max_conns.saturating_sub(self.accepted);
        let multishot = free > single_below(self.max_conns);
        let l = &mut self.listeners[id as usize];
        let Some(sock) = l.sock.as_ref() else { return };
        if l.armed || l.closing || free == 0 {
            return;
        }
        l.armed = true;
        l.multishot = multishot;
        let fd = types::Fd(sock.as_raw_fd());
        let e = if multishot {
            opcode::AcceptMulti::new(fd)
                .allocate_file_index(true)
                .build()
        } else {
            opcode::Accept::new(fd, std::ptr::null_mut(), std::ptr::null_mut())
                .file_index(Some(types::DestinationSlot::auto_target()))
                .build()
        }
        .user_data(pack(Kind::Accept, 0, id));
        // SAFETY: the entry refers to the listening socket only (no address buffer), which
        // stays open until the accept's last completion (`complete_cancel_accept` drops it
        // after cancellation).
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_accept<H: Handler>(&mut self, h: &mut H, id: u32, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.listeners[id as usize].armed = false;
        }
        if res >= 0 {
            let c = ConnId(res as u32);
            self.accepted += 1;
            self.near_limit(id);
            self.open_slot(c);
            self.io.conn_mut(c).open();
            self.wake.waker.add_accept();
            if self.peer_addrs {
                self.query_peer(c, id); // on_accept follows its answer
            } else {
                self.arm_recv(c);
                h.on_accept(&mut self.io, c, ListenerId(id));
            }
        } else if res != -libc::ECANCELED {
            let e = crate::sys::errno(res);
            match -res {
                // ENFILE: no free slot (another ring's connections share nothing with ours,
                // so this is our own table). The kernel had accepted the connection already
                // and closed it (the client sees a reset); accepting resumes shortly.
                libc::ENFILE => {
                    tracing::warn!(
                        "connection limit reached (max_conns {}): a connection was refused",
                        self.max_conns
                    );
                    self.accept_backoff = true;
                }
                libc::EMFILE | libc::ENOMEM | libc::ENOBUFS => {
                    tracing::warn!("accept: {e}: out of descriptors or memory; raise `ulimit -n` (accepting again shortly)");
                    self.accept_backoff = true;
                }
                // The socket no longer listens (shut down for a graceful stop): accepting on
                // it is over.
                libc::EINVAL => {
                    let l = &mut self.listeners[id as usize];
                    l.closing = true;
                    if !l.armed {
                        l.sock = None;
                    }
                }
                _ => tracing::debug!("accept: {e}"),
            }
        }
        if !cqueue::more(flags) && !self.listeners[id as usize].closing && !self.accept_backoff {
            self.arm_accept(id);
        }
    }

    /// After an accept: a multishot accept stops once few slots are left (single-shot ones
    /// follow), and none is armed at the limit.
    fn near_limit(&mut self, id: u32) {
        let free = self.max_conns.saturating_sub(self.accepted);
        if free == 0 && !self.at_limit {
            self.at_limit = true;
            self.wake.waker.set_full(true);
            tracing::warn!(
                "connection limit reached (max_conns {}): new connections wait in the listen queue until one closes",
                self.max_conns
            );
        }
        let l = &self.listeners[id as usize];
        if l.armed && l.multishot && free <= single_below(self.max_conns) {
            let e = opcode::AsyncCancel2::new(types::CancelBuilder::user_data(pack(
                Kind::Accept,
                0,
                id,
            )))
            .build()
            .user_data(pack(Kind::CancelQuiet, 0, id));
            // SAFETY: a cancellation refers to no memory of ours. The accept's final
            // completion (ECANCELED) re-arms it, single-shot.
            unsafe { self.push(&e) };
        }
    }

    /// An accepted connection closed: a slot is free again.
    pub(super) fn accepted_closed(&mut self) {
        self.accepted = self.accepted.saturating_sub(1);
        if self.at_limit {
            self.at_limit = false;
            self.wake.waker.set_full(false);
            tracing::info!(
                "below the connection limit (max_conns {}) again: accepting",
                self.max_conns
            );
        }
        for id in 0..self.listeners.len() as u32 {
            self.arm_accept(id);
        }
    }

    /// Stops accepting on every listener (graceful shutdown). Each listening socket is
    /// closed once its accept is cancelled.
    pub(super) fn cancel_accepts(&mut self) {
        for id in 0..self.listeners.len() as u32 {
            self.cancel_accept(id);
        }
    }

    /// Stops accepting on one listener; its socket is closed once the accept is cancelled.
    pub(super) fn cancel_accept(&mut self, id: u32) {
        let Some(l) = self.listeners.get_mut(id as usize) else {
            return;
        };
        if l.closing || l.sock.is_none() {
            return;
        }
        l.closing = true;
        if !l.armed {
            l.sock = None; // no accept in flight refers to it
            return;
        }
        let e =
            opcode::AsyncCancel2::new(types::CancelBuilder::user_data(pack(Kind::Accept, 0, id)))
                .build()
                .user_data(pack(Kind::CancelAccept, 0, id));
        // SAFETY: a cancellation refers to no memory of ours.
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_cancel_accept(&mut self, id: u32) {
        // The accept's final completion is posted before the cancel's: the socket is unused.
        self.listeners[id as usize].sock = None;
    }
}
