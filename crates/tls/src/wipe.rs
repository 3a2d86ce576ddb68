//! Key material overwritten with zeros when it is dropped, so that a connection's keys do not
//! outlive it in freed memory.
//!
//! Bytes ringx holds itself (IVs, the kernel's `tls12_crypto_info_*`) are wiped with
//! [`zeroize`]. *ring*'s key schedules (AEAD keys, HMAC keys) are plain values that *ring* does
//! not wipe: they are held in a [`Wiped`], which wipes their bytes after dropping them.
//! aws-lc-rs keeps its keys in aws-lc's allocations, which `OPENSSL_free` cleanses.

use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::Deref;

/// A value whose own bytes are overwritten with zeros when it is dropped. Only its own bytes:
/// for values that hold their secrets inline (no pointer to other memory holding them).
pub(crate) struct Wiped<T>(ManuallyDrop<T>);

impl<T> Wiped<T> {
    pub(crate) fn new(v: T) -> Wiped<T> {
        Wiped(ManuallyDrop::new(v))
    }
}

impl<T> Deref for Wiped<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Drop for Wiped<T> {
    fn drop(&mut self) {
        // SAFETY: the value is dropped once, here (in a `ManuallyDrop`, the drop glue does
        // not drop it again), and never used after: `self` is being dropped. Its bytes are
        // then written through a pointer to `MaybeUninit<T>` (the same size and layout, as
        // `ManuallyDrop<T>` is `repr(transparent)`), for which any bytes are valid and which
        // has no `Drop` and no references; they are this struct's own, and `&mut self` gives
        // exclusive access to them.
        unsafe {
            ManuallyDrop::drop(&mut self.0);
            // A raw pointer taken after the drop, with no reference to the dropped value.
            let bytes = std::ptr::addr_of_mut!(self.0).cast::<MaybeUninit<T>>();
            zeroize::zeroize_flat_type(bytes);
        }
    }
}

impl<T> zeroize::ZeroizeOnDrop for Wiped<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drops what `slot` holds in place and returns the bytes it leaves there.
    fn dropped_bytes<T, const N: usize>(mut slot: MaybeUninit<Wiped<T>>) -> [u8; N] {
        assert_eq!(size_of::<Wiped<T>>(), N);
        // SAFETY: `slot` holds an initialised value (the callers make it with `new`), dropped
        // once here and never read as one again.
        unsafe { std::ptr::drop_in_place(slot.as_mut_ptr()) };
        // SAFETY: the drop above wrote every one of the slot's N bytes (zeroize_flat_type
        // writes all of `size_of::<T>()`), so they are initialised, and any bytes are valid
        // `u8`s; the slot is still alive (it is ours until this function returns).
        unsafe { slot.as_ptr().cast::<[u8; N]>().read() }
    }

    #[test]
    fn the_bytes_of_a_wiped_value_are_zeros_once_it_is_dropped() {
        let key = [0x5a_u8; 32];
        assert_eq!(*Wiped::new(key), key, "read through");
        let bytes: [u8; 32] = dropped_bytes(MaybeUninit::new(Wiped::new(key)));
        assert_eq!(bytes, [0; 32]);
    }

    #[test]
    fn a_ring_key_schedule_is_wiped() {
        use ring::aead::{LessSafeKey, UnboundKey, CHACHA20_POLY1305};
        // ChaCha20's key schedule is the key itself: the whole value is zeros afterwards.
        let k = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &[0x5a; 32]).unwrap());
        let bytes: [u8; size_of::<LessSafeKey>()] = dropped_bytes(MaybeUninit::new(Wiped::new(k)));
        assert!(bytes.iter().all(|&b| b == 0));
        let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA384, &[0x5a; 48]);
        let bytes: [u8; size_of::<ring::hmac::Key>()] =
            dropped_bytes(MaybeUninit::new(Wiped::new(k)));
        assert!(bytes.iter().all(|&b| b == 0));
    }
}
