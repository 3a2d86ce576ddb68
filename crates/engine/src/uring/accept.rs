//! Multishot accept into direct descriptors (`IORING_OP_ACCEPT` with
//! `IORING_ACCEPT_MULTISHOT` and `IORING_FILE_INDEX_ALLOC`, Linux 5.19): one submission
//! accepts connection after connection, each straight into a free slot of the zone's
//! registered-file table. The slot number is the connection's handle. Where the handler
//! wants peer addresses, `on_accept` waits for the answer of a `SO_PEERNAME` query
//! (`peer.rs`).

use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, squeue, types};

use super::recv;
use super::state::UringDriver;
use super::userdata::{pack, Kind};
use crate::handler::Handler;
use crate::io::{ConnId, ConnState, ListenerId};

/// At or below this many free slots, accepts are single-shot: a multishot accept takes every
/// connection queued on the listener in one go (the kernel loops until the queue is empty),
/// and past the last free slot it would accept a connection only to close it (ENFILE). One
/// at a time, a connection is accepted only into a free slot; at none, connections wait in
/// the listener's queue until one closes. The margin covers a burst of queued connections
/// arriving while the table fills; beyond it, multishot accepts keep their batching.
fn single_below(max_conns: u32) -> u32 {
    (max_conns / 8).max(64)
}

pub(super) fn arm(d: &mut UringDriver, id: u32) {
    let free = d.max_conns.saturating_sub(d.accepted);
    let multishot = free > single_below(d.max_conns);
    let l = &mut d.listeners[id as usize];
    let Some(sock) = l.sock.as_ref() else { return };
    if l.udp || l.armed || l.closing || free == 0 {
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
    // stays open until the accept's last completion (`complete_cancel` drops it after
    // cancellation).
    unsafe { d.push(&e) };
}

pub(super) fn complete<H: Handler>(d: &mut UringDriver, h: &mut H, id: u32, res: i32, flags: u32) {
    if !cqueue::more(flags) {
        d.listeners[id as usize].armed = false;
    }
    let sweeping = d.listeners[id as usize].sweeping;
    if sweeping && res < 0 {
        // The queue is empty (EAGAIN), or the kernel predates IORING_ACCEPT_DONTWAIT
        // (EINVAL), or accepting failed: the sweep is over.
        return release(d, id);
    }
    if res >= 0 {
        let c = ConnId(res as u32);
        d.accepted += 1;
        near_limit(d, id);
        d.open_slot(c);
        d.io.conn_mut(c).open();
        d.wake.waker.add_accept();
        if d.peer_addrs {
            query_peer(d, c, id); // on_accept follows its answer
        } else {
            recv::arm(d, c);
            h.on_accept(&mut d.io, c, ListenerId(id));
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
                    d.max_conns
                );
                d.accept_backoff = true;
            }
            libc::EMFILE | libc::ENOMEM | libc::ENOBUFS => {
                tracing::warn!("accept: {e}: out of descriptors or memory; raise `ulimit -n` (accepting again shortly)");
                d.accept_backoff = true;
            }
            // The socket no longer listens (shut down for a graceful stop): accepting on it
            // is over.
            libc::EINVAL => {
                let l = &mut d.listeners[id as usize];
                l.closing = true;
                if !l.armed {
                    release(d, id); // no accept in flight refers to it
                }
            }
            _ => tracing::debug!("accept: {e}"),
        }
    }
    let l = &d.listeners[id as usize];
    if sweeping {
        sweep(d, id);
    } else if !cqueue::more(flags) {
        if !l.closing && !d.accept_backoff {
            arm(d, id);
        } else if l.closing && !l.cancelling && l.sock.is_some() {
            // The cancelled accept's last completion, after the cancellation's own.
            sweep(d, id);
        }
    }
}

/// After an accept: a multishot accept stops once few slots are left (single-shot ones
/// follow), and none is armed at the limit.
fn near_limit(d: &mut UringDriver, id: u32) {
    let free = d.max_conns.saturating_sub(d.accepted);
    if free == 0 && !d.at_limit {
        d.at_limit = true;
        d.wake.waker.set_full(true);
        tracing::warn!(
            "connection limit reached (max_conns {}): new connections wait in the listen queue until one closes",
            d.max_conns
        );
    }
    let l = &d.listeners[id as usize];
    if l.armed && l.multishot && free <= single_below(d.max_conns) {
        let e =
            opcode::AsyncCancel2::new(types::CancelBuilder::user_data(pack(Kind::Accept, 0, id)))
                .build()
                .user_data(pack(Kind::CancelQuiet, 0, id));
        // SAFETY: a cancellation refers to no memory of ours. The accept's final
        // completion (ECANCELED) re-arms it, single-shot.
        unsafe { d.push(&e) };
    }
}

/// Asks for the peer address of a just-accepted connection on listener `id`.
fn query_peer(d: &mut UringDriver, c: ConnId, id: u32) {
    let v6 = d.listeners[id as usize].v6;
    let gen = d.io.conns[c.index()].gen;
    let e = d.peers.entry(c, gen, id, v6);
    d.io.handover_started();
    // SAFETY: the kernel writes at most the entry's length into the slot's boxed storage in
    // `d.peers`, which is never freed while the driver lives (`PeerQueries`); the slot is
    // closed only after cancellation.
    unsafe { d.push(&e) };
}

