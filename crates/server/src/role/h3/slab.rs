//! Small response frames of a connection's streams made in shared buffers
//! ([`FrameSlab`]).
//!
//! quinn-proto keeps a stream's bytes until the client acknowledges them, so a response's
//! frames outlive the turn that made them. Given one allocation each, a batch of a hundred
//! small responses is a hundred allocations freed together when one ACK covers them, a
//! pattern glibc's per-thread cache does not absorb (it keeps seven chunks of a size): at
//! 10 connections × 100 streams of 64 B responses the allocator was a fifth of the zone's
//! time. Here small frames are copied into a slab of [`SLAB`] bytes that many responses
//! share (each a [`Bytes`] view of its part), so one allocation serves dozens of
//! responses.
//!
//! What a slab can pin: a client that acknowledges all but one response of a slab keeps the
//! slab; that is at most [`SLAB`] bytes per unacknowledged small response, less than one
//! piece of a file a stream may hold (`stream.rs`'s `FILE_PIECE`).

use bytes::{Bytes, BytesMut};

/// Bytes of one slab.
pub(super) const SLAB: usize = 8 * 1024;

/// Frames up to this size go into a slab; larger ones keep their own allocation (a copy
/// would cost more than the allocation it saves).
pub(super) const SMALL: usize = 1024;

/// A connection's slab being filled.
#[derive(Default)]
pub(super) struct FrameSlab {
    buf: BytesMut,
}

impl FrameSlab {
    /// `frames` as bytes that quinn-proto can keep: copied into the slab when small, taken
    /// whole otherwise (`frames` is left empty either way, its allocation kept when copied).
    pub fn take(&mut self, frames: &mut Vec<u8>) -> Bytes {
        if frames.len() > SMALL {
            return Bytes::from(std::mem::take(frames));
        }
        if self.buf.capacity() - self.buf.len() < frames.len() {
            // The full slab lives on in the views already handed out, freed with the last.
            self.buf = BytesMut::with_capacity(SLAB);
        }
        self.buf.extend_from_slice(frames);
        frames.clear();
        self.buf.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_frames_share_a_slab_and_keep_their_bytes() {
        let mut slab = FrameSlab::default();
        let mut views = Vec::new();
        for i in 0..100u8 {
            let mut frames = vec![i; 200];
            views.push(slab.take(&mut frames));
            assert!(frames.is_empty());
        }
        for (i, v) in views.iter().enumerate() {
            assert_eq!(&v[..], &[i as u8; 200][..]);
        }
        // 200-byte frames: 40 to a slab, so the first and the 40th share one buffer.
        let (a, b) = (views[0].as_ptr() as usize, views[39].as_ptr() as usize);
        assert_eq!(b - a, 39 * 200);
        let c = views[40].as_ptr() as usize;
        assert!(c < a || c >= a + SLAB, "the 41st starts a new slab");
    }

    #[test]
    fn large_frames_keep_their_own_allocation() {
        let mut slab = FrameSlab::default();
        let mut frames = vec![7u8; SMALL + 1];
        let ptr = frames.as_ptr();
        let b = slab.take(&mut frames);
        assert_eq!(b.as_ptr(), ptr);
        assert_eq!(b.len(), SMALL + 1);
        assert!(frames.is_empty());
    }
}
