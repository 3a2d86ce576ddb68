//! Connection generations. A handle (a direct-descriptor slot on io_uring, a descriptor on
//! epoll) is reused once its connection has closed; each reuse bumps the slot's generation,
//! and every completion or event tag carries the generation it was issued for, so one that
//! arrives for a connection already closed (a cancelled receive, an epoll event in the same
//! batch as the close) is never taken for its successor's.
//!
//! A leaf: both drivers and the driver-neutral [`crate::io`] use it.

/// Width of a generation: what io_uring's `user_data` keeps beside the kind and the slot
/// (`kind:8 | gen:24 | index:32`, `uring/userdata.rs`); epoll's event tokens keep as much.
pub(crate) const GEN_BITS: u32 = 24;

/// The bits of a generation.
pub(crate) const GEN_MASK: u32 = (1 << GEN_BITS) - 1;

/// The generation after `gen`, wrapping within [`GEN_BITS`].
#[inline]
pub(crate) fn next_gen(gen: u32) -> u32 {
    gen.wrapping_add(1) & GEN_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_within_the_mask() {
        assert_eq!(next_gen(0), 1);
        assert_eq!(next_gen(GEN_MASK), 0);
    }
}