/// The peer address query answered: the connection starts receiving, and the handler
/// learns of it.
pub(super) fn complete_peer<H: Handler>(
    d: &mut UringDriver,
    h: &mut H,
    c: ConnId,
    gen: u32,
    res: i32,
) {
    let id = d.peers.listener(c);
    d.io.handover_done();
    let conn = &d.io.conns[c.index()];
    if conn.gen != gen || conn.state != ConnState::Open {
        return;
    }
    if res > 0 {
        d.io.conns[c.index()].peer = d.peers.addr(c, res as usize);
    } else if res != -libc::ENOTCONN {
        tracing::debug!("SO_PEERNAME: {}", crate::sys::errno(res));
    }
    recv::arm(d, c);
    h.on_accept(&mut d.io, c, ListenerId(id));
}

/// An accepted connection closed: a slot is free again.
pub(super) fn slot_freed(d: &mut UringDriver) {
    d.accepted = d.accepted.saturating_sub(1);
    // Below the limit every listener is armed already (each accept's last completion re-arms
    // it, `complete`), except in a back-off, which `poll` ends; only at the limit were
    // accepts left unarmed.
    if !d.at_limit {
        return;
    }
    d.at_limit = false;
    d.wake.waker.set_full(false);
    tracing::info!(
        "below the connection limit (max_conns {}) again: accepting",
        d.max_conns
    );
    for id in 0..d.listeners.len() as u32 {
        arm(d, id);
    }
}

/// Stops accepting on one listener; its socket is closed once the accept is cancelled.
pub(super) fn cancel(d: &mut UringDriver, id: u32) {
    let Some(l) = d.listeners.get_mut(id as usize) else {
        return;
    };
    if l.closing || l.sock.is_none() {
        return;
    }
    l.closing = true;
    if !l.armed {
        return sweep(d, id); // no accept in flight refers to it
    }
    l.cancelling = true;
    let e = opcode::AsyncCancel2::new(types::CancelBuilder::user_data(pack(Kind::Accept, 0, id)))
        .build()
        .user_data(pack(Kind::CancelAccept, 0, id));
    // SAFETY: a cancellation refers to no memory of ours.
    unsafe { d.push(&e) };
}

pub(super) fn complete_cancel(d: &mut UringDriver, id: u32) {
    // The accept's last completion may come before or after this one: the socket is swept
    // once both have (`complete` sweeps when it comes last).
    let l = &mut d.listeners[id as usize];
    l.cancelling = false;
    if !l.armed {
        sweep(d, id);
    }
}

/// Takes, without waiting, a connection left in closing listener `id`'s queue; called again
/// after each one, and the socket is let go once the queue is empty.
///
/// Another process may keep serving on the same socket (a binary upgrade), and the kernel
/// wakes one accept per new connection, the first one queued on the socket: while this
/// zone's accept was being cancelled, the connections that woke it and the cancellation
/// won were left in the queue with no other accept woken for them. Until the next
/// connection woke the other process they waited, indefinitely on a quiet server. Taken
/// here, they are served (with `Connection: close`, the handler draining). An accept that
/// does not wait is never woken, so the sweep loses no wake-up of its own.
fn sweep(d: &mut UringDriver, id: u32) {
    let free = d.max_conns.saturating_sub(d.accepted);
    let l = &mut d.listeners[id as usize];
    let Some(sock) = l.sock.as_ref() else { return };
    debug_assert!(!l.armed, "a sweep with an accept of the listener in flight");
    if free == 0 || d.exiting {
        // Accepted with no free slot, a connection would be closed (ENFILE); accepted by a
        // zone that is exiting, it would be closed unanswered: it stays queued for the
        // other process.
        return release(d, id);
    }
    l.sweeping = true;
    l.armed = true;
    let e = opcode::Accept::new(
        types::Fd(sock.as_raw_fd()),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )
    .file_index(Some(types::DestinationSlot::auto_target()))
    .build()
    .user_data(pack(Kind::Accept, 0, id));
    let e = dont_wait(e);
    // SAFETY: as in `arm`: the entry refers to the listening socket only, which stays open
    // until this accept's completion (`complete` lets it go, or sweeps again).
    unsafe { d.push(&e) };
}

/// `IORING_ACCEPT_DONTWAIT` (Linux 6.10) on an accept: EAGAIN at once on an empty queue, no
/// waiting. The io-uring crate's `Accept` builder has no setting for the accept's own flags,
/// which the kernel reads from the entry's `ioprio` field.
fn dont_wait(e: squeue::Entry) -> squeue::Entry {
    /// Where `ioprio` (a u16) lies in an `io_uring_sqe`: after `opcode` and `flags`, one byte
    /// each (the kernel's ABI, `include/uapi/linux/io_uring.h`).
    const IOPRIO: usize = 2;
    const DONTWAIT: u16 = 1 << 1;
    // SAFETY: `squeue::Entry` is `#[repr(C)]` around the kernel's 64-byte `io_uring_sqe`
    // and nothing else, so it has exactly that layout: the two are the same bytes, and any
    // 64 bytes are a valid value of both (plain integers and unions of them, no pointers
    // the compiler relies on). No memory is shared: the entry is moved in and out.
    let mut raw: [u8; 64] = unsafe { std::mem::transmute::<squeue::Entry, [u8; 64]>(e) };
    let prio = u16::from_ne_bytes([raw[IOPRIO], raw[IOPRIO + 1]]) | DONTWAIT;
    raw[IOPRIO..IOPRIO + 2].copy_from_slice(&prio.to_ne_bytes());
    // SAFETY: as above, the same 64 bytes back into the entry they came from.
    unsafe { std::mem::transmute::<[u8; 64], squeue::Entry>(raw) }
}

/// Listener `id` accepts no more: its socket goes, and the handler learns when no listener
/// is left to hand it a connection ([`crate::Io::accepting`]).
fn release(d: &mut UringDriver, id: u32) {
    if d.listeners[id as usize].sock.take().is_some() {
        let n = d.io.accepts_open.saturating_sub(1);
        d.io.set_accepts_open(n);
    }
}
