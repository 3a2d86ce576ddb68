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

impl UringDriver {
    pub(super) fn arm_accept(&mut self, id: u32) {
        let l = &mut self.listeners[id as usize];
        let Some(sock) = l.sock.as_ref() else { return };
        if l.armed || l.closing {
            return;
        }
        l.armed = true;
        let e = opcode::AcceptMulti::new(types::Fd(sock.as_raw_fd()))
            .allocate_file_index(true)
            .build()
            .user_data(pack(Kind::Accept, 0, id));
        // SAFETY: the entry refers to the listening socket only, which stays open until the
        // accept's last completion (`complete_cancel_accept` drops it after cancellation).
        unsafe { self.push(&e) };
    }

    pub(super) fn complete_accept<H: Handler>(&mut self, h: &mut H, id: u32, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.listeners[id as usize].armed = false;
        }
        if res >= 0 {
            let c = ConnId(res as u32);
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
                // ENFILE: no free slot. The kernel had accepted the connection already and
                // closed it (the client sees a reset); the accept is re-armed next iteration.
                libc::ENFILE | libc::EMFILE | libc::ENOMEM | libc::ENOBUFS => {
                    tracing::warn!("accept: {e}: connection table full; raise max_conns (accepting again shortly)");
                    self.accept_backoff = true;
                }
                _ => tracing::debug!("accept: {e}"),
            }
        }
        if !cqueue::more(flags) && !self.listeners[id as usize].closing && !self.accept_backoff {
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
