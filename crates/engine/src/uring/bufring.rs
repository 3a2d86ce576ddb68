//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`, Linux 5.19): the kernel picks a
//! receive buffer when data arrives instead of one being pinned per idle connection, so ten
//! thousand idle keep-alive connections cost no receive memory.
//!
//! Hand-written because the `io-uring` crate exposes only the registration call and the entry
//! type; the ring memory, the tail publication and the recycling policy are ours.
//!
//! Memory: one anonymous mapping holds the ring (`entries` × 16-byte `io_uring_buf`) and, after
//! it, the buffers. The kernel reads ring entries up to the tail we publish and writes
//! received bytes into the buffers they name; we read a buffer only after its completion
//! arrived and give it back (a new ring entry) only after the handler returned.
//!
//! Incremental consumption (`IOU_PBUF_RING_INC`, Linux 6.12) where the kernel has it: a
//! receive takes only the bytes it fills from the buffer at the head, and the next receive (on
//! any connection) continues right after them. Small messages then pack into one buffer instead
//! of each taking the first bytes of a fresh 16 KiB buffer: the bytes the kernel writes and we
//! parse sit in a few hot cache lines, where FIFO reuse of whole buffers walked the entire
//! pool (16 MiB by default, every message at a 16 KiB stride, so in the same cache sets) and
//! missed the cache on each copy (the profile that showed it is in bench/NOTEBOOK.md).

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// Buffer group id of the zone's receive buffer ring.
pub(super) const BGID: u16 = 0;
/// Buffer group id of the zone's datagram buffer ring (whole buffers: `dgram_recv.rs`).
pub(super) const BGID_DGRAM: u16 = 1;

pub(crate) struct BufRing {
    base: NonNull<u8>,
    map_len: usize,
    ring_bytes: usize,
    entries: u16,
    buf_size: u32,
    /// Our copy of the tail; published to the kernel by `publish`.
    tail: u16,
    published: u16,
    /// Buffers are consumed incrementally (see the module docs).
    inc: bool,
    /// Incremental mode: per buffer, where the next completion's bytes start.
    cursor: Vec<u32>,
}

/// `IOU_PBUF_RING_INC` (include/uapi/linux/io_uring.h; not re-exported by the io-uring crate).
const IOU_PBUF_RING_INC: u16 = 2;

