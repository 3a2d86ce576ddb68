//! Setting the one submission field the io-uring crate's builders leave out: `optlen` (a
//! union with `file_index` at byte 44 of `struct io_uring_sqe`), used by socket commands
//! (`SO_PEERNAME`'s buffer length) and by multishot receives (their total byte limit).

use io_uring::squeue;

/// Byte offset of `optlen` in `struct io_uring_sqe`.
const SQE_OPTLEN_OFFSET: usize = 44;
const _: () = assert!(std::mem::size_of::<squeue::Entry>() == 64);

/// `e` with `optlen` set.
pub(super) fn with_optlen(e: squeue::Entry, optlen: u32) -> squeue::Entry {
    // SAFETY: `Entry` is `#[repr(C)]` around the 64-byte `io_uring_sqe` (size asserted above),
    // so it can be viewed as bytes; `optlen` lives at a fixed offset the builders leave zero.
    let mut bytes: [u8; 64] = unsafe { std::mem::transmute(e) };
    bytes[SQE_OPTLEN_OFFSET..SQE_OPTLEN_OFFSET + 4].copy_from_slice(&optlen.to_ne_bytes());
    // SAFETY: the same bytes with one plain integer field set: still a valid entry.
    unsafe { std::mem::transmute::<[u8; 64], squeue::Entry>(bytes) }
}