impl BufRing {
    /// Maps and registers `entries` (a power of two, at most 32768) buffers of `buf_size`,
    /// consumed incrementally where the kernel can and `incremental` asks for it (a datagram
    /// must land whole in one buffer, so datagram rings never are).
    pub(crate) fn new(
        ring: &IoUring,
        bgid: u16,
        entries: u16,
        buf_size: u32,
        incremental: bool,
    ) -> io::Result<Self> {
        if !entries.is_power_of_two() || entries > 32768 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("receive buffers must be a power of two up to 32768, not {entries}"),
            ));
        }
        let page = 4096usize;
        let ring_bytes =
            (entries as usize * std::mem::size_of::<BufRingEntry>()).next_multiple_of(page);
        let map_len = ring_bytes + entries as usize * buf_size as usize;
        // SAFETY: an anonymous private mapping with no address hint; the result is checked for
        // MAP_FAILED before use and unmapped exactly once in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("map {map_len} bytes of receive buffers: {e}"),
            ));
        }
        let base = NonNull::new(ptr.cast::<u8>()).expect("mmap never returns null on success");
        let mut br = BufRing {
            base,
            map_len,
            ring_bytes,
            entries,
            buf_size,
            tail: 0,
            published: 0,
            inc: false,
            cursor: Vec::new(),
        };
        // SAFETY: the ring area is page-aligned, `entries` entries long, zero-filled (so the
        // tail starts at 0), and lives until Drop, which unregisters nothing but unmaps only
        // after the owning driver dropped the io_uring (field order in UringDriver).
        let register = |flags: u16| unsafe {
            ring.submitter().register_buf_ring_with_flags(
                base.as_ptr() as u64,
                entries,
                bgid,
                flags,
            )
        };
        match register(if incremental { IOU_PBUF_RING_INC } else { 0 }) {
            Ok(()) if !incremental => {}
            Ok(()) => {
                br.inc = true;
                br.cursor = vec![0; entries as usize];
            }
            // Before Linux 6.12: whole buffers per receive.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => register(0).map_err(|e| {
                io::Error::new(e.kind(), format!("register provided-buffer ring: {e}"))
            })?,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("register provided-buffer ring: {e}"),
                ))
            }
        }
        for bid in 0..entries {
            br.push(bid);
        }
        br.publish();
        Ok(br)
    }

    fn entry_ptr(&self, idx: u16) -> *mut BufRingEntry {
        let i = (idx & (self.entries - 1)) as usize;
        // SAFETY: i < entries, and the ring area holds `entries` entries from `base`.
        unsafe { self.base.as_ptr().cast::<BufRingEntry>().add(i) }
    }

    fn buf_ptr(&self, bid: u16) -> *mut u8 {
        debug_assert!(bid < self.entries);
        // SAFETY: bid < entries; the buffer area starts after the ring and holds `entries`
        // buffers of `buf_size` bytes.
        unsafe {
            self.base
                .as_ptr()
                .add(self.ring_bytes + bid as usize * self.buf_size as usize)
        }
    }

    /// Accounts for a receive completion that put `len` (> 0) bytes in buffer `bid`: returns
    /// where in the buffer they start and whether the kernel is done with the buffer, which
    /// may then be pushed back once the bytes have been handled. Completions must be passed in
    /// the order they were reaped (the kernel fills a buffer in that order).
    pub(crate) fn consume(&mut self, bid: u16, len: usize, flags: u32) -> (usize, bool) {
        if !self.inc {
            return (0, true);
        }
        let cur = &mut self.cursor[bid as usize];
        let start = *cur as usize;
        if io_uring::cqueue::buffer_more(flags) {
            *cur += len as u32;
            (start, false)
        } else {
            *cur = 0;
            (start, true)
        }
    }

    /// Whether a completion naming `bid` with no bytes (end of stream) gave the buffer up. In
    /// incremental mode it did not: no byte was taken, so the kernel still holds it at the head
    /// (kernels before the 2026 stable fix report such a completion without BUF_MORE anyway, so
    /// the flag cannot be trusted here).
    pub(crate) fn empty_released(&self) -> bool {
        !self.inc
    }

    /// Bytes `start..start + len` of buffer `bid`, filled by the completion that named it.
    ///
    /// The returned slice must be dropped before `bid` is pushed back (the borrow of `self`
    /// does not enforce it because recycling goes through `&mut self` only after dispatch).
    pub(crate) fn get(&self, bid: u16, start: usize, len: usize) -> &[u8] {
        assert!(
            bid < self.entries && start + len <= self.buf_size as usize,
            "kernel named buffer {bid} bytes {start}+{len}"
        );
        // SAFETY: the range lies in buffer `bid` of our mapping (checked above); the kernel
        // finished writing it before posting the completion we are handling (the CQE read is
        // Acquire in the io-uring crate), and the buffer is not pushed back before the handler
        // returns. In incremental mode the kernel goes on filling the buffer *after* this
        // range, never inside it.
        unsafe { std::slice::from_raw_parts(self.buf_ptr(bid).add(start), len) }
    }

    /// Gives buffer `bid` back (visible to the kernel at the next `publish`).
    pub(crate) fn push(&mut self, bid: u16) {
        let e = self.entry_ptr(self.tail);
        // SAFETY: the entry at our private tail is beyond the published tail, so the kernel
        // does not read it yet; we own the write. The tail field aliases entry 0's `resv`,
        // which is why entries are written field by field rather than as a whole struct.
        unsafe {
            (*e).set_addr(self.buf_ptr(bid) as u64);
            (*e).set_len(self.buf_size);
            (*e).set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes pushed buffers to the kernel (one release store per batch).
    pub(crate) fn publish(&mut self) {
        if self.tail == self.published {
            return;
        }
        // SAFETY: the tail is the u16 at offset 14 of the first entry, inside our mapping and
        // 2-byte aligned. Release orders the entry writes above before the kernel's Acquire
        // load of the tail, so it never sees an entry before its contents.
        unsafe {
            let tail =
                BufRingEntry::tail(self.base.as_ptr().cast::<BufRingEntry>()) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
        self.published = self.tail;
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `new`, once. The driver drops its IoUring (and
        // with it the kernel's reference to this ring) before this field.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}
